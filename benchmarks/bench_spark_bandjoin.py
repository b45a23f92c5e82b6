"""`stretch pipeline scalejoin` against the band join a skilled Spark user writes himself.

Spark refuses a stream-stream join without an equality predicate, so a user who needs the
section 8.3 band join (``|x - a| <= 10``, ``|y - b| <= 10``, ``ts`` at most WS apart) in
Spark buckets it: each L row gets the buckets ``(floor(ts / WS), floor(x / 10))``, each R
row is exploded into the 3 x 3 neighbouring buckets of ``(floor(ts / WS), floor(a / 10))``,
the equality on the buckets lets Spark hash-partition the join, and the band and the time
range (which also lets Spark's watermark expire its join state) filter the candidates.
A pair's buckets differ by at most one on each axis, so the exploded equality finds every
pair, and each pair once.

Measured as whole processes on the same Parquet files (each stream split into part files
written in name order, modification times increasing with the names):

* ``stretch pipeline scalejoin`` (its own sidecar on loopback, ``local[*]``, its default
  micro-batches: as many whole part files as hold ``ROWS_PER_TRIGGER`` rows);
* the bucketed query as a Structured Streaming job (file streams, ``availableNow``, Parquet
  sink): ``--query stream``, with the part files per micro-batch the pipeline's writers
  take and with one per micro-batch (whichever is faster is the baseline: more rows per
  micro-batch made Spark's stream-stream join slower at 2 x 500k);
* the same query over static DataFrames: ``--query batch``.

All three outputs are read back and compared as sorted rows (``ts`` is the later tuple's,
as in the operator's output). Results go to ``results/spark_bandjoin.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from _args import positive_float, positive_int, prog
from _util import interleaved, machine, medians, write

from stretch import generate
from stretch.spark.files import files_per_batch, input_files
from stretch.spark.pipeline import ROWS_PER_TRIGGER

BAND = 10
OUTPUT_COLUMNS = ["ts", "x", "y", "a", "b", "c", "d"]
SCHEMAS = ("ts LONG, x LONG, y DOUBLE", "ts LONG, a LONG, b DOUBLE, c DOUBLE, d BOOLEAN")
"""The streams' columns (``stretch.generate.scalejoin``), declared as a user would."""
PROCESS_TIMEOUT_S = 1800
"""The longest a measured process may run."""


