"""The O+ model of section 4.2 and the sequential reference runtime (Alg. 1-2).

It owns what an operator means: schemas and columnar batches, ``OPlus`` with Table I's
defaults, window bookkeeping (rho, check&Create, shift, ...), key groups and f_mu, and
``run_sn``, the shared-nothing runtime whose output every other runtime must equal row
for row. It knows no threads, gates, kernels or catalog names (``stretch.operators``,
``stretch.vsn``).
"""

import importlib
from typing import TYPE_CHECKING, Any

from stretch.model.oplus import KernelSpec, OPlus, OutputTime, StreamTuple, Windows, WindowType
from stretch.model.schema import Schema

if TYPE_CHECKING:
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


def __getattr__(name: str) -> Any:
    """Load the reference runtime on first use.

    Its batches' string dictionary loads Numba, which a process that needs only the
    schemas (a Spark worker running the ``stretch`` data source) does without.
    """
    if name not in ("SNRuntime", "run_sn"):
        msg = f"module 'stretch.model' has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module("stretch.model.sn"), name)
