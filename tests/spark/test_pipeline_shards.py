"""``stretch pipeline`` over two sidecar processes (the operator sharded): replay's output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stretch.cli import main
from stretch.sharded import connect
from stretch.spark.pipeline import read_output
from stretch.spark.sidecar import LocalSidecars
from tests.spark.test_pipeline import split_at_ts

pytestmark = pytest.mark.spark


def tied_streams(rows: int) -> list[pa.Table]:
    """ScaleJoin inputs with about 5 rows per ms: ties that Spark's partitions reorder."""
    rng = np.random.default_rng(5)
    left = pa.table(
        {
            "ts": np.sort(rng.integers(0, rows // 5, rows)),
            "x": rng.integers(0, 60, rows),
            "y": rng.integers(0, 60, rows).astype(float),
        }
    )
    right = pa.table(
        {
            "ts": np.sort(rng.integers(0, rows // 5, rows)),
            "a": rng.integers(0, 60, rows),
            "b": rng.integers(0, 60, rows).astype(float),
            "c": rng.random(rows),
            "d": rng.integers(0, 2, rows).astype(bool),
        }
    )
    return [left, right]


def test_two_sidecars_give_replays_output_and_a_rerun_adds_nothing(
    spark: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inputs = []
    for side, table in zip("lr", tied_streams(3000), strict=True):
        pq.write_table(table, tmp_path / f"{side}.parquet")
        split_at_ts(table, tmp_path / side, files=3)
        inputs += ["--input", str(tmp_path / side)]
    assert main(["replay", "scalejoin", "--param", "ws=20", "--input", str(tmp_path / "l.parquet"),
                 "--input", str(tmp_path / "r.parquet"),
                 "--output", str(tmp_path / "replay.parquet")]) == 0  # fmt: skip
    expected = pq.read_table(tmp_path / "replay.parquet")
    args = ["pipeline", "scalejoin", "--param", "ws=20", *inputs, "--output",
            str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ck"), "--sidecars", "2",
            "--parallelism", "2", "--files-per-trigger", "2"]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "started 2 sidecar processes" in printed
    assert expected.num_rows > 1000
    out = read_output(spark, tmp_path / "out")  # type: ignore[arg-type]
    assert out.cast(expected.schema).equals(expected)

    # The sidecars stop with the job and restore their operators at the rerun; the writers
    # and the reader continue from their checkpoints: no row is added or doubled.
    assert main(args) == 0
    rerun = capsys.readouterr().out
    assert "continuing 'pipeline-scalejoin'" in rerun
    assert "the rows counted below include the earlier runs" in rerun
    assert "the running operator keeps its parallelism, pool and autoscale setting" in rerun
    again = read_output(spark, tmp_path / "out")  # type: ignore[arg-type]
    assert again.cast(expected.schema).equals(expected)


def test_pipeline_over_running_shards_by_url(
    spark: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(9)
    words = ["spark", "stretch", "join", "band", "shard", "merge"]
    n = 800
    tweets = pa.table(
        {
            "ts": np.sort(rng.integers(0, 4000, n)),
            "user": [f"u{i % 7}" for i in range(n)],
            "tweet": [" ".join(rng.choice(words, 4)) for _ in range(n)],
        }
    )
    pq.write_table(tweets, tmp_path / "tweets.parquet")
    split_at_ts(tweets, tmp_path / "in", files=3)
    params = ["--param", "wa=200", "--param", "ws=600"]
    assert main(["replay", "wordcount", *params, "--input", str(tmp_path / "tweets.parquet"),
                 "--output", str(tmp_path / "replay.parquet")]) == 0  # fmt: skip
    expected = pq.read_table(tmp_path / "replay.parquet")
    with LocalSidecars(2, tmp_path / "shards") as shards:
        assert main(["pipeline", "wordcount", *params, "--input", str(tmp_path / "in"),
                     "--output", str(tmp_path / "out"), "--url", shards.url,
                     "--files-per-trigger", "1"]) == 0  # fmt: skip
        with connect(shards.url) as sharded:  # the reader's commits carried its cuts
            outputs = [s["output"] for s in sharded.status("pipeline-wordcount")["shards"]]
    offsets = [output["committed_offset"] for output in outputs]
    assert sum(offsets) > 0  # Spark commits a micro-batch's end at the next one's start
    assert [output["committed_cut"] for output in outputs] == [offsets, offsets]
    assert f"on {shards.url}" in capsys.readouterr().out
    out = read_output(spark, tmp_path / "out")  # type: ignore[arg-type]
    assert out.cast(expected.schema).equals(expected)
