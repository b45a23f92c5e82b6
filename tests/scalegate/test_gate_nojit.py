"""The scalegate suite again with ``NUMBA_DISABLE_JIT=1``, so kernel lines run as Python.

Run as a subprocess because Numba reads the variable at import time. The other test modules
shrink their sizes when they see ``numba.config.DISABLE_JIT``. CI can also run the whole
suite that way directly (``NUMBA_DISABLE_JIT=1 pytest tests/scalegate``), as stumpy does;
this test then skips itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from numba import config

HERE = Path(__file__).resolve().parent
MODULES = ("test_gate_api.py", "test_gate_model.py", "test_gate_threads.py")


@pytest.mark.skipif(cast(Any, config).DISABLE_JIT, reason="this run already has the JIT disabled")
def test_suite_passes_with_the_jit_disabled() -> None:
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    result = subprocess.run(
        [*command, *(str(HERE / m) for m in MODULES)],
        cwd=HERE.parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout
