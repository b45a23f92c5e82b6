"""Spark -> sidecar -> Spark: the writer and the reader against the sequential reference.

Each source's rows arrive in micro-batches of three partitions spread round robin, so
the partitions of a batch overlap in ``ts``; the output read back through the streaming
reader must equal ``run_sn`` row for row, a batch read before it the same rows, and a second
run identical output.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from stretch import build, generate, run_sn
from stretch.client import StretchClient
from tests.spark.conftest import (
    TOKEN,
    finish,
    read_output,
    stream_into,
    wait_output_finished,
    write_files,
)

pytestmark = pytest.mark.spark

SCALEJOIN = {"ws": 2000}
WORDCOUNT = {"wa": 1000, "ws": 2000}


def scalejoin_tables() -> list[pa.Table]:
    """Two streams with distinct ts per stream and values close enough to match often."""
    tables = generate.scalejoin(600, 500.0, 3)
    for name, modulus in {"x": 300, "y": 300.0, "a": 300, "b": 300.0}.items():
        side = 0 if name in tables[0].column_names else 1
        table = tables[side]
        column = pa.array(np.mod(table.column(name).to_numpy(), modulus))
        tables[side] = table.set_column(table.schema.get_field_index(name), name, column)
    return tables


def wordcount_tables() -> list[pa.Table]:
    (tweets,) = generate.tweets(600, 100.0, 5, vocabulary=50)
    return [tweets.set_column(0, "ts", pa.array(np.arange(600, dtype=np.int64) * 10))]


def run_through_spark(
    spark: object,
    client: StretchClient,
    url: str,
    tmp_path: Path,
    name: str,
    operator: str,
    params: dict[str, int],
    tables: list[pa.Table],
) -> pa.Table:
    client.create_operator(name, operator, params, parallelism=2)
    queries = []
    for source, table in enumerate(tables):
        directory = tmp_path / f"{name}-in{source}"
        write_files(table, directory, files=2)
        queries.append(
            stream_into(spark, url, name, source, directory, tmp_path / f"{name}-ck{source}")
        )
    for query in queries:
        finish(query)
    for source in range(len(tables)):
        client.close_source(name, source)
    status = wait_output_finished(client, name)
    assert [s["tuples_in"] for s in status["sources"]] == [t.num_rows for t in tables]
    batch = (  # commits nothing: the streaming read below reads every row again
        spark.read.format("stretch")  # type: ignore[attr-defined]
        .option("url", url)
        .option("token", TOKEN)
        .option("operator", name)
        .option("rowsPerPartition", "200")
        .load()
        .toArrow()
    )
    out = read_output(spark, url, name, tmp_path / f"{name}-read", max_rows=500)
    assert out.column("offset").to_pylist() == list(range(out.num_rows))
    assert batch.sort_by("offset").equals(out)
    return out.drop_columns(["offset"])


@pytest.mark.parametrize(
    ("operator", "params", "tables", "runs"),
    [
        ("scalejoin", SCALEJOIN, scalejoin_tables, 2),
        ("wordcount", WORDCOUNT, wordcount_tables, 1),
    ],
)
def test_round_trip_equals_the_sequential_reference(
    spark: object,
    client: StretchClient,
    sidecar: str,
    tmp_path: Path,
    operator: str,
    params: dict[str, int],
    tables: object,
    runs: int,
) -> None:
    inputs = tables()  # type: ignore[operator]
    expected = run_sn(build(operator, params), inputs)
    assert expected.num_rows > 500  # the reader needs more than one micro-batch
    out = run_through_spark(spark, client, sidecar, tmp_path, operator, operator, params, inputs)
    assert out.cast(expected.schema).equals(expected)
    for run in range(2, runs + 1):
        again = run_through_spark(
            spark, client, sidecar, tmp_path, f"{operator}-{run}", operator, params, inputs
        )
        assert again.equals(out)
