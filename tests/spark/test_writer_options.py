"""Writer options: a TimestampType event time, ``lateRows`` = ``drop`` | ``fail``, watermarks."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from stretch import build, run_sn
from stretch.client import StretchClient
from stretch.spark import forward_watermarks
from tests.spark.conftest import (
    TIMEOUT_S,
    TOKEN,
    finish,
    stream_into,
    wait_output_finished,
    write_files,
)

pytestmark = pytest.mark.spark

FORWARD = {"columns": "v:int", "inputs": 1}


def rows(ts: np.ndarray) -> pa.Table:
    return pa.table({"ts": pa.array(ts, pa.int64()), "v": pa.array(np.arange(len(ts)) * 3)})


def read_all(client: StretchClient, name: str) -> pa.Table:
    client.close_source(name, 0)
    wait_output_finished(client, name)
    return client.read_all(name, 60)


def test_timestamp_type_event_time(
    spark: object, client: StretchClient, sidecar: str, tmp_path: Path
) -> None:
    table = rows(np.unique(np.random.default_rng(1).integers(0, 10_000, 300)))
    with_time = pa.table(
        {"v": table.column("v"), "event_time": table.column("ts").cast(pa.timestamp("ms", "UTC"))}
    )
    write_files(with_time, tmp_path / "in", files=2)
    client.create_operator("event-time", "forward", FORWARD)
    finish(
        stream_into(
            spark, sidecar, "event-time", 0, tmp_path / "in", tmp_path / "ck",
            timestampColumn="event_time",
        )
    )  # fmt: skip
    out = read_all(client, "event-time")
    assert out.equals(run_sn(build("forward", FORWARD), [table]))


def late_input(tmp_path: Path) -> tuple[pa.Table, pa.Table]:
    """Two micro-batches; the second holds 40 rows older than the first one's last ts."""
    first = rows(np.arange(1000, 1100))
    second = rows(np.concatenate([np.arange(1050, 1090), np.arange(1100, 1160)]))
    directory = tmp_path / "in"
    write_files(pa.concat_tables([first, second]), directory, files=2)
    return first, second


def test_late_rows_drop_counts_and_drops(
    spark: object, client: StretchClient, sidecar: str, tmp_path: Path
) -> None:
    first, second = late_input(tmp_path)
    client.create_operator("late-drop", "forward", FORWARD)
    finish(
        stream_into(
            spark, sidecar, "late-drop", 0, tmp_path / "in", tmp_path / "ck", lateRows="drop"
        )
    )
    status = client.status("late-drop")
    assert status["sources"][0]["late_tuples"] == 40
    assert status["sources"][0]["tuples_in"] == 160
    metrics = client.metrics()
    assert 'stretch_late_tuples_total{operator="late-drop",source="0"} 40.0' in metrics
    kept = pa.concat_tables([first, second.slice(40)])
    assert read_all(client, "late-drop").equals(run_sn(build("forward", FORWARD), [kept]))


def test_late_rows_fail_stops_the_query_with_the_sidecars_message(
    spark: object, client: StretchClient, sidecar: str, tmp_path: Path
) -> None:
    late_input(tmp_path)
    client.create_operator("late-fail", "forward", FORWARD)
    query = stream_into(spark, sidecar, "late-fail", 0, tmp_path / "in", tmp_path / "ck")
    with pytest.raises(Exception, match="before the released watermark 1099"):
        finish(query)
    status = client.status("late-fail")
    assert status["sources"][0]["tuples_in"] == 100
    assert status["sources"][0]["late_tuples"] == 40


def test_the_writer_creates_the_operator_and_forwards_the_querys_watermark(
    spark: SparkSession, client: StretchClient, sidecar: str, tmp_path: Path
) -> None:
    table = rows(np.arange(0, 20_000, 100))
    with_time = pa.table(
        {"v": table.column("v"), "event_time": table.column("ts").cast(pa.timestamp("ms", "UTC"))}
    )
    write_files(with_time, tmp_path / "in", files=2)
    query = (
        spark.readStream.schema(spark.read.parquet(str(tmp_path / "in")).schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(tmp_path / "in"))
        .withWatermark("event_time", "1 second")
        .writeStream.format("stretch")
        .option("url", sidecar)
        .option("token", TOKEN)
        .option("operator", "watermark")
        .option("create", json.dumps({"operator": "forward", "params": FORWARD}))
        .option("allowedLatenessMs", "1000000")
        .option("timestampColumn", "event_time")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    forward_watermarks(spark, query, sidecar, "watermark", 0, TOKEN)
    finish(query)
    expected = 9_900 - 1_000  # the first batch's last event time minus the delay
    deadline = time.monotonic() + TIMEOUT_S
    while client.status("watermark")["watermarks"][0] != expected:
        assert time.monotonic() < deadline, client.status("watermark")["watermarks"]
        time.sleep(0.02)


def test_create_refuses_a_finished_operator_or_other_params_naming_the_way_out(
    spark: SparkSession, client: StretchClient, sidecar: str, tmp_path: Path
) -> None:
    write_files(rows(np.arange(0, 1000, 100)), tmp_path / "in", files=1)
    client.create_operator("rerun", "forward", FORWARD)
    client.close_source("rerun", 0)  # a finished run

    def start(params: dict[str, object], checkpoint: str) -> None:
        create = json.dumps({"operator": "forward", "params": params})
        query = stream_into(spark, sidecar, "rerun", 0, tmp_path / "in", tmp_path / checkpoint,
                            create=create)  # fmt: skip
        finish(query)

    way_out = "delete it first (DELETE /v1/operators/rerun"
    with pytest.raises(Exception, match=r"operator 'rerun' exists and its source 0 is closed"):
        start(FORWARD, "ck1")
    with pytest.raises(Exception, match=re.escape(way_out)):
        start(FORWARD, "ck2")
    with pytest.raises(Exception, match=r"operator 'rerun' exists as forward with params"):
        start({"columns": "v:float", "inputs": 1}, "ck3")
    assert client.status("rerun")["sources"][0]["tuples_in"] == 0


def test_a_query_continuing_into_an_operator_without_its_batches_is_refused(
    spark: object, client: StretchClient, sidecar: str, tmp_path: Path
) -> None:
    """A query restarted from its checkpoint against an operator that lacks its earlier
    micro-batches (an in-memory sidecar restarted; here the operator is created again)
    fails with the sidecar's message instead of going on without them. A first
    micro-batch without rows is committed too, so it does not make a later one look new.
    """
    directory = tmp_path / "in"
    table = rows(np.arange(100, 160))
    write_files(table, directory, files=2)
    empty = directory / "part-000-empty.parquet"  # the oldest file: micro-batch 0
    pq.write_table(table.schema.empty_table(), empty)
    os.utime(empty, (999_000, 999_000))
    client.create_operator("continues", "forward", FORWARD)
    finish(stream_into(spark, sidecar, "continues", 0, directory, tmp_path / "ck"))
    assert client.status("continues")["sources"][0]["tuples_in"] == 60
    client.delete_operator("continues")
    client.create_operator("continues", "forward", FORWARD)
    later = directory / "part-100.parquet"
    pq.write_table(rows(np.arange(200, 210)), later)
    os.utime(later, (2_000_000, 2_000_000))
    query = stream_into(spark, sidecar, "continues", 0, directory, tmp_path / "ck")
    with pytest.raises(Exception, match="no earlier batch of this writer"):
        finish(query)
    assert client.status("continues")["sources"][0]["tuples_in"] == 0
