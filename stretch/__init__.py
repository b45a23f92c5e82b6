"""STRETCH: virtual shared-nothing parallelism and elasticity for stream operators.

The O+ model (``OPlus``), the operator catalog (``build``), the VSN runtime (``setup`` gives
a running ``Pipeline``; ``run_vsn`` runs tables through one) and the sequential SN
reference runtime (``run_sn``, ``SNRuntime``).
"""

import importlib
from typing import TYPE_CHECKING, Any

from stretch.catalog import CATALOG, build, register
from stretch.errors import (
    CapacityError,
    InputError,
    LateTupleError,
    OperatorError,
    ReconfigurationError,
    SchemaError,
    StretchError,
)
from stretch.oplus import OPlus, OutputTime, StreamTuple, Windows, WindowType
from stretch.schema import Schema
from stretch.sn import SNRuntime, run_sn

if TYPE_CHECKING:
    from stretch.pipeline import Pipeline
    from stretch.vsn import run_vsn, setup

__all__ = [
    "CATALOG",
    "CapacityError",
    "InputError",
    "LateTupleError",
    "OPlus",
    "OperatorError",
    "Pipeline",
    "OutputTime",
    "ReconfigurationError",
    "SNRuntime",
    "Schema",
    "SchemaError",
    "StreamTuple",
    "StretchError",
    "WindowType",
    "Windows",
    "build",
    "register",
    "run_sn",
    "run_vsn",
    "setup",
]

_LAZY = {"Pipeline": "stretch.pipeline", "run_vsn": "stretch.vsn", "setup": "stretch.vsn"}


def __getattr__(name: str) -> Any:
    """Load the VSN runtime on first use.

    ``scalegate`` imports ``stretch.errors``; importing the runtime (which imports
    ``scalegate``) eagerly here would make the two packages import each other.
    """
    module = _LAZY.get(name)
    if module is None:
        msg = f"module 'stretch' has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module(module), name)
