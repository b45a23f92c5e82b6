"""``stretch bench elastic``: the help, and a --quick run that writes its JSON and figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stretch.cli", "bench", "elastic", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_help_names_the_experiments() -> None:
    result = bench("--help")
    assert result.returncode == 0, result.stderr
    for option in ("--experiment", "--quick", "--duration-s", "--output"):
        assert option in result.stdout


@pytest.mark.slow
def test_quick_q5_checks_the_output_and_reports_the_targets(tmp_path: Path) -> None:
    result = bench(
        "--experiment", "q5", "--quick", "--max-parallelism", "2", "--output", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    q5 = json.loads((tmp_path / "elastic_q5.json").read_text())
    assert (tmp_path / "elastic_q5.png").is_file()
    assert [run["label"] for run in q5["runs"]] == ["elastic", "static 1", "static 2"]
    assert q5["output"]["identical_to_static"]
    assert q5["output"]["run_sn"]["identical"]
    assert set(q5["targets"]) == {
        "latency_mean_le_20ms",
        "thread_seconds_le_0.8x_static_max",
        "output_identical_to_run_sn",
    }
    assert "machine" in q5
    assert "Q5" in result.stdout
