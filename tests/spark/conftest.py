"""One Spark session and one sidecar per test process (each pytest-xdist worker), and helpers.

A Spark session costs 10-25 s to start and each micro-batch hundreds of ms, so the tests
share one session (``local[2]``) and one sidecar (uvicorn on loopback, in a thread), use
small inputs and few micro-batches, and name their operators apart.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pyspark = pytest.importorskip("pyspark", reason="the Spark tests need the extra stretch[spark]")

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.streaming.query import StreamingQuery  # noqa: E402

from stretch.client import StretchClient  # noqa: E402
from stretch.spark.session import local_session  # noqa: E402
from stretch.spark.sidecar import EmbeddedSidecar  # noqa: E402

TIMEOUT_S = 120
TOKEN = "spark-test-token"


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = local_session("stretch-tests", "local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def sidecar() -> Iterator[str]:
    with EmbeddedSidecar(TOKEN) as embedded:
        yield embedded.url


@pytest.fixture
def client(sidecar: str) -> Iterator[StretchClient]:
    with StretchClient(sidecar, token=TOKEN) as stretch_client:
        yield stretch_client


def write_files(table: pa.Table, directory: Path, files: int) -> None:
    """``table`` as ``files`` Parquet files of consecutive rows, oldest modified first.

    A file stream with ``maxFilesPerTrigger=1`` then reads one file per micro-batch, in
    this order.
    """
    directory.mkdir(parents=True)
    step = -(-table.num_rows // files)
    for k in range(files):
        path = directory / f"part-{k:03d}.parquet"
        pq.write_table(table.slice(k * step, step), path)
        os.utime(path, (1_000_000 + k, 1_000_000 + k))


def stream_into(
    spark: SparkSession,
    url: str,
    operator: str,
    source: int,
    directory: Path,
    checkpoint: Path,
    partitions: int = 3,
    **options: str,
) -> StreamingQuery:
    """Start a query writing ``directory``'s files into a source, a file per micro-batch.

    Each micro-batch is spread round robin over ``partitions`` partitions, so the
    partitions of one batch overlap in ``ts``.
    """
    frame = (
        spark.readStream.schema(spark.read.parquet(str(directory)).schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(directory))
        .repartition(partitions)
    )
    writer = (
        frame.writeStream.format("stretch")
        .option("url", url)
        .option("token", TOKEN)
        .option("operator", operator)
        .option("source", str(source))
        .option("checkpointLocation", str(checkpoint))
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer.trigger(availableNow=True).start()


def finish(query: StreamingQuery) -> None:
    """Wait for an ``availableNow`` query to end; raise its failure."""
    assert query.awaitTermination(TIMEOUT_S), f"query {query.id} did not finish"
    error = query.exception()
    if error is not None:
        raise error


def wait_output_finished(client: StretchClient, name: str) -> dict[str, Any]:
    """Wait until every output row of ``name`` is in its log; return the status."""
    return client.wait_finished(name, TIMEOUT_S)


def read_output(
    spark: SparkSession, url: str, operator: str, checkpoint: Path, max_rows: int = 1000
) -> pa.Table:
    """The operator's output through the streaming reader (``availableNow``), by offset."""
    table_name = f"out_{operator.replace('-', '_')}"
    query = (
        spark.readStream.format("stretch")
        .option("url", url)
        .option("token", TOKEN)
        .option("operator", operator)
        .option("maxRowsPerTrigger", str(max_rows))
        .load()
        .writeStream.format("memory")
        .queryName(table_name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    finish(query)
    return spark.table(table_name).orderBy("offset").toArrow()
