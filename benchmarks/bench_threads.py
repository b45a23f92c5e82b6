"""Where the indexed ScaleJoin's time goes at each parallelism, thread by thread, in process.

``bench_cores.py`` times whole ``stretch replay`` processes; this looks inside one: the
section 8.3 streams (2 x ``--rows`` tuples, WS ``--ws``, K = 16) are fed straight into a
pipeline in adds of ``--add-rows`` rows per source, at each parallelism and partition
(``partition=band`` and the round robin), one run each after warm-up runs. For each it
prints the wall time and the CPU seconds (``time.thread_time``) of the instances
together, of the output drainer and of the feeding thread while it added, and, inside
the instances, of the band-join kernel path (``process``), its kernel calls
(``_indexed``) and its output blocks (``_emit``), with the number of runs (``process``
calls) and kernel calls. Writes ``threads.json`` to the results folder.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from _args import positive_int, prog
from _util import machine, progress, write

from stretch.generate import scalejoin
from stretch.operators.catalog import build
from stretch.vsn import setup
from stretch.vsn._compiled.band_join import BandJoinKernel

CPU: dict[str, float] = defaultdict(float)
"""CPU seconds by thread kind and by timed method, for the run under way."""
CALLS: dict[str, int] = defaultdict(int)
"""Calls of each timed method, for the run under way."""


def _thread_kind(name: str) -> str:
    if name.endswith("-out"):
        return "drainer"
    return "instances" if name.startswith("vsn-") else name


def _count_thread_cpu() -> None:
    """Add each thread's CPU time to ``CPU`` when it ends."""
    run = threading.Thread.run

    def timed(self: threading.Thread) -> None:
        try:
            run(self)
        finally:
            CPU[_thread_kind(self.name)] += time.thread_time()

    threading.Thread.run = timed  # type: ignore[method-assign]


def _time_method(name: str) -> None:
    """Add the CPU time and calls of ``BandJoinKernel.name`` to ``CPU`` and ``CALLS``."""
    method: Callable[..., Any] = getattr(BandJoinKernel, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return method(*args, **kwargs)
        finally:
            CPU[name] += time.thread_time() - start
            CALLS[name] += 1

    setattr(BandJoinKernel, name, timed)


def _run(tables: list[Any], m: int, partition: str, ws: int, add_rows: int) -> dict[str, Any]:
    """One run at parallelism ``m``: wall seconds, output rows, CPU and calls."""
    CPU.clear()
    CALLS.clear()
    op = build("scalejoin", {"ws": ws, "keys": 16, "partition": partition})
    pipeline = setup(op, m, 16, compiled=True)
    try:
        start, cpu = time.perf_counter(), time.thread_time()
        for at in range(0, max(t.num_rows for t in tables), add_rows):
            for i, table in enumerate(tables):
                pipeline.add(i, table.slice(at, add_rows))
        CPU["feeding"] += time.thread_time() - cpu
        pipeline.close()
        assert pipeline.join(600), "the run did not finish in 600 s"
        out, _ = pipeline.output()
        wall = time.perf_counter() - start
    finally:
        pipeline.shutdown()
    return {"seconds": wall, "rows": out.num_rows, "cpu_s": dict(CPU), "calls": dict(CALLS)}


def main() -> None:
    cpus = len(os.sched_getaffinity(0))
    parser = argparse.ArgumentParser(prog=prog(), description=__doc__)
    parser.add_argument(
        "--parallelism",
        type=positive_int,
        nargs="+",
        default=[m for m in (1, 2, 4, 8, 16) if m <= max(cpus, 2)],
        help="values of m (default: powers of two up to the cores, at most 16)",
    )
    parser.add_argument("--rows", type=positive_int, default=1_000_000, help="tuples per stream")
    parser.add_argument(
        "--ws", type=positive_int, default=10_000, help="the join's WS (the band), ms"
    )
    parser.add_argument(
        "--add-rows", type=positive_int, default=65_536, help="rows per source and add"
    )
    args = parser.parse_args()
    if not 1 <= max(args.parallelism) <= 16:
        parser.error("--parallelism: values in 1..16 (the join has K = 16 keys)")
    _count_thread_cpu()
    for name in ("process", "_indexed", "_emit"):
        _time_method(name)
    tables = scalejoin(args.rows, 10_000.0, 1)
    # At p2 too: two instances' rows of one ts reach the drainer's sort (``order_ties``),
    # which a fresh checkout would otherwise compile inside the first measured p2 run.
    progress("warm-up (compiles the kernels on a fresh checkout)")
    for partition in ("band", "seq"):
        _run(tables, 2, partition, args.ws, args.add_rows)
    result: dict[str, Any] = {"args": vars(args), "machine": machine(), "runs": []}
    for m in args.parallelism:
        for partition in ("band", "seq"):
            found = {
                "m": m,
                "partition": partition,
                **_run(tables, m, partition, args.ws, args.add_rows),
            }
            result["runs"].append(found)
            write("threads", result)
            cpu = " ".join(f"{k}={v:.2f}" for k, v in sorted(found["cpu_s"].items()))
            print(
                f"m={m} {partition}: {found['seconds']:.2f} s, {found['rows']} rows; CPU s {cpu};"
                f" runs {found['calls'].get('process', 0)}, kernel calls"
                f" {found['calls'].get('_indexed', 0)}",
                flush=True,
            )


if __name__ == "__main__":
    main()
