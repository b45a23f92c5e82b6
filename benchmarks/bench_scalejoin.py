"""Q3 (section 8.3): ScaleJoin (or hedge) in the VSN runtime against an honest 1T.

The 1T is ``onethread_scalejoin.py``: the best simple single-thread program for the same
join (merge the two sorted streams, a sliding window per side in contiguous arrays, the
predicate written in, no runtime). Two comparisons, each in one run, cases interleaved,
medians reported:

* in process: the catalog operator through ``stretch.setup`` at each ``--parallelism``
  (adding the input included) against ``join()`` of the 1T over the same tables, and
  ``m`` 1T loops in ``m`` threads at once: the machine's parallel ceiling;
* whole processes on the same input files (Parquet, reading them included): ``stretch
  replay OPERATOR --parallelism m`` against ``python onethread_scalejoin.py``, and ``m``
  1T processes at once (the ceiling as processes).

Rates are comparisons/s: the comparisons the 1T makes over the time of each case (every
case makes the same comparisons: each tuple against the opposite window).
Targets (docs/design.md): p1 >= 0.8x 1T; p2 >= 1.8x p1 where two loops at once reach
>= 1.9x 1T. ``cpu_s`` is the CPU time each case used; ``p{m}_over_1T_cpu`` is the 1T's
CPU time over the case's: the ratio on a machine whose cores others share, where wall
times favour whichever case runs more threads. Writes JSON and a PNG to
benchmarks/results/ (``scalejoin`` or ``hedge_join``). Both run the operator with
``index=off``: the paper's nested loop, every tuple against the whole opposite window.

``--study index`` measures the band index of issue 22 instead (``_index_study.py``):
rows/s against WS (``--windows``) for the nested-loop and the indexed 1T, and the
operator at each parallelism with the index off and on (JSON and a PNG of the cost
against the window: ``{name}_index``), then the targets as whole processes on
``--target-rows`` rows per stream at ``--target-rate`` tuples/s and ``--ws``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import _index_study
import pyarrow as pa
import pyarrow.parquet as pq
from _args import positive_float, positive_int, prog
from _util import at_once, figure, interleaved, machine, medians, progress, save, write
from onethread_scalejoin import join

from stretch.generate import hedge, scalejoin
from stretch.operators.catalog import build
from stretch.vsn import run_vsn

ONE_T = str(Path(__file__).parent / "onethread_scalejoin.py")
STRETCH = str(Path(sys.executable).parent / "stretch")


def one_thread(operator: str, tables: list[pa.Table], ws: int) -> dict[str, float]:
    """1T in this process."""
    cpu = time.process_time()
    start = time.perf_counter()
    _, comparisons = join(operator, tables[0], tables[-1], ws)
    elapsed = time.perf_counter() - start
    cpu_s = time.process_time() - cpu
    return {"comparisons_per_s": comparisons / elapsed, "seconds": elapsed, "cpu_s": cpu_s}


def one_threads(operator: str, tables: list[pa.Table], ws: int, m: int) -> dict[str, float]:
    """The machine's parallel ceiling: ``m`` 1T loops in ``m`` threads at once.

    The loop releases the GIL, so on idle cores this is ``m`` x 1T; less means the
    cores are shared (other processes, hyper-threads, memory bandwidth).
    """
    done: list[int] = []
    workers = [
        threading.Thread(target=lambda: done.append(join(operator, tables[0], tables[-1], ws)[1]))
        for _ in range(m)
    ]
    cpu = time.process_time()
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - start
    cpu_s = time.process_time() - cpu
    return {"comparisons_per_s": sum(done) / elapsed, "seconds": elapsed, "cpu_s": cpu_s}


def vsn(
    operator: str, tables: list[pa.Table], ws: int, m: int, keys: int, comparisons: int
) -> dict[str, float]:
    """The catalog operator at parallelism m through ``run_vsn`` (feeding included)."""
    op = build(operator, {"ws": ws, "keys": keys, "index": "off"})
    cpu = time.process_time()
    start = time.perf_counter()
    run_vsn(op, tables, m)
    elapsed = time.perf_counter() - start
    cpu_s = time.process_time() - cpu
    return {"comparisons_per_s": comparisons / elapsed, "seconds": elapsed, "cpu_s": cpu_s}


def processes(commands: list[list[str]], comparisons: int) -> dict[str, float]:
    """Run ``commands`` as processes at once; wall time, CPU time, comparisons/s.

    ``run_s`` is the longest time the processes report for their own work (their last
    line on stderr, "... in X s"): the process time less Python's start and imports.
    """
    elapsed, cpu, outputs = at_once(commands)
    run_s = max(float(re.findall(r" in ([0-9.]+) s", out)[-1]) for out in outputs)
    total = comparisons * len(commands)
    return {"comparisons_per_s": total / elapsed, "seconds": elapsed, "cpu_s": cpu, "run_s": run_s}


def ratios(summary: dict[str, dict[str, float]], ms: list[int], prefix: str) -> dict[str, Any]:
    """The budget's ratios for one family of cases (``prefix`` "" or "process_")."""
    one_t = summary[f"{prefix}1T"]["comparisons_per_s"]
    out: dict[str, Any] = {}
    for m in ms:
        rate = summary[f"{prefix}p{m}"]["comparisons_per_s"]
        out[f"p{m}_over_1T"] = rate / one_t
        # CPU time: what each costs when it gets the cores (a loaded machine skews wall)
        out[f"p{m}_over_1T_cpu"] = (
            summary[f"{prefix}1T"]["cpu_s"] / summary[f"{prefix}p{m}"]["cpu_s"]
        )
        if m > 1:
            out[f"p{m}_over_p1"] = rate / summary[f"{prefix}p1"]["comparisons_per_s"]
            out[f"{m}x1T_over_1T"] = summary[f"{prefix}{m}x1T"]["comparisons_per_s"] / one_t
    return out


