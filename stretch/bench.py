"""``stretch bench``: run an experiment of ``benchmarks/`` with its results where asked.

The scripts write to ``benchmarks/results/`` (the committed results) when run directly;
through ``stretch bench`` they write to ``--output DIR`` (default ``./stretch-bench-
results``), passed to them as the variable ``STRETCH_BENCH_RESULTS``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from stretch.errors import InputError

__all__ = [
    "BENCHMARKS",
    "DEFAULT_OUTPUT",
    "PROG_ENV",
    "RESULTS_ENV",
    "run_benchmark",
    "split_output",
]

BENCHMARKS = (
    "cores",
    "durability",
    "elastic",
    "forward",
    "http",
    "memory",
    "panes",
    "reconfig",
    "reorder",
    "replay_input",
    "replay_output",
    "scalegate",
    "scalejoin",
    "scaleout",
    "spark",
    "spark_bandjoin",
    "threads",
    "vsn_vs_sn",
)
"""The experiments, ``benchmarks/bench_NAME.py``."""

DEFAULT_OUTPUT = "stretch-bench-results"
"""Where results go unless the user names a folder (under the current directory)."""

RESULTS_ENV = "STRETCH_BENCH_RESULTS"
"""The variable that tells a benchmark script its results folder."""

PROG_ENV = "STRETCH_BENCH_PROG"
"""The variable that tells a benchmark script the command to name in usage and errors."""


def split_output(default: str, args: Sequence[str]) -> tuple[str, list[str]]:
    """The results folder (``--output DIR`` anywhere in ``args``) and the other args."""
    output, rest = default, []
    items = iter(args)
    for item in items:
        if item == "--output":
            output = next(items, None) or default
        elif item.startswith("--output="):
            output = item.partition("=")[2] or default
        else:
            rest.append(item)
    return output, rest


def run_benchmark(name: str, args: Sequence[str], output: str) -> int:
    """Run ``benchmarks/bench_NAME.py`` with ``args``, results in ``output``; its status.

    Raises:
        InputError: no source checkout holds the script.

    """
    script = Path(__file__).resolve().parent.parent / "benchmarks" / f"bench_{name}.py"
    if not script.is_file():
        msg = f"{script} not found: 'stretch bench' needs a source checkout of the repository"
        raise InputError(msg)
    env = {
        **os.environ,
        RESULTS_ENV: str(Path(output).resolve()),
        PROG_ENV: f"stretch bench {name}",
    }
    return subprocess.run([sys.executable, str(script), *args], check=False, env=env).returncode
