"""The O+ model of section 4.2 and the sequential reference runtime (Alg. 1-2).

It owns what an operator means: schemas and columnar batches, ``OPlus`` with Table I's
defaults, window bookkeeping (rho, check&Create, shift, ...), key groups and f_mu, and
``run_sn``, the shared-nothing runtime whose output every other runtime must equal row
for row. It knows no threads, gates, kernels or catalog names (``stretch.operators``,
``stretch.vsn``).
"""

from stretch.model.oplus import KernelSpec, OPlus, OutputTime, StreamTuple, Windows, WindowType
from stretch.model.schema import Schema
from stretch.model.sn import SNRuntime, run_sn

__all__ = [
    "KernelSpec",
    "OPlus",
    "OutputTime",
    "SNRuntime",
    "Schema",
    "StreamTuple",
    "WindowType",
    "Windows",
    "run_sn",
]
