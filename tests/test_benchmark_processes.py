"""The benchmarks' process runner: every process it starts ends by its deadline."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _util import at_once  # noqa: E402 - the benchmarks folder is not a package


def test_processes_run_together_and_a_failure_is_named() -> None:
    elapsed, cpu, errors = at_once([[sys.executable, "-c", "import sys; sys.stderr.write('x')"]])
    assert errors == ["x"] and elapsed > 0 and cpu >= 0
    with pytest.raises(AssertionError, match="exited with 3"):
        at_once([[sys.executable, "-c", "raise SystemExit(3)"]])


def test_processes_past_the_deadline_are_killed() -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    start = time.monotonic()
    with pytest.raises(AssertionError, match="still ran after 0.5 s"):
        at_once([sleeper, sleeper], deadline_s=0.5)
    assert time.monotonic() - start < 30
