"""The main job: a generated NYSE-like trading day, Spark -> ``hedge`` in the sidecar -> Spark.

The trades of one day (``stretch.generate.hedge``) are written as Parquet files, a file
per stretch of the day; ``stretch pipeline``'s job reads them as a file stream, the
``stretch`` writer sends each micro-batch to the ``hedge`` join running in an embedded
sidecar, and the ``stretch`` reader brings the hedging pairs back into Spark, which writes
them as Parquet. Then ``stretch replay`` (the runtime in one process, no Spark; the test
suite checks it against the sequential reference ``run_sn``) joins the same trades, and the
demo says whether the two outputs are identical row for row (they must be: docs/design.md
decision 2). Needs the extra ``stretch[spark]``.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stretch.generate import GENERATORS
from stretch.operators.catalog import build
from stretch.spark.cli import describe_reconfigurations
from stretch.spark.pipeline import PipelineConfig, micro_batches, read_output, run_pipeline
from stretch.spark.session import local_session
from stretch.spark.sidecar import EmbeddedSidecar
from stretch.vsn import run_vsn

__all__ = ["TRADING_DAY_S", "run_demo"]

TRADING_DAY_S = 23_400
"""09:30 to 16:00: the NYSE trading day, in seconds."""
BAND_MS = 30_000
"""The hedge join's window: pairs of trades at most 30 s apart."""
WARMUP_ROWS = 2_000


