"""Elastic ScaleGate (ESG): the paper's TB object (Table II) as Numba kernels over arrays.

Sources merge timestamp-sorted streams; every reader receives every ready node exactly
once, in the total order (ts, source, seq). See ``docs/scalegate.md``.
"""

from pathlib import Path

from scalegate._nodes import CONTROL, DATA, DUMMY, FLUSH, TS_MAX, TS_MIN, WATERMARK
from scalegate.gate import ElasticScaleGate, ReadyBatch
from scalegate.numba_cache import drop_stale

drop_stale(Path(__file__).parent)  # before any kernel loads from Numba's cache

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