def report(name: str, found: dict[str, Any], ms: list[int]) -> None:
    """Print the ratios against the targets."""
    print(
        f"{name}: p1 = {found['p1_over_1T']:.2f}x 1T (target >= 0.80x); by CPU time "
        f"{found['p1_over_1T_cpu']:.2f}x"
    )
    for m in ms:
        if m > 1:
            over_1t, over_p1 = found[f"p{m}_over_1T"], found[f"p{m}_over_p1"]
            print(
                f"{name}: p{m} = {over_1t:.2f}x 1T = {over_p1:.2f}x p1"
                f" ({m} 1T loops at once: {found[f'{m}x1T_over_1T']:.2f}x 1T)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(prog=prog(), description=__doc__)
    parser.add_argument("--operator", choices=["scalejoin", "hedge"], default="scalejoin")
    parser.add_argument("--rows", type=positive_int, default=200_000, help="tuples per stream")
    parser.add_argument(
        "--rate",
        type=positive_float,
        default=10_000.0,
        help="tuples/s per stream (200k: ts over 20 s)",
    )
    parser.add_argument(
        "--ws", type=positive_int, default=10_000, help="window size (the band) in ms"
    )
    parser.add_argument(
        "--keys", type=positive_int, default=16, help="K (the catalog's default: 16)"
    )
    parser.add_argument("--parallelism", type=positive_int, nargs="+", default=[1, 2])
    parser.add_argument("--runs", type=positive_int, default=3)
    parser.add_argument(
        "--study", choices=["q3", "index"], default="q3", help="Q3 (nested loop) or the index"
    )
    parser.add_argument(
        "--windows", type=positive_int, nargs="+", default=[1000, 10_000, 60_000], help="WS (index)"
    )
    parser.add_argument(
        "--target-rows",
        type=positive_int,
        default=1_000_000,
        help="rows per stream (index targets)",
    )
    parser.add_argument(
        "--target-rate",
        type=positive_float,
        default=10_000.0,
        help="tuples/s per stream (index targets)",
    )
    args = parser.parse_args()
    if args.study == "index":
        index_study(args)
        return
    result: dict[str, Any] = {"args": vars(args), "machine": machine()}
    make: Callable[[int, float, int], list[pa.Table]] = (
        scalejoin if args.operator == "scalejoin" else hedge
    )
    # hedge joins one trade stream with itself: it is both L and R
    tables = make(args.rows, args.rate, 1) * (2 if args.operator == "hedge" else 1)
    warm = make(2000, args.rate, 2) * (2 if args.operator == "hedge" else 1)
    progress("warm-up (JIT)")
    one_thread(args.operator, warm, args.ws)
    _, comparisons = join(args.operator, tables[0], tables[-1], args.ws)
    for m in args.parallelism:
        vsn(args.operator, warm, args.ws, m, args.keys, comparisons)
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i, table in enumerate(tables):
            files.append(os.path.join(tmp, f"input_{i}.parquet"))
            pq.write_table(table, files[-1])
        out = os.path.join(tmp, "out.parquet")
        inputs = [x for f in files for x in ("--input", f)]

        def one_t_writing(path: str) -> list[str]:
            return [
                sys.executable,
                ONE_T,
                args.operator,
                "--ws",
                str(args.ws),
                *inputs,
                "--output",
                path,
            ]

        one_t = one_t_writing(out)
        replay = [STRETCH, "-v", "replay", args.operator, "--param", f"ws={args.ws}"]
        replay += ["--param", f"keys={args.keys}", "--param", "index=off"]
        replay += ["--output", out, "--sorted"]
        replay += inputs
        cases: dict[str, Callable[[], dict[str, float]]] = {
            "1T": lambda: one_thread(args.operator, tables, args.ws),
            "process_1T": lambda: processes([one_t], comparisons),
        }
        for m in args.parallelism:
            cases[f"p{m}"] = partial(vsn, args.operator, tables, args.ws, m, args.keys, comparisons)
            command = [*replay, "--parallelism", str(m)]
            cases[f"process_p{m}"] = partial(processes, [command], comparisons)
            if m > 1:
                cases[f"{m}x1T"] = partial(one_threads, args.operator, tables, args.ws, m)
                at_once = [one_t_writing(f"{out}.{k}.parquet") for k in range(m)]
                cases[f"process_{m}x1T"] = partial(processes, at_once, comparisons)
        progress("warm-up (whole processes)")
        processes([one_t], comparisons)
        processes([[*replay, "--parallelism", "1"]], comparisons)
        runs = interleaved(args.runs, cases)
    summary = {name: medians(samples) for name, samples in runs.items()}
    result["comparisons"] = comparisons
    result["runs"] = runs
    result["median"] = summary
    result["in_process"] = ratios(summary, args.parallelism, "")
    result["whole_process"] = ratios(summary, args.parallelism, "process_")
    report("in process", result["in_process"], args.parallelism)
    report("whole processes", result["whole_process"], args.parallelism)
    name = "scalejoin" if args.operator == "scalejoin" else "hedge_join"
    write(name, result)
    fig, axes = figure(2, f"{args.operator}: VSN vs the 1T program (comparisons/s, medians)")
    ms = args.parallelism
    for ax, prefix, title in (
        (axes[0], "", "in process"),
        (axes[1], "process_", "whole processes"),
    ):
        base = summary[f"{prefix}1T"]["comparisons_per_s"]
        ax.plot(ms, [summary[f"{prefix}p{m}"]["comparisons_per_s"] for m in ms], "o-", label="VSN")
        ax.plot(ms, [base * m for m in ms], ":", color="grey", label="1T x parallelism (ideal)")
        ceiling = [summary.get(f"{prefix}{m}x1T", summary[f"{prefix}1T"]) for m in ms]
        ax.plot(ms, [c["comparisons_per_s"] for c in ceiling], "s--", label="m 1T at once")
        ax.axhline(base, color="k", linestyle="--", label="1T")
        ax.set_title(title)
        ax.set_xlabel("parallelism")
        ax.set_ylabel("comparisons/s")
        ax.set_xticks(ms)
        ax.legend()
    progress(f"wrote {save(fig, name)}")


def index_study(args: argparse.Namespace) -> None:
    """``--study index``: the sweep over WS, its plot, then the whole-process targets."""
    result: dict[str, Any] = {"args": vars(args), "machine": machine()}
    make: Callable[[int, float, int], list[pa.Table]] = (
        scalejoin if args.operator == "scalejoin" else hedge
    )
    copies = 2 if args.operator == "hedge" else 1
    warm = make(2000, args.rate, 2) * copies
    progress("warm-up (JIT)")
    _index_study.sweep(args.operator, warm, [args.ws], args.parallelism, args.keys, 1)
    tables = make(args.rows, args.rate, 1) * copies
    result["sweep"] = _index_study.sweep(
        args.operator, tables, args.windows, args.parallelism, args.keys, args.runs
    )
    name = ("scalejoin" if args.operator == "scalejoin" else "hedge_join") + "_index"
    write(name, result)
    progress(f"wrote {_index_study.plot(name, args.operator, result['sweep'])}")
    for ws, found in result["sweep"].items():
        rates = {case: f"{v['rows_per_s']:,.0f}" for case, v in found["median"].items()}
        print(f"{args.operator} ws={ws}: same rows {found['same_rows']}; rows/s {rates}")
    if args.operator == "scalejoin":
        # short runs (about 0.6 s each at the defaults): at least 5 of each
        result["skew"] = _index_study.skew(
            make(args.rows, args.rate, 3), 1000, args.keys, max(args.runs, 5)
        )
        write(name, result)
        skewed = result["skew"]
        print(
            f"scalejoin, every x and a equal (ws=1000): p1 indexed = "
            f"{skewed['indexed_over_nested']:.2f}x p1 nested; same rows {skewed['same_rows']}"
        )
    big = make(args.target_rows, args.target_rate, 1) * copies
    result["targets"] = _index_study.targets(
        args.operator, big, args.ws, args.parallelism, args.keys, args.runs
    )
    write(name, result)
    _index_study.report(args.operator, result["targets"])


if __name__ == "__main__":
    main()
