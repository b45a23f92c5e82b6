"""Elastic ScaleGate (ESG): the paper's TB object (Table II) as Numba kernels over arrays.

Sources merge timestamp-sorted streams; every reader receives every ready node exactly
once, in the total order (ts, source, seq). See ``docs/scalegate.md``.

The gate (and with it Numba) loads on first use of ``ElasticScaleGate`` or
``ReadyBatch``: ``import scalegate.numba_cache`` runs this file, and processes that only
need that (Spark's Python workers running the ``stretch`` data source) do without Numba.
"""

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scalegate._nodes import CONTROL, DATA, DUMMY, FLUSH, TS_MAX, TS_MIN, WATERMARK
from scalegate.numba_cache import drop_stale

drop_stale(Path(__file__).parent)  # before any kernel loads from Numba's cache

if TYPE_CHECKING:
    from scalegate.gate import ElasticScaleGate, ReadyBatch

__all__ = [
    "CONTROL",
    "DATA",
    "DUMMY",
    "FLUSH",
    "TS_MAX",
    "TS_MIN",
    "WATERMARK",
    "ElasticScaleGate",
    "ReadyBatch",
]


def __getattr__(name: str) -> Any:
    """Load the gate on first use (see the module's docstring)."""
    if name not in ("ElasticScaleGate", "ReadyBatch"):
        msg = f"module 'scalegate' has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module("scalegate.gate"), name)