def spark_query(
    kind: str, left: Path, right: Path, output: Path, ws_ms: int, files_per_trigger: int
) -> None:
    """Run the bucketed band join in this process (a Spark session of its own)."""
    from pyspark.sql import functions as f  # noqa: PLC0415 - only the Spark processes need it

    from stretch.spark.session import local_session  # noqa: PLC0415

    # Spark's own join computes in the JVM: the default JIT is faster for it than the quick
    # tier our pipeline's session uses (2 x 500k rows, both orders: batch 1.11x-1.27x and
    # stream 1.24x-1.31x the time with the quick tier). It maps the archive of Spark's
    # classes that `stretch warm` built, as our pipeline's session does.
    spark = local_session("bucketed-band-join", java_options="")
    if kind == "stream":
        read = spark.readStream.option("maxFilesPerTrigger", files_per_trigger)
        lf = read.schema(SCHEMAS[0]).parquet(str(left))
        rf = read.schema(SCHEMAS[1]).parquet(str(right))
    else:
        lf = spark.read.schema(SCHEMAS[0]).parquet(str(left))
        rf = spark.read.schema(SCHEMAS[1]).parquet(str(right))
    delay = f"{ws_ms} milliseconds"
    lf = lf.select(
        "ts", "x", "y",
        f.timestamp_millis("ts").alias("lt"),
        f.floor(f.col("ts") / ws_ms).alias("lt_bucket"),
        f.floor(f.col("x") / BAND).alias("lx_bucket"),
    )  # fmt: skip
    rf = (
        rf.select(
            f.col("ts").alias("rts"), "a", "b", "c", "d",
            f.timestamp_millis("ts").alias("rt"),
            f.explode(f.array(*(f.floor(f.col("ts") / ws_ms) + i for i in (-1, 0, 1))))
            .alias("rt_bucket"),
        )
        .select(
            "*",
            f.explode(f.array(*(f.floor(f.col("a") / BAND) + i for i in (-1, 0, 1))))
            .alias("rx_bucket"),
        )
    )  # fmt: skip
    if kind == "stream":
        lf, rf = lf.withWatermark("lt", delay), rf.withWatermark("rt", delay)
    joined = lf.join(
        rf,
        (f.col("lt_bucket") == f.col("rt_bucket"))
        & (f.col("lx_bucket") == f.col("rx_bucket"))
        & (f.abs(f.col("x") - f.col("a")) <= BAND)
        & (f.abs(f.col("y") - f.col("b")) <= BAND)
        & f.col("rt").between(
            f.col("lt") - f.expr(f"INTERVAL {ws_ms} MILLISECONDS"),
            f.col("lt") + f.expr(f"INTERVAL {ws_ms} MILLISECONDS"),
        ),
    ).select(f.greatest("ts", "rts").alias("ts"), "x", "y", "a", "b", "c", "d")
    if kind == "stream":
        query = (
            joined.writeStream.format("parquet")
            .option("path", str(output))
            .option("checkpointLocation", str(output / "_checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        if not query.awaitTermination(PROCESS_TIMEOUT_S):
            query.stop()
            msg = f"the streaming query did not finish in {PROCESS_TIMEOUT_S} s"
            raise RuntimeError(msg)
    else:
        joined.write.parquet(str(output))
    spark.stop()


def write_parts(table: pa.Table, directory: Path, parts: int) -> None:
    """``table`` as ``parts`` Parquet files in name order, modification times in that order."""
    directory.mkdir(parents=True)
    step = -(-table.num_rows // parts)
    stamp = time.time() - parts
    for i in range(parts):
        path = directory / f"part-{i:05d}.parquet"
        pq.write_table(table.slice(i * step, step), path)
        os.utime(path, (stamp + i, stamp + i))


def sorted_rows(directory: Path) -> pa.Table:
    """The Parquet files under ``directory`` as one table of OUTPUT_COLUMNS, sorted."""
    files = sorted(p for p in directory.rglob("*.parquet") if "_checkpoint" not in p.parts)
    table = pa.concat_tables(pq.read_table(p).select(OUTPUT_COLUMNS) for p in files)
    table = table.cast(pa.schema([(n, table.schema.field(n).type) for n in OUTPUT_COLUMNS]))
    return table.take(pc.sort_indices(table, [(n, "ascending") for n in OUTPUT_COLUMNS]))


def timed(command: list[str], log: Path) -> float:
    """Run ``command`` as a process; its wall time (its output goes to ``log``)."""
    started = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(
            command, stdout=out, stderr=subprocess.STDOUT, check=False, timeout=PROCESS_TIMEOUT_S
        )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        msg = f"{command[:4]} exited {done.returncode}; see {log}"
        raise RuntimeError(msg)
    return elapsed


def measure(rows: int, rate: float, ws_ms: int, parts: int, runs: int) -> dict[str, Any]:
    """The three processes on one input size, ``runs`` times each, interleaved."""
    work = Path(tempfile.mkdtemp(prefix="stretch-bandjoin-"))
    try:
        left, right = generate.scalejoin(rows, rate, 1)
        write_parts(left, work / "L", parts)
        write_parts(right, work / "R", parts)
        stretch = str(Path(sys.executable).with_name("stretch"))
        inputs = ["--input", str(work / "L"), "--input", str(work / "R")]
        # The streaming query runs with the part files per micro-batch the pipeline's
        # writers take, and with one (the faster of the two is the baseline).
        part_rows = [pq.read_metadata(p).num_rows for p in input_files(work / "L")]
        per_trigger = files_per_batch(part_rows, None, ROWS_PER_TRIGGER)
        spark = [sys.executable, __file__, "--left", str(work / "L"), "--right",
                 str(work / "R"), "--ws-ms", str(ws_ms), "--query"]  # fmt: skip
        trigger = ["--files-per-trigger", str(per_trigger)]
        commands = {
            "stretch_pipeline": [
                stretch,
                "pipeline",
                "scalejoin",
                *inputs,
                "--param",
                f"ws={ws_ms}",
                "--output",
            ],  # fmt: skip
            "spark_stream": [*spark, "stream", *trigger, "--output"],
            "spark_stream_one_file": [*spark, "stream", "--files-per-trigger", "1", "--output"],
            "spark_batch": [*spark, "batch", "--output"],
        }
        if per_trigger == 1:
            del commands["spark_stream_one_file"]  # the same query
        outputs: dict[str, pa.Table] = {}

        def run(case: str) -> dict[str, float]:
            """One timed process; the first run's output is kept, sorted, to compare."""
            out = work / case
            seconds = timed([*commands[case], str(out)], work / f"{case}.log")
            if case not in outputs:
                outputs[case] = sorted_rows(out)
            shutil.rmtree(out)
            return {"seconds": seconds}

        samples = interleaved(runs, {case: partial(run, case) for case in commands})
        reference = outputs["stretch_pipeline"]
        median = {case: medians(rs)["seconds"] for case, rs in samples.items()}
        stream = min(s for case, s in median.items() if case.startswith("spark_stream"))
        return {
            "rows_per_side": rows,
            "files_per_trigger": per_trigger,
            "output_rows": reference.num_rows,
            "seconds": {case: [r["seconds"] for r in rs] for case, rs in samples.items()},
            "median_s": median,
            "pipeline_speed_over_best_stream": stream / median["stretch_pipeline"],
            "pipeline_speed_over_batch": median["spark_batch"] / median["stretch_pipeline"],
            "same_rows_as_stretch": {
                case: bool(table.equals(reference)) for case, table in outputs.items()
            },
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog=prog(), description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=positive_int, nargs="+", default=[100_000, 500_000])
    parser.add_argument("--rate", type=positive_float, default=1_000.0, help="tuples/s per stream")
    parser.add_argument("--ws-ms", type=positive_int, default=10_000)
    parser.add_argument("--parts", type=positive_int, default=10, help="part files per stream")
    parser.add_argument("--runs", type=positive_int, default=1)
    parser.add_argument("--query", choices=["stream", "batch"], help=argparse.SUPPRESS)
    parser.add_argument("--left", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--right", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--files-per-trigger", type=positive_int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.query:
        spark_query(
            args.query, args.left, args.right, args.output, args.ws_ms, args.files_per_trigger
        )
        return
    results = [measure(n, args.rate, args.ws_ms, args.parts, args.runs) for n in args.sizes]
    for r in results:
        assert all(r["same_rows_as_stretch"].values()), r["same_rows_as_stretch"]
    write("spark_bandjoin", {"machine": machine(), "args": vars(args) | {"query": None},
                             "sizes": results})  # fmt: skip


if __name__ == "__main__":
    main()
