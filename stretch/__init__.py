"""STRETCH: virtual shared-nothing parallelism and elasticity for stream operators.

The O+ model (``OPlus``), the operator catalog (``build``), and the sequential SN reference
runtime (``run_sn``, ``SNRuntime``).
"""

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

__all__ = [
    "CATALOG",
    "CapacityError",
    "InputError",
    "LateTupleError",
    "OPlus",
    "OperatorError",
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
]
