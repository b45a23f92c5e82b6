"""Whole processes at each parallelism: how ``stretch replay`` scales with the cores.

The three process targets of issues 18 and 22, measured the way a user runs them (a
fresh ``stretch replay`` process per run: imports, reading Parquet, the run, writing
the output) at parallelism 1, 2, 4, ... up to the machine's cores, against the
single-thread programs a user could write instead, on the same files:

* ``scalejoin``: section 8.3's streams (2 x ``--join-rows`` tuples at ``--join-rate``
  t/s, WS ``--ws``), the paper's nested loop (``index=off``), against the vectorized 1T
  ``onethread_scalejoin.py``, and as many 1T processes at once as the largest
  parallelism (the machine's ceiling as processes). Targets: p1 >= 0.8x the 1T, p2 >=
  1.8x p1 (issue 18).
* ``scalejoin_index``: the same join with its band index (the default), 2 x
  ``--index-rows`` tuples, against the grid-indexed 1T ``onethread_indexed_scalejoin.py``.
  Targets: p1 >= 0.5x the indexed 1T, p2 >= 1.6x p1 (issue 22). The nested 1T on these
  files takes minutes on one core; ``bench_scalejoin.py --study index`` measures it.
* ``scalejoin_band``: the same with ``partition=band`` (each key stores blocks of the
  band's cells, so an instance probes only the tuples whose band meets its blocks),
  against the same indexed 1T.
* ``forward``: Operator 15 over 2 x ``--forward-rows`` tuples (``bench_forward.py``'s
  streams). Targets: >= 1M tuples/s as a whole process, p2 >= p1 (issue 18).

Each command runs once first (Numba's cache filled, the files in the page cache), every
output is checked to hold the baseline's rows, then the cases run ``--runs`` times
round robin and medians are reported. ``cpu_s`` is the CPU time of the process (all
threads), ``run_s`` the replay's own time from its first add to its output written.
Writes ``cores.json`` and ``cores.png`` to the results folder.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from _args import positive_float, positive_int, prog
from _index_study import same_rows
from _util import at_once, figure, interleaved, machine, medians, progress, save, write

from stretch.generate import scalejoin
from stretch.io import read_table

HERE = Path(__file__).parent
STRETCH = str(Path(sys.executable).parent / "stretch")


def _process(commands: list[list[str]]) -> dict[str, float]:
    """Run ``commands`` at once as processes; wall and CPU seconds, the replay's run time."""
    elapsed, cpu, errors = at_once(commands)
    found: dict[str, float] = {"seconds": elapsed, "cpu_s": cpu}
    run = re.search(r"rows out in ([0-9.]+) s", errors[0])
    if run:
        found["run_s"] = float(run.group(1))
    return found


def _write(tables: list[pa.Table], folder: str, prefix: str) -> list[str]:
    files = []
    for i, table in enumerate(tables):
        files.append(os.path.join(folder, f"{prefix}_{i}.parquet"))
        pq.write_table(table, files[-1])
    return files


def _inputs(files: list[str]) -> list[str]:
    return [x for f in files for x in ("--input", f)]


def workload(
    name: str,
    baselines: dict[str, list[str]],
    replay: list[str],
    ms: list[int],
    folder: str,
    runs: int,
    keep: Callable[[dict[str, Any]], None],
    ceiling: str | None = None,
) -> dict[str, Any]:
    """Warm up, check the rows, then time the baselines and ``replay`` at each m.

    ``keep`` gets the rounds timed so far after each round, so a run cut short leaves them.
    """
    outs: dict[str, str] = {}
    commands: dict[str, list[str]] = {}
    for case, command in baselines.items():
        outs[case] = os.path.join(folder, f"{name}_{case}.parquet")
        commands[case] = [*command, "--output", outs[case]]
    for m in ms:
        outs[f"p{m}"] = os.path.join(folder, f"{name}_p{m}.parquet")
        commands[f"p{m}"] = [*replay, "--parallelism", str(m), "--max-parallelism", str(max(ms))]
        commands[f"p{m}"] += ["--output", outs[f"p{m}"]]
    progress(f"{name}: warm-up, {len(commands)} processes")
    warm = {case: _process([command])["seconds"] for case, command in commands.items()}
    agree = same_rows({case: read_table(path) for case, path in outs.items()})
    cases = {case: partial(_process, [command]) for case, command in commands.items()}
    if ceiling is not None and max(ms) > 1:
        at_once = [
            [*baselines[ceiling], "--output", os.path.join(folder, f"{name}_ceiling_{k}.parquet")]
            for k in range(max(ms))
        ]
        cases[f"{max(ms)}x{ceiling}"] = partial(_process, at_once)
    rounds: dict[str, list[dict[str, float]]] = {case: [] for case in cases}
    for _ in range(runs):
        for case, samples in interleaved(1, cases).items():
            rounds[case] += samples
        keep({"same_rows": agree, "warm_up_seconds": warm, "rounds": rounds})
    summary = {case: medians(s) for case, s in rounds.items()}
    seconds = {case: s["seconds"] for case, s in summary.items()}
    found: dict[str, Any] = {"same_rows": agree, "warm_up_seconds": warm, "rounds": rounds}
    found["median"] = summary
    found["p_over_p1"] = {m: seconds["p1"] / seconds[f"p{m}"] for m in ms}
    for case in baselines:
        found[f"p_over_{case}"] = {m: seconds[case] / seconds[f"p{m}"] for m in ms}
    if ceiling is not None and max(ms) > 1:
        found[f"{max(ms)}x{ceiling}_over_{ceiling}"] = (
            max(ms) * seconds[ceiling] / seconds[f"{max(ms)}x{ceiling}"]
        )
    return found


