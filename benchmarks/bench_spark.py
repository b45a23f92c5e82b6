"""Spark -> sidecar -> Spark: the ``stretch`` writer and reader against Spark's own sinks.

For micro-batches of 10,000 and 100,000 rows (a Parquet file per micro-batch, read as a
file stream with ``maxFilesPerTrigger=1``), the same input goes, in the same Spark session
and the same run, to

* ``noop``: Spark's no-op sink (what a micro-batch costs Spark itself);
* ``stretch``: the ``stretch`` writer into a ``forward`` operator of an embedded sidecar
  (executors stage their partitions, the driver commits);
* ``foreachBatch``: ``foreachBatch`` collecting the batch as Arrow on the driver and
  POSTing it in one request (the simple alternative);

and then the operator's output is read back by the ``stretch`` reader
(``maxRowsPerTrigger`` = the batch size) into a ``noop`` sink. Each case reports rows/s
(rows / the sum of the micro-batches' ``triggerExecution`` times) and the median
per-micro-batch latency, as medians over the runs; the first micro-batch of every query
(query start-up) is left out and a warm-up run precedes the timed ones. The target: the
``stretch`` writer at >= 0.8x the ``noop`` sink's rows/s at 100k-row micro-batches.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._util import interleaved, machine, medians, progress, write  # noqa: E402
from stretch.client import StretchClient  # noqa: E402
from stretch.spark.session import local_session  # noqa: E402
from stretch.spark.sidecar import EmbeddedSidecar  # noqa: E402

FORWARD = {"columns": "v:int,w:float", "inputs": 1}
CAPACITY = 1 << 18


def make_input(directory: Path, batch_rows: int, batches: int) -> None:
    """``batches`` Parquet files of ``batch_rows`` rows, increasing ts, oldest first."""
    directory.mkdir(parents=True)
    rng = np.random.default_rng(batch_rows)
    for k in range(batches):
        ts = np.arange(k * batch_rows, (k + 1) * batch_rows, dtype=np.int64)
        table = pa.table(
            {"ts": ts, "v": rng.integers(0, 1000, batch_rows), "w": rng.random(batch_rows)}
        )
        path = directory / f"part-{k:04d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (1_000_000 + k, 1_000_000 + k))


def timings(query: Any, rows: int) -> dict[str, float]:
    """rows/s and median batch latency of a finished query, its first batch left out."""
    assert query.awaitTermination(3600), f"query {query.name} did not finish"
    if query.exception() is not None:
        raise query.exception()
    progress_ = [p for p in query.recentProgress if p["numInputRows"]][1:]
    if not progress_:
        return {"rows_per_s": float("nan"), "batch_ms_p50": float("nan")}
    ms = [p["durationMs"]["triggerExecution"] for p in progress_]
    counted = sum(p["numInputRows"] for p in progress_)
    return {"rows_per_s": counted / (sum(ms) / 1000), "batch_ms_p50": statistics.median(ms)}


class Bench:
    """The cases of one micro-batch size, sharing one session and one sidecar."""

    def __init__(self, spark: Any, url: str, scratch: Path, batch_rows: int, batches: int):
        self.spark = spark
        self.url = url
        self.scratch = scratch
        self.rows = batch_rows
        self.input = scratch / f"in-{batch_rows}"
        make_input(self.input, batch_rows, batches)
        self.schema = spark.read.parquet(str(self.input)).schema
        self.runs = 0
        self.last_operator = ""

    def _stream(self) -> Any:
        return (
            self.spark.readStream.schema(self.schema)
            .option("maxFilesPerTrigger", 1)
            .parquet(str(self.input))
        )

    def _checkpoint(self, name: str) -> str:
        self.runs += 1
        return str(self.scratch / f"ck-{name}-{self.rows}-{self.runs}")

    def _operator(self, client: StretchClient, name: str) -> str:
        operator = f"{name}-{self.rows}-{self.runs}"
        client.create_operator(operator, "forward", FORWARD, capacity=CAPACITY)
        return operator

    def noop(self) -> dict[str, float]:
        query = (
            self._stream()
            .writeStream.format("noop")
            .option("checkpointLocation", self._checkpoint("noop"))
            .trigger(availableNow=True)
            .start()
        )
        return timings(query, self.rows)

    def stretch(self) -> dict[str, float]:
        checkpoint = self._checkpoint("stretch")
        with StretchClient(self.url) as client:
            operator = self._operator(client, "stretch")
            query = (
                self._stream()
                .writeStream.format("stretch")
                .option("url", self.url)
                .option("operator", operator)
                .option("checkpointLocation", checkpoint)
                .trigger(availableNow=True)
                .start()
            )
            result = timings(query, self.rows)
            client.close_source(operator, 0)
            client.wait_finished(operator, 600)
        self.last_operator = operator
        return result

    def foreach_batch(self) -> dict[str, float]:
        checkpoint = self._checkpoint("foreach")
        url = self.url
        with StretchClient(url) as client:
            operator = self._operator(client, "foreach")

        def post(frame: Any, batch_id: int) -> None:
            with StretchClient(url) as batch_client:
                batch_client.add_batch(operator, 0, frame.toArrow(), batch_id=batch_id)

        query = (
            self._stream()
            .writeStream.foreachBatch(post)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        result = timings(query, self.rows)
        with StretchClient(url) as client:
            client.delete_operator(operator)
        return result

    def reader(self) -> dict[str, float]:
        """Read the last ``stretch`` case's output back (run after it)."""
        operator = self.last_operator
        query = (
            self.spark.readStream.format("stretch")
            .option("url", self.url)
            .option("operator", operator)
            .option("maxRowsPerTrigger", str(self.rows))
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", self._checkpoint("reader"))
            .trigger(availableNow=True)
            .start()
        )
        result = timings(query, self.rows)
        with StretchClient(self.url) as client:
            client.delete_operator(operator)
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--batches", type=int, default=6, help="micro-batches per query")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per case")
    parser.add_argument("--master", default="local[*]", help="the Spark master")
    parser.add_argument("--output", default="spark", help="results/<OUTPUT>.json")
    args = parser.parse_args()
    facts = machine()
    results: dict[str, Any] = {"machine": facts, "batches": args.batches, "runs": args.runs}
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as scratch, EmbeddedSidecar() as sc:
        spark = local_session("bench_spark", args.master)
        for size in args.sizes:
            bench = Bench(spark, sc.url, Path(scratch), size, args.batches)

            def stretch_then_read(bench: Bench = bench) -> dict[str, float]:
                written = bench.stretch()
                read = bench.reader()
                return {
                    "rows_per_s": written["rows_per_s"],
                    "batch_ms_p50": written["batch_ms_p50"],
                    "read_rows_per_s": read["rows_per_s"],
                    "read_batch_ms_p50": read["batch_ms_p50"],
                }

            cases: dict[str, Callable[[], dict[str, float]]] = {
                "noop": bench.noop,
                "stretch": stretch_then_read,
                "foreachBatch": bench.foreach_batch,
            }
            progress(f"{size}-row micro-batches: warm-up")
            for case in cases.values():
                case()
            samples = interleaved(args.runs, cases)
            summary = {name: medians(runs) for name, runs in samples.items()}
            summary["stretch_vs_noop"] = (
                summary["stretch"]["rows_per_s"] / summary["noop"]["rows_per_s"]
            )
            summary["stretch_vs_foreachBatch"] = (
                summary["stretch"]["rows_per_s"] / summary["foreachBatch"]["rows_per_s"]
            )
            results[str(size)] = {"medians": summary, "runs": samples}
            print(
                f"{size:>7}-row batches: noop {summary['noop']['rows_per_s']:,.0f} rows/s "
                f"({summary['noop']['batch_ms_p50']:.0f} ms/batch); stretch writer "
                f"{summary['stretch']['rows_per_s']:,.0f} rows/s "
                f"({summary['stretch']['batch_ms_p50']:.0f} ms/batch, "
                f"{summary['stretch_vs_noop']:.2f}x noop); foreachBatch+POST "
                f"{summary['foreachBatch']['rows_per_s']:,.0f} rows/s "
                f"({summary['foreachBatch']['batch_ms_p50']:.0f} ms/batch); stretch reader "
                f"{summary['stretch']['read_rows_per_s']:,.0f} rows/s "
                f"({summary['stretch']['read_batch_ms_p50']:.0f} ms/batch)"
            )
        spark.stop()
    results["load_average_1m_end"] = os.getloadavg()[0]
    progress(f"wrote {write(args.output, results)}")


if __name__ == "__main__":
    main()
