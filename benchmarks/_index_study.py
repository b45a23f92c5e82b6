"""The band index (issue 22) against the nested loop: ``bench_scalejoin.py --study index``.

Two experiments, each in one run with its cases interleaved and medians reported:

* ``sweep``: rows/s against WS for the nested-loop 1T (``onethread_scalejoin.py``), the
  indexed 1T (``onethread_indexed_scalejoin.py``), and the catalog operator through
  ``run_vsn`` at each parallelism with ``index=off`` (the nested loop) and ``index=on``,
  in this process; the outputs are checked to hold the same rows (sorted) first;
* ``targets``: whole processes on the same Parquet files at one WS: ``python
  onethread_scalejoin.py``, ``python onethread_indexed_scalejoin.py`` and ``stretch
  replay OPERATOR --parallelism m`` (the index on, as by default); the targets of issue
  22 are P1's time <= 1/5 of the nested 1T's, P1 >= 0.5x the indexed 1T's speed and
  P2 >= 1.6x P1, with the same rows in every output file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from _util import figure, interleaved, medians, progress, save
from onethread_indexed_scalejoin import join as indexed_join
from onethread_scalejoin import join as nested_join

from stretch.io import read_table
from stretch.operators.catalog import build
from stretch.vsn import run_vsn

NESTED_1T = str(Path(__file__).parent / "onethread_scalejoin.py")
INDEXED_1T = str(Path(__file__).parent / "onethread_indexed_scalejoin.py")
STRETCH = str(Path(sys.executable).parent / "stretch")


def same_rows(tables: dict[str, pa.Table]) -> bool:
    """Whether every table holds the same rows (as multisets), compared sorted in Arrow."""

    def ordered(table: pa.Table, schema: pa.Schema) -> pa.Table:
        table = table.select(schema.names).cast(schema)
        return table.sort_by([(name, "ascending") for name in schema.names])

    first = next(iter(tables.values()))
    schema = first.select([c for c in first.column_names if c != "offset"]).schema
    expected = ordered(first, schema)
    return all(ordered(t, schema).equals(expected) for t in tables.values())


def _timed(work: Callable[[], Any], rows: int) -> dict[str, float]:
    cpu = time.process_time()
    start = time.perf_counter()
    work()
    elapsed = time.perf_counter() - start
    return {"rows_per_s": rows / elapsed, "seconds": elapsed, "cpu_s": time.process_time() - cpu}


def sweep(
    operator: str, tables: list[pa.Table], windows: list[int], ms: list[int], keys: int, runs: int
) -> dict[str, Any]:
    """Rows/s of each case at each WS (in process), after checking their outputs agree."""
    left, right = tables[0], tables[-1]
    rows = sum(t.num_rows for t in tables)
    result: dict[str, Any] = {}
    for ws in windows:
        progress(f"{operator} ws={ws}: checking the outputs agree")
        ops = {
            index: build(operator, {"ws": ws, "keys": keys, "index": index})
            for index in ("off", "on")
        }
        outputs = {
            "nested 1T": nested_join(operator, left, right, ws)[0],
            "indexed 1T": indexed_join(operator, left, right, ws)[0],
            "p1 indexed": run_vsn(ops["on"], tables, 1),
        }
        agree = same_rows(outputs)
        cases: dict[str, Callable[[], dict[str, float]]] = {
            "nested 1T": partial(_timed, partial(nested_join, operator, left, right, ws), rows),
            "indexed 1T": partial(_timed, partial(indexed_join, operator, left, right, ws), rows),
        }
        for m in ms:
            for index, label in (("off", "nested"), ("on", "indexed")):
                work = partial(run_vsn, ops[index], tables, m)
                cases[f"p{m} {label}"] = partial(_timed, work, rows)
        progress(f"{operator} ws={ws}: {len(cases)} cases x {runs} runs")
        summary = {name: medians(s) for name, s in interleaved(runs, cases).items()}
        result[str(ws)] = {
            "same_rows": agree,
            "output_rows": outputs["nested 1T"].num_rows,
            "median": summary,
        }
    return result


def skew(tables: list[pa.Table], ws: int, keys: int, runs: int) -> dict[str, Any]:
    """ScaleJoin with every ``x`` and ``a`` equal: one band cell holds each whole window.

    Every probe's cells then hold its window: the slab drops its grid and the nested
    kernel joins it (the index must cost no more than ``index=off``); P1 with the index on
    and off, medians.
    """
    left, right = tables
    left = left.set_column(1, "x", pa.array([5] * left.num_rows, pa.int64()))
    right = right.set_column(1, "a", pa.array([5] * right.num_rows, pa.int64()))
    skewed = [left, right]
    rows = left.num_rows + right.num_rows
    ops = {
        index: build("scalejoin", {"ws": ws, "keys": keys, "index": index})
        for index in ("off", "on")
    }
    agree = same_rows({index: run_vsn(op, skewed, 1) for index, op in ops.items()})
    cases = {
        f"p1 {label}": partial(_timed, partial(run_vsn, ops[index], skewed, 1), rows)
        for index, label in (("off", "nested"), ("on", "indexed"))
    }
    summary = {name: medians(s) for name, s in interleaved(runs, cases).items()}
    ratio = summary["p1 indexed"]["rows_per_s"] / summary["p1 nested"]["rows_per_s"]
    return {"same_rows": agree, "median": summary, "indexed_over_nested": ratio}


def plot(name: str, operator: str, result: dict[str, Any]) -> Path:
    """Seconds per million input rows against WS, one line per case (log scale)."""
    fig, axes = figure(1, f"{operator}: cost against the window (medians)")
    ax = axes[0]
    windows = sorted(int(ws) for ws in result)
    cases = list(result[str(windows[0])]["median"])
    for case in cases:
        per_million = [1e6 / result[str(ws)]["median"][case]["rows_per_s"] for ws in windows]
        style = "o--" if "nested" in case else "s-"
        ax.plot([ws / 1000 for ws in windows], per_million, style, label=case)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("WS (s)")
    ax.set_ylabel("s per 1M input rows")
    ax.legend()
    return save(fig, name)


def _process(command: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    assert done.returncode == 0, f"{command} exited with {done.returncode}: {done.stderr[-2000:]}"
    return elapsed


def targets(
    operator: str, tables: list[pa.Table], ws: int, ms: list[int], keys: int, runs: int
) -> dict[str, Any]:
    """Whole processes on Parquet files: the nested and indexed 1T, replay at each m."""
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i, table in enumerate(tables[:1] if operator == "hedge" else tables):
            files.append(os.path.join(tmp, f"input_{i}.parquet"))
            pq.write_table(table, files[-1])
        one_t_inputs = [x for f in (files * 2 if operator == "hedge" else files)
                        for x in ("--input", f)]  # fmt: skip
        replay_inputs = [x for f in files for x in ("--input", f)]
        outs = {}
        commands: dict[str, list[str]] = {}
        for name, script in (("nested 1T", NESTED_1T), ("indexed 1T", INDEXED_1T)):
            outs[name] = os.path.join(tmp, f"{name.replace(' ', '_')}.parquet")
            commands[name] = [sys.executable, script, operator, "--ws", str(ws), *one_t_inputs]
            commands[name] += ["--output", outs[name]]
        for m in ms:
            name = f"p{m}"
            outs[name] = os.path.join(tmp, f"{name}.parquet")
            commands[name] = [STRETCH, "replay", operator, "--param", f"ws={ws}"]
            commands[name] += ["--param", f"keys={keys}", "--parallelism", str(m)]
            commands[name] += ["--max-parallelism", str(max(ms)), "--output", outs[name]]
            commands[name] += replay_inputs
        progress(f"{operator} ws={ws}: warm-up (whole processes)")
        first = {name: _process(command) for name, command in commands.items()}
        agree = same_rows({name: read_table(path) for name, path in outs.items()})
        cases = {
            name: partial(lambda c: {"seconds": _process(c)}, command)
            for name, command in commands.items()
        }
        progress(f"{operator} ws={ws}: {len(cases)} processes x {runs} runs")
        summary = {name: medians(s) for name, s in interleaved(runs, cases).items()}
    seconds = {name: s["seconds"] for name, s in summary.items()}
    found: dict[str, Any] = {
        "same_rows": agree,
        "seconds": seconds,
        "warm_up_seconds": first,
        "p1_over_nested_1T_time": seconds["p1"] / seconds["nested 1T"],
        "p1_speed_over_indexed_1T": seconds["indexed 1T"] / seconds["p1"],
    }
    for m in ms:
        if m > 1:
            found[f"p{m}_over_p1"] = seconds["p1"] / seconds[f"p{m}"]
    return found


def report(operator: str, found: dict[str, Any]) -> None:
    """Print the targets of issue 22, met or missed."""
    p1_time = found["p1_over_nested_1T_time"]
    p1_speed = found["p1_speed_over_indexed_1T"]
    print(f"{operator}: same rows in every output: {found['same_rows']}")
    print(f"{operator}: p1 time = {p1_time:.3f}x the nested 1T's (target <= 0.2)")
    print(f"{operator}: p1 speed = {p1_speed:.2f}x the indexed 1T's (target >= 0.5)")
    for key, value in found.items():
        if key.endswith("_over_p1"):
            print(f"{operator}: {key.replace('_over_', ' = ')} {value:.2f}x (target >= 1.6)")