def split_by_time(table: pa.Table, directory: Path, files: int) -> None:
    """``table`` (ts-sorted) as ``files`` Parquet files cut between timestamps, in order.

    A cut never falls inside a run of equal ``ts``, so the files hold disjoint times and
    a file stream reading one file per micro-batch sends the rows in their file order.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ts = table.column("ts").to_numpy()
    starts = sorted({int(np.searchsorted(ts, ts[len(ts) * k // files])) for k in range(files)})
    for k, (lo, hi) in enumerate(zip(starts, [*starts[1:], len(ts)], strict=True)):
        path = directory / f"trades-{k:03d}.parquet"
        pq.write_table(table.slice(lo, hi - lo), path)
        os.utime(path, (1_000_000 + k, 1_000_000 + k))


def run_demo(
    rows: int,
    rate: float | None,
    seed: int,
    parallelism: int,
    out: TextIO,
    files: int = 13,
    workdir: Path | None = None,
    autoscale: str | None = "model",
) -> bool:
    """Run the demo, writing what it does and finds to ``out``; return whether it matched.

    Args:
        rows: Trades in the day.
        rate: Mean trades per second (default: ``rows`` spread over a trading day).
        seed: Seed of the generator.
        parallelism: Instances of the hedge join in the sidecar.
        out: Where the story goes.
        files: Parquet files (and so micro-batches) the day is cut into.
        workdir: Where inputs, output and checkpoints go and stay (default: a temporary
            directory, deleted at the end; the story says so).
        autoscale: The join's autoscale policy (None: ``parallelism`` instances throughout).

    """
    rate = rate or rows / TRADING_DAY_S
    (trades,) = GENERATORS["hedge"](rows=rows, rate=rate, seed=seed)
    op = build("hedge", {"ws": BAND_MS})
    span_s = (trades.column("ts")[-1].as_py() - trades.column("ts")[0].as_py()) / 1000
    with tempfile.TemporaryDirectory(prefix="stretch-demo-") as scratch:
        root = workdir or Path(scratch)
        pq.write_table(trades, root / "trades.parquet")
        split_by_time(trades, root / "trades", files)
        out.write(
            f"A generated NYSE-like trading day: {rows:,} trades of 10 companies over "
            f"{span_s / 3600:.1f} hours (mean {rate:.1f}/s, bursts up to 8,000/s), in "
            f"{files} Parquet files under {root / 'trades'}"
            + (
                ".\n"
                if workdir
                else " (a temporary directory, deleted when the demo ends; --keep DIR "
                "keeps the trades, the pairs and the checkpoints).\n"
            )
            + "The hedge join pairs trades of different companies at most 30 s apart whose "
            "prices deviate from their averages in opposite directions by about the same "
            "share.\n"
        )
        started = time.perf_counter()
        run_vsn(op, [trades.slice(0, WARMUP_ROWS)] * 2, parallelism)
        out.write(
            f"Compiled the join's kernels first (JIT, {time.perf_counter() - started:.1f} s, "
            "not counted below).\n"
        )
        with EmbeddedSidecar() as sidecar:
            started = time.perf_counter()
            spark = local_session("stretch demo")
            out.write(
                f"Started a local Spark session ({time.perf_counter() - started:.1f} s) and "
                f"the sidecar on {sidecar.url}; running the job (Spark -> hedge in the "
                "sidecar -> Spark -> Parquet):\n"
            )
            config = PipelineConfig(
                operator="hedge",
                inputs=[root / "trades"],
                output=root / "pairs",
                checkpoint=root / "checkpoint",
                url=sidecar.url,
                name="demo-hedge",
                params={"ws": str(BAND_MS)},
                parallelism=parallelism,
                max_parallelism=max(parallelism, 4),
                files_per_trigger=1,  # a stream of files, one at a time, for the autoscaler
                autoscale=autoscale,
            )
            result = run_pipeline(spark, config, out)
            pairs = read_output(spark, config.output)
            spark.stop()
        started = time.perf_counter()
        reference = run_vsn(op, [trades, trades], 1)
        replay_s = time.perf_counter() - started
    identical = bool(pairs.cast(reference.schema).equals(reference))
    scaling = (
        f"{parallelism} instance(s)"
        if autoscale is None
        else f"{parallelism} instance(s) at start, under the '{autoscale}' autoscale policy"
    )
    out.write(
        f"\nSpark sent the {rows:,} trades to the join's trade stream (it feeds both "
        f"sides) in {micro_batches(result.batches_in)}; the join ({scaling}) found "
        f"{result.rows_out:,} hedging pairs, which Spark read back and wrote as Parquet. "
        f"End to end {result.seconds:.1f} s ({rows / result.seconds:,.0f} trades/s, "
        "Spark's own per-batch cost included).\n"
        f"stretch replay (the same join in one process, one instance, no Spark) joined the "
        f"same trades in {replay_s:.1f} s and found {reference.num_rows:,} pairs.\n"
        + (
            "The two outputs are identical, row for row and in the same order.\n"
            if identical
            else "The two outputs DIFFER: this is a bug.\n"
        )
    )
    out.write(describe_reconfigurations(result.reconfigurations))
    if autoscale is not None:
        out.write(_scaling_story(parallelism, result.reconfigurations))
    out.write(
        f"The trades, the pairs ({root / 'pairs'}) and the checkpoints are kept in {root}.\n"
        if workdir
        else "The trades and pairs were in a temporary directory, now deleted: "
        "--keep DIR keeps them.\n"
    )
    if pairs.num_rows:
        counts = (
            pa.TableGroupBy(pairs, ["l_symbol", "r_symbol"])
            .aggregate([("l_price", "count")])
            .sort_by([("l_price_count", "descending")])
        )
        out.write("Most frequent hedges:\n")
        for row in counts.slice(0, 5).to_pylist():
            out.write(
                f"  {row['l_symbol']:>5} ~ {row['r_symbol']:<5} {row['l_price_count']:,} pairs\n"
            )
    return identical


def _scaling_story(start: int, entries: Sequence[Mapping[str, Any]]) -> str:
    """One line: how the autoscaler moved the join's parallelism over the day."""
    path = [start, *(int(entry["to"]) for entry in entries)]
    ups = sum(1 for a, b in pairwise(path) if b > a)
    downs = sum(1 for a, b in pairwise(path) if b < a)
    if not entries:
        return f"The autoscaler kept {start} instance(s) throughout.\n"
    return (
        f"The autoscaler held {start} instance(s) until the first trades had arrived "
        f"(its warm-up), then scaled up {ups} time(s) under the micro-batches' bursts (to "
        f"{max(path)} at most) and down {downs} time(s) after them: "
        f"{' -> '.join(map(str, path))}.\n"
    )
