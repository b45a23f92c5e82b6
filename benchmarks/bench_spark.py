"""Spark -> sidecar -> Spark: the ``stretch`` writer and reader against Spark's own sinks.

For micro-batches of 10,000 and 100,000 rows (a Parquet file per micro-batch, read as a
file stream with ``maxFilesPerTrigger=1``), the same input goes, in the same Spark session
and the same run, to

* ``noop``: Spark's no-op sink (what a micro-batch costs Spark itself);
* ``stretch``: the ``stretch`` writer into a ``forward`` operator of an embedded sidecar
  (executors stage their partitions, the driver commits);
* ``foreachBatch``: ``foreachBatch`` collecting the batch as Arrow on the driver and
  POSTing it in one request (the simple alternative);
* ``python_floor``: a Python data source writer that drains its partitions' Arrow
  batches and commits nothing: what Spark's Python data source API costs by itself (the
  per-batch planning call, the write tasks' Arrow hand-off to a Python worker, the commit
  in the driver's Python worker), the floor under any Python writer;

and then the operator's output is read back by the ``stretch`` reader
(``maxRowsPerTrigger`` = the batch size) into a ``noop`` sink. Each case reports rows/s
(rows / the sum of the micro-batches' ``triggerExecution`` times) and the median
per-micro-batch latency, as medians over the runs; the first micro-batch of every query
(query start-up) is left out and a warm-up run precedes the timed ones. The target: the
``stretch`` writer at >= 0.8x the ``noop`` sink's rows/s at 100k-row micro-batches.

The ``stretch`` case also measures the write-to-readable latency of each micro-batch: a
thread long-polls the operator's output log (``GET .../output``, what the reader reads;
it commits nothing, so the reader case still reads everything) while the query runs, and
a micro-batch's latency is the time from Spark starting it (its progress ``timestamp``) to
the poll that returned its rows: ``readable_ms`` all but the rows of its largest ``ts``
(here one row), ``readable_all_ms`` all of them. Rows of a source's largest ``ts`` wait in
its reorder buffer until a later ``ts`` (the next micro-batch) or a watermark arrives,
since rows of equal ``ts`` go out together in content order (docs/design.md decision 2).
``--demo`` also runs ``stretch demo`` (a trading day through Spark and ``hedge``) and
records its end-to-end rows/s.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pyspark.sql.datasource import (  # noqa: E402
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)

from benchmarks._args import non_negative_int, positive_int, prog  # noqa: E402
from benchmarks._util import interleaved, machine, medians, progress, write  # noqa: E402
from stretch.client import StretchClient  # noqa: E402
from stretch.demo import run_demo  # noqa: E402
from stretch.spark.session import local_session  # noqa: E402
from stretch.spark.sidecar import EmbeddedSidecar  # noqa: E402

FORWARD: dict[str, str | int | float] = {"columns": "v:int,w:float", "inputs": 1}
CAPACITY = 1 << 18
POLL_WAIT_MS = 100
POLL_MAX_ROWS = 1_000_000


class DrainWriter(DataSourceStreamArrowWriter):
    """Counts its partition's rows and sends them nowhere; commits nothing."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """Drain the partition (on an executor)."""
        sum(batch.num_rows for batch in iterator)
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Nothing to make visible."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Nothing to discard."""


class DrainSource(DataSource):
    """The ``drain`` format: a Python data source with nothing behind it."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "drain"

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        """The writer that drains."""
        return DrainWriter()


class OutputPoller:
    """Long-polls an operator's output log in a thread; when each offset became readable."""

    def __init__(self, url: str, operator: str) -> None:
        self.url = url
        self.operator = operator
        self.seen: list[tuple[float, int]] = []  # (wall time, next offset) after each poll
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="output-poller", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        offset = 0
        try:
            with StretchClient(self.url) as client:
                while not self._stop.is_set():
                    table, offset = client.output(
                        self.operator, offset, max_rows=POLL_MAX_ROWS, wait_ms=POLL_WAIT_MS
                    )
                    if table.num_rows:
                        self.seen.append((time.time(), offset))
        except BaseException as exc:  # handed to stop()
            self.error = exc

    def stop(self) -> None:
        """Stop polling (within one long-poll); raise what the poller failed with."""
        self._stop.set()
        self._thread.join(60)
        if self.error is not None:
            raise self.error

    def readable_at(self, end_offset: int) -> float:
        """When offsets below ``end_offset`` were all readable (NaN if never seen)."""
        return next((t for t, offset in self.seen if offset >= end_offset), float("nan"))


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


def finished_batches(query: Any) -> list[dict[str, Any]]:
    """The progress of a finished query's micro-batches that had rows."""
    assert query.awaitTermination(3600), f"query {query.name} did not finish"
    if query.exception() is not None:
        raise query.exception()
    return [p for p in query.recentProgress if p["numInputRows"]]


