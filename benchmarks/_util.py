"""Shared plumbing of the benchmark scripts: progress, machine facts, JSON and plots."""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib as mpl

mpl.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the display-less backend)

RESULTS = Path(os.environ.get("STRETCH_BENCH_RESULTS") or Path(__file__).parent / "results")
"""The results folder: ``stretch bench --output DIR`` sets it; run directly, the committed one."""


def progress(message: str) -> None:
    """One progress line on stderr (stdout is kept for the summary)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def machine() -> dict[str, Any]:
    """What the numbers were measured on, and how busy the machine was at the start.

    A load average above the CPU count means other processes shared the cores, which
    lowers absolute numbers and, above all, parallel speed-ups.
    """
    return {
        "cpus": len(os.sched_getaffinity(0)),
        "load_average_1m": os.getloadavg()[0],
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50, p99 and max of ``values`` (NaN when empty)."""
    if not values:
        return {"p50": float("nan"), "p99": float("nan"), "max": float("nan"), "n": 0}
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    return {"p50": at(0.5), "p99": at(0.99), "max": ordered[-1], "n": len(ordered)}


def interleaved(
    runs: int, cases: dict[str, Callable[[], dict[str, float]]]
) -> dict[str, list[dict[str, float]]]:
    """Run every case ``runs`` times, round robin, so slow drifts hit all cases alike."""
    out: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
    for run in range(runs):
        for name, case in cases.items():
            result = case()
            out[name].append(result)
            shown = ", ".join(f"{k}={v:,.4g}" for k, v in result.items())
            progress(f"run {run + 1}/{runs} {name}: {shown}")
    return out


PROCESS_DEADLINE_S = 3600.0
"""The longest ``at_once`` waits for its processes before it kills them."""


def at_once(
    commands: Sequence[Sequence[str]], deadline_s: float = PROCESS_DEADLINE_S
) -> tuple[float, float, list[str]]:
    """Run ``commands`` as processes at once: wall seconds, their CPU seconds, their stderr.

    Raises AssertionError naming the command if one exits non-zero, or, after killing
    them all, if they are not done within ``deadline_s``.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    running = [
        subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for c in commands
    ]
    errors = []
    try:
        for p in running:
            left = max(deadline_s - (time.perf_counter() - start), 0.0)
            errors.append(p.communicate(timeout=left)[1])
    except subprocess.TimeoutExpired as exc:
        for p in running:
            p.kill()
            p.communicate()
        msg = f"{exc.cmd} still ran after {deadline_s:g} s; every process was killed"
        raise AssertionError(msg) from exc
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    for command, p, err in zip(commands, running, errors, strict=True):
        assert p.returncode == 0, f"{command} exited with {p.returncode}: {err[-2000:]}"
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu, errors


def medians(samples: list[dict[str, float]]) -> dict[str, float]:
    """Per-field median over runs."""
    return {k: statistics.median(s[k] for s in samples) for k in samples[0]}


def write(name: str, result: dict[str, Any], directory: Path = RESULTS) -> Path:
    """Write ``result`` as ``<directory>/<name>.json``; return the path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps(result, indent=2, default=float))
    return path


def figure(ncols: int, title: str) -> tuple[Any, Any]:
    """A matplotlib figure with ``ncols`` axes (the Agg backend: no display needed)."""
    fig, axes = plt.subplots(1, ncols, figsize=(5 * ncols, 4), squeeze=False)
    fig.suptitle(title)
    return fig, axes[0]


def grid(
    nrows: int, ncols: int, title: str, width_ratios: Sequence[float] | None = None
) -> tuple[Any, Any]:
    """A figure with an ``nrows`` x ``ncols`` array of axes (always two-dimensional)."""
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(5 * ncols if width_ratios is None else 3 * sum(width_ratios), 3 * nrows),
        squeeze=False,
        gridspec_kw={"width_ratios": width_ratios} if width_ratios else None,
    )
    fig.suptitle(title)
    return fig, axes


def save(fig: Any, name: str, directory: Path = RESULTS) -> Path:
    """Save ``fig`` as ``<directory>/<name>.png``; return the path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


LAUNCH = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as peak:
    peak.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""
"""Run a command from a small process and write its peak resident KiB to a file. A child
forked from this script would count this script's memory in its own peak."""


def measured(command: list[str]) -> dict[str, float]:
    """Run ``command``; its wall seconds and its own peak resident memory."""
    with tempfile.TemporaryDirectory() as folder:
        peak, errors = os.path.join(folder, "peak"), os.path.join(folder, "errors")
        started = time.perf_counter()
        with open(errors, "wb") as sink:
            done = subprocess.run(
                [sys.executable, "-S", "-c", LAUNCH, peak, *command],
                stdout=subprocess.DEVNULL,
                stderr=sink,
                check=False,
            )
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            msg = f"{command[:3]} failed ({done.returncode}): {Path(errors).read_text()}"
            raise RuntimeError(msg)
        return {"seconds": elapsed, "peak_mib": int(Path(peak).read_text()) / 1024}


def peaks_and_walls(commands: dict[str, list[str]], runs: int, label: str) -> dict[str, Any]:
    """Each command's median wall seconds and peak memory over ``runs`` runs in turn.

    One run of each first, not counted (Numba's cache, the files in memory); ``label``
    starts each progress line.
    """
    samples: dict[str, list[dict[str, float]]] = {case: [] for case in commands}
    for command in commands.values():
        measured(command)
    for run in range(runs):
        for case, command in commands.items():
            samples[case].append(measured(command))
            progress(f"{label}, run {run + 1}, {case}: {samples[case][-1]}")
    return {
        case: {
            field: statistics.median(s[field] for s in samples[case])
            for field in ("seconds", "peak_mib")
        }
        for case in commands
    }


def plot_peaks_and_walls(
    sizes: list[dict[str, Any]], xs: list[float], xlabel: str, title: str, name: str
) -> Path:
    """Peak memory and wall seconds of each case of ``sizes`` against ``xs``; the PNG's path."""
    fig, axes = figure(2, title)
    cases = [case for case, value in sizes[0].items() if isinstance(value, dict)]
    for ax, field, label in zip(
        axes, ("peak_mib", "seconds"), ("peak resident memory (MiB)", "wall seconds"), strict=True
    ):
        for case in cases:
            ax.plot(xs, [s[case][field] for s in sizes], "o-", label=case)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(label)
        ax.legend()
    return save(fig, name)
