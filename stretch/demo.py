"""The main job: a generated NYSE-like trading day through the ``hedge`` join.

It runs the join on the VSN runtime while scaling out and back in mid-stream, runs the
sequential SN reference on the same trades, and prints what it found and whether the two
outputs are identical (they must be: docs/design.md decision 2).
"""

from __future__ import annotations

import time
from typing import TextIO

import pyarrow as pa

from stretch.generate import GENERATORS
from stretch.model.sn import run_sn
from stretch.operators.catalog import build
from stretch.vsn import run_vsn

__all__ = ["run_demo"]


def run_demo(rows: int, rate: float, seed: int, parallelism: int, out: TextIO) -> bool:
    """Run the demo, writing a summary to ``out``; return whether VSN equalled SN."""
    (trades,) = GENERATORS["hedge"](rows=rows, rate=rate, seed=seed)
    band_ms = 30_000
    op = build("hedge", {"ws": band_ms})
    ts = trades.column("ts").to_pylist()
    first, last = (ts[0], ts[-1]) if ts else (0, 0)
    schedule = [(first + (last - first) // 3, parallelism), (first + 2 * (last - first) // 3, 1)]
    out.write(
        f"hedge join over {rows} generated trades ({(last - first) / 1000:.0f} s of event "
        f"time, WS {band_ms} ms)\n"
    )
    started = time.perf_counter()
    pairs = run_vsn(op, [trades, trades], 1, parallelism, schedule)
    vsn_s = time.perf_counter() - started
    out.write(
        f"  vsn: 1 -> {parallelism} -> 1 instances (at ts {schedule[0][0]} and "
        f"{schedule[1][0]}): {pairs.num_rows} hedging pairs in {vsn_s:.2f} s\n"
    )
    started = time.perf_counter()
    reference = run_sn(op, [trades, trades], 1)
    out.write(
        f"  sn reference: {reference.num_rows} pairs in {time.perf_counter() - started:.2f} s\n"
    )
    identical = bool(pairs.equals(reference))
    out.write(f"  identical to the sequential run, row for row: {'yes' if identical else 'NO'}\n")
    if pairs.num_rows:
        counts = (
            pa.TableGroupBy(pairs, ["l_symbol", "r_symbol"])
            .aggregate([("l_price", "count")])
            .sort_by([("l_price_count", "descending")])
        )
        out.write("  most frequent hedges:\n")
        for row in counts.slice(0, 5).to_pylist():
            out.write(
                f"    {row['l_symbol']:>5} ~ {row['r_symbol']:<5} {row['l_price_count']} pairs\n"
            )
    return identical
