"""Panes (issue 18, Enorm): wordcount over sliding windows with WS / WA = k (60 by default).

Cases, interleaved, each timed from the tweets in memory to the output table:

* ``panes``: the runtime in process (``setup``, chunks of ``--chunk`` rows added, close,
  join, the output log read) with the catalog's wordcount, which declares its combine
  (``AggregateSpec.combine = "sum"``): one partial count per word per pane of
  gcd(WA, WS) ms, a window's panes combined when it closes;
* ``per_window``: the same pipeline with the combine left undeclared, the path it took
  before (each tuple folded into each of its k windows' tables);
* ``bare``: ``onethread_panes.wordcount``, the best simple single-thread program for the
  job (Arrow tokenizing, a Numba pane counter with dense arrays, the output table);
* ``bare_count``: its counting loop alone over the pre-tokenized words (the tokenizing
  done before the clock starts), the counter over int keys.

Every output is checked equal to ``bare``'s, row for row, before timing. CPU seconds
(the process's, all threads) are recorded beside wall seconds: on a shared machine the
CPU ratio says what each case costs when it has the cores. Targets: panes >= 5x
per_window, panes >= 0.8x bare.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
from _args import positive_float, positive_int, prog
from _util import figure, interleaved, machine, medians, progress, save, write
from onethread_panes import count, tokenize, wordcount

from stretch.generate import tweets
from stretch.model.oplus import OPlus
from stretch.operators.catalog import build
from stretch.vsn import setup

SPEEDUP_TARGET = 5.0
BARE_TARGET = 0.8


def _timed(work: Callable[[], pa.Table], rows: int) -> dict[str, float]:
    cpu = time.process_time()
    start = time.perf_counter()
    work()
    elapsed = time.perf_counter() - start
    return {"seconds": elapsed, "cpu_s": time.process_time() - cpu, "tuples_per_s": rows / elapsed}


def run_pipeline(op: OPlus, table: pa.Table, m: int, chunk: int) -> pa.Table:
    """The operator at parallelism m in process; returns its output table."""
    pipeline = setup(op, m, m, compiled=True)
    try:
        for start in range(0, table.num_rows, chunk):
            pipeline.add(0, table.slice(start, chunk))
        pipeline.close()
        assert pipeline.join(600)
        out, _ = pipeline.output()
        return out
    finally:
        pipeline.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(prog=prog(), description=__doc__)
    parser.add_argument("--rows", type=positive_int, default=100_000, help="tweets")
    parser.add_argument("--rate", type=positive_float, default=1000.0, help="event-time tweets/s")
    parser.add_argument("--wa", type=positive_int, default=1000, help="window advance WA, ms")
    parser.add_argument("--ws", type=positive_int, default=60_000, help="window size WS, ms")
    parser.add_argument("--chunk", type=positive_int, default=4096, help="rows per add() call")
    parser.add_argument("--parallelism", type=positive_int, nargs="+", default=[1, 2])
    parser.add_argument("--runs", type=positive_int, default=3)
    args = parser.parse_args()

    (table,) = tweets(args.rows, args.rate, seed=1)
    op = build("wordcount", {"wa": args.wa, "ws": args.ws})
    assert op.kernel is not None
    per_window = dataclasses.replace(op, kernel=dataclasses.replace(op.kernel, combine=None))
    words, offsets, strings = tokenize(table.column("tweet").combine_chunks())
    ts = np.asarray(table.column("ts"), dtype=np.int64)
    g = math.gcd(args.wa, args.ws)

    cases: dict[str, Callable[[], pa.Table]] = {
        "bare": lambda: wordcount(table, args.wa, args.ws),
        "bare_count": lambda: count(ts, words, offsets, len(strings), args.wa, args.ws, g),
    }
    for m in args.parallelism:
        cases[f"panes_p{m}"] = lambda m=m: run_pipeline(op, table, m, args.chunk)
    cases["per_window_p1"] = lambda: run_pipeline(per_window, table, 1, args.chunk)

    progress("warm-up and equality check")
    expected = wordcount(table, args.wa, args.ws)
    for name, case in cases.items():
        out = case()
        if isinstance(out, pa.Table):
            assert out.to_pylist() == expected.to_pylist(), name
    progress(f"{expected.num_rows} output rows, every case equal to bare")

    timed = {name: lambda c=case: _timed(c, args.rows) for name, case in cases.items()}
    samples = interleaved(args.runs, timed)
    result = {k: medians(v) for k, v in samples.items()}
    panes, window, bare = result["panes_p1"], result["per_window_p1"], result["bare"]
    ratios = {
        "panes_over_per_window": window["seconds"] / panes["seconds"],
        "panes_over_per_window_cpu": window["cpu_s"] / panes["cpu_s"],
        "panes_over_bare": bare["seconds"] / panes["seconds"],
        "panes_over_bare_cpu": bare["cpu_s"] / panes["cpu_s"],
        "panes_over_bare_count": result["bare_count"]["seconds"] / panes["seconds"],
    }
    summary = {
        "machine": machine(),
        "args": vars(args),
        "windows_per_tuple": math.ceil(args.ws / args.wa),
        "output_rows": expected.num_rows,
        "medians": result,
        "runs": samples,
        "ratios": ratios,
        "targets": {
            "panes_over_per_window": SPEEDUP_TARGET,
            "panes_over_bare": BARE_TARGET,
            "met_per_window": ratios["panes_over_per_window"] >= SPEEDUP_TARGET,
            "met_bare": ratios["panes_over_bare"] >= BARE_TARGET,
        },
        "load_average_1m_end": os.getloadavg()[0],
    }
    path = write("panes", summary)
    fig, (ax,) = figure(1, f"wordcount, WS/WA = {summary['windows_per_tuple']}")
    names = list(result)
    ax.bar(names, [result[n]["tuples_per_s"] for n in names])
    ax.set_ylabel("tweets/s (wall, median)")
    ax.tick_params(axis="x", rotation=30)
    save(fig, "panes")
    for name, value in ratios.items():
        print(f"{name}: {value:.2f}")  # noqa: T201
    print(f"results: {path}", file=sys.stderr)  # noqa: T201


if __name__ == "__main__":
    main()
