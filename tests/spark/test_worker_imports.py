"""Spark's Python workers import the ``stretch`` data source without Numba.

Each worker that runs the data source (planning, a reader or writer task, a commit)
imports its module; ``stretch demo`` starts ten of them. The runtime (Numba and the
kernels) loads only when a process uses it, and a worker of the ``stretch-files`` source
loads neither the ``stretch`` data source nor its HTTP client.
"""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
import stretch.spark.files
print("httpx" in sys.modules)
import stretch.spark
stretch.spark.register
print(sorted(m for m in ("numba", "scalegate.gate", "stretch.model.sn") if m in sys.modules))
import stretch, stretch.model, scalegate
assert stretch.run_sn is stretch.model.run_sn
assert scalegate.ElasticScaleGate.__module__ == "scalegate.gate"
print("numba" in sys.modules)
"""


def test_the_data_source_imports_without_numba_and_the_runtime_loads_on_use() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "[]", "True"]