def plot(result: dict[str, Any], ms: list[int]) -> Path:
    """Speed-up over p1 per workload, against ideal scaling."""
    names = ("scalejoin", "scalejoin_index", "scalejoin_band", "forward")
    fig, axes = figure(len(names), f"stretch replay as whole processes ({machine()['cpus']} cores)")
    for ax, name in zip(axes, names, strict=True):
        found = result.get(name)
        if found is None:
            continue
        ax.plot(ms, [found["p_over_p1"][m] for m in ms], "o-", label="p_m / p1")
        for key, values in found.items():
            if key.startswith("p_over_") and key != "p_over_p1":
                ax.plot(ms, [values[m] for m in ms], "s--", label=key.replace("p_over_", "over "))
        ax.plot(ms, ms, ":", color="grey", label="ideal")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xticks(ms, [str(m) for m in ms])
        ax.set_title(name)
        ax.set_xlabel("parallelism")
        ax.set_ylabel("speed-up (time ratio)")
        ax.legend(fontsize=7)
    return save(fig, "cores")


def main() -> None:
    cpus = len(os.sched_getaffinity(0))
    parser = argparse.ArgumentParser(prog=prog(), description=__doc__)
    parser.add_argument(
        "--parallelism",
        type=positive_int,
        nargs="+",
        default=[m for m in (1, 2, 4, 8, 16, 32) if m <= cpus],
        help="values of m (default: powers of two up to the cores)",
    )
    parser.add_argument(
        "--ws", type=positive_int, default=10_000, help="the join's WS (the band), ms"
    )
    parser.add_argument(
        "--join-rows", type=positive_int, default=200_000, help="scalejoin, per stream"
    )
    parser.add_argument("--join-rate", type=positive_float, default=10_000.0, help="t/s per stream")
    parser.add_argument(
        "--index-rows", type=positive_int, default=1_000_000, help="indexed, per stream"
    )
    parser.add_argument(
        "--forward-rows", type=positive_int, default=1_500_000, help="forward, per stream"
    )
    parser.add_argument(
        "--forward-rate", type=positive_float, default=100_000.0, help="t/s per stream"
    )
    parser.add_argument(
        "--workloads",
        nargs="+",
        choices=["scalejoin", "scalejoin_index", "scalejoin_band", "forward"],
        default=["scalejoin", "scalejoin_index", "scalejoin_band", "forward"],
    )
    parser.add_argument("--runs", type=positive_int, default=3)
    args = parser.parse_args()
    ms = sorted(set(args.parallelism))
    if ms[0] != 1:
        parser.error("--parallelism must include 1 (every ratio is against p1)")
    result: dict[str, Any] = {"args": vars(args), "machine": machine()}
    join_params = ["--param", f"ws={args.ws}", "--param", "keys=16"]
    written: dict[int, list[str]] = {}  # the join's files by rows per stream, written once
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.workloads:

            def keep(partial_result: dict[str, Any], name: str = name) -> None:
                result[name] = partial_result
                write("cores", result)

            if name == "forward":
                tables = [
                    scalejoin(args.forward_rows, args.forward_rate, seed=s)[0] for s in (1, 2)
                ]
                files = _write(tables, tmp, name)
                replay = [STRETCH, "-v", "replay", "forward", "--sorted", *_inputs(files)]
                found = workload(name, {}, replay, ms, tmp, args.runs, keep)
                rows = sum(t.num_rows for t in tables)
                found["process_tuples_per_s"] = {
                    m: rows / found["median"][f"p{m}"]["seconds"] for m in ms
                }
            else:
                rows = args.join_rows if name == "scalejoin" else args.index_rows
                if rows not in written:
                    written[rows] = _write(scalejoin(rows, args.join_rate, 1), tmp, f"join{rows}")
                files = written[rows]
                index = "off" if name == "scalejoin" else "on"
                one_t = "1T" if name == "scalejoin" else "indexed_1T"
                script = HERE / ("onethread_scalejoin.py" if index == "off" else
                                 "onethread_indexed_scalejoin.py")  # fmt: skip
                baseline = [sys.executable, str(script), "scalejoin", "--ws", str(args.ws)]
                replay = [STRETCH, "-v", "replay", "scalejoin", *join_params]
                replay += ["--param", f"index={index}", *_inputs(files)]
                if name == "scalejoin_band":
                    replay += ["--param", "partition=band"]
                found = workload(
                    name,
                    {one_t: [*baseline, *_inputs(files)]},
                    replay,
                    ms,
                    tmp,
                    args.runs,
                    keep,
                    ceiling=one_t if name == "scalejoin" else None,
                )
            result[name] = found
            write("cores", result)
            shown = ", ".join(f"p{m} {found['p_over_p1'][m]:.2f}x" for m in ms)
            print(f"{name}: same rows {found['same_rows']}; over p1: {shown}")
            for key, values in found.items():
                if key.startswith("p_over_") and key != "p_over_p1":
                    print(f"{name}: {key}: " + ", ".join(f"p{m} {values[m]:.2f}x" for m in ms))
            if name == "forward":
                rates = found["process_tuples_per_s"]
                print(
                    "forward: t/s as processes: " + ", ".join(f"p{m} {rates[m]:,.0f}" for m in ms)
                )
    progress(f"wrote {plot(result, ms)}")


if __name__ == "__main__":
    main()