def timings(query: Any, rows: int) -> dict[str, float]:
    """rows/s and median batch latency of a finished query, its first batch left out."""
    progress_ = finished_batches(query)[1:]
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

    def drain(self) -> dict[str, float]:
        query = (
            self._stream()
            .writeStream.format("drain")
            .option("checkpointLocation", self._checkpoint("drain"))
            .trigger(availableNow=True)
            .start()
        )
        return timings(query, self.rows)

    def stretch(self) -> dict[str, float]:
        checkpoint = self._checkpoint("stretch")
        with StretchClient(self.url) as client:
            operator = self._operator(client, "stretch")
            poller = OutputPoller(self.url, operator)
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
            batches = finished_batches(query)
            poller.stop()
            client.close_source(operator, 0)
            client.wait_finished(operator, 600)
        self.last_operator = operator
        return {
            **result,
            "readable_ms_p50": self._readable_ms(batches, poller, held=1),
            "readable_all_ms_p50": self._readable_ms(batches, poller, held=0),
        }

    @staticmethod
    def _readable_ms(batches: list[dict[str, Any]], poller: OutputPoller, held: int) -> float:
        """Median over micro-batches (the first left out) of start -> rows readable.

        ``forward`` gives one output row per input row, in order, and every ``ts`` of the
        input is distinct, so micro-batch k's rows end at the output offset of the rows of
        batches 0..k; ``held``: rows at its end not waited for (its largest ``ts``).
        """
        latencies, end = [], 0
        for k, batch in enumerate(batches):
            end += batch["numInputRows"]
            started = datetime.fromisoformat(batch["timestamp"].replace("Z", "+00:00"))
            if k:
                readable = poller.readable_at(end - held)
                latencies.append((readable - started.timestamp()) * 1000)
        return statistics.median(latencies) if latencies else float("nan")

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
    parser = argparse.ArgumentParser(prog=prog(), description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=positive_int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--batches", type=positive_int, default=6, help="micro-batches per query")
    parser.add_argument("--runs", type=positive_int, default=3, help="timed runs per case")
    parser.add_argument("--master", default="local[*]", help="the Spark master")
    parser.add_argument("--output", default="spark", help="results/<OUTPUT>.json")
    parser.add_argument(
        "--demo",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="also run `stretch demo` N times",
    )
    args = parser.parse_args()
    facts = machine()
    results: dict[str, Any] = {"machine": facts, "batches": args.batches, "runs": args.runs}
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as scratch, EmbeddedSidecar() as sc:
        spark = local_session("bench_spark", args.master)
        spark.dataSource.register(DrainSource)
        for size in args.sizes:
            bench = Bench(spark, sc.url, Path(scratch), size, args.batches)

            def stretch_then_read(bench: Bench = bench) -> dict[str, float]:
                written = bench.stretch()
                read = bench.reader()
                return {
                    "rows_per_s": written["rows_per_s"],
                    "batch_ms_p50": written["batch_ms_p50"],
                    "readable_ms_p50": written["readable_ms_p50"],
                    "readable_all_ms_p50": written["readable_all_ms_p50"],
                    "read_rows_per_s": read["rows_per_s"],
                    "read_batch_ms_p50": read["batch_ms_p50"],
                }

            cases: dict[str, Callable[[], dict[str, float]]] = {
                "noop": bench.noop,
                "stretch": stretch_then_read,
                "foreachBatch": bench.foreach_batch,
                "python_floor": bench.drain,
            }
            progress(f"{size}-row micro-batches: warm-up")
            for case in cases.values():
                case()
            samples = interleaved(args.runs, cases)
            summary: dict[str, Any] = {name: medians(runs) for name, runs in samples.items()}
            summary["stretch_vs_noop"] = (
                summary["stretch"]["rows_per_s"] / summary["noop"]["rows_per_s"]
            )
            summary["stretch_vs_foreachBatch"] = (
                summary["stretch"]["rows_per_s"] / summary["foreachBatch"]["rows_per_s"]
            )
            summary["python_floor_vs_noop"] = (
                summary["python_floor"]["rows_per_s"] / summary["noop"]["rows_per_s"]
            )
            results[str(size)] = {"medians": summary, "runs": samples}
            print(
                f"{size:>7}-row batches: noop {summary['noop']['rows_per_s']:,.0f} rows/s "
                f"({summary['noop']['batch_ms_p50']:.0f} ms/batch); stretch writer "
                f"{summary['stretch']['rows_per_s']:,.0f} rows/s "
                f"({summary['stretch']['batch_ms_p50']:.0f} ms/batch, "
                f"{summary['stretch_vs_noop']:.2f}x noop); foreachBatch+POST "
                f"{summary['foreachBatch']['rows_per_s']:,.0f} rows/s "
                f"({summary['foreachBatch']['batch_ms_p50']:.0f} ms/batch); Python floor "
                f"{summary['python_floor']['rows_per_s']:,.0f} rows/s "
                f"({summary['python_floor_vs_noop']:.2f}x noop); write-to-readable "
                f"{summary['stretch']['readable_ms_p50']:.0f} ms (last ts: "
                f"{summary['stretch']['readable_all_ms_p50']:.0f} ms); stretch reader "
                f"{summary['stretch']['read_rows_per_s']:,.0f} rows/s "
                f"({summary['stretch']['read_batch_ms_p50']:.0f} ms/batch)"
            )
        spark.stop()
    if args.demo:
        results["demo"] = demo_runs(args.demo)
    results["load_average_1m_end"] = os.getloadavg()[0]
    progress(f"wrote {write(args.output, results)}")


def demo_runs(runs: int) -> dict[str, Any]:
    """``stretch demo`` (100,000 trades, defaults) ``runs`` times: its end-to-end rows/s."""
    samples = []
    for run in range(runs):
        story = io.StringIO()
        assert run_demo(100_000, None, 7, 2, story), "the demo's output differed from replay"
        found = re.search(r"End to end ([\d.]+) s \(([\d,]+) trades/s", story.getvalue())
        assert found, f"no end-to-end figure in the demo's story:\n{story.getvalue()}"
        seconds = float(found.group(1))
        samples.append({"seconds": seconds, "rows_per_s": 100_000 / seconds})
        progress(f"demo run {run + 1}/{runs}: {seconds:.1f} s, load {os.getloadavg()[0]:.1f}")
    median = medians(samples)
    print(f"demo: 100,000 trades end to end in {median['seconds']:.1f} s "
          f"({median['rows_per_s']:,.0f} rows/s), median of {runs}")  # fmt: skip
    return {"medians": median, "runs": samples}


if __name__ == "__main__":
    main()
