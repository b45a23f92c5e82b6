"""STRETCH: virtual shared-nothing parallelism and elasticity for stream operators.

Three rooms, each depending only on the ones before it:

* ``stretch.model``: the O+ model (``OPlus``, ``Schema``) and the sequential SN reference
  runtime (``run_sn``, ``SNRuntime``);
* ``stretch.operators``: the operator catalog (``build``, ``register`` with its
  ``Param``, ``load_operators``), compiled band joins with a user's predicate (``band_join``) and
  the kernels;
* ``stretch.vsn``: the VSN runtime (``setup`` gives a running ``Pipeline``; ``run_vsn``
  runs tables through one, ``run_vsn_pieces`` too, giving the output in bounded pieces).

At the top: the CLI (``cli``), the REST client (``client``), file IO, generators, errors.
"""

import importlib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scalegate.numba_cache import drop_stale
from stretch.errors import (
    CapacityError,
    InputError,
    LateTupleError,
    OperatorError,
    ReconfigurationError,
    SchemaError,
    StretchError,
)
from stretch.model.oplus import OPlus, OutputTime, StreamTuple, Windows, WindowType
from stretch.model.schema import Schema

drop_stale(Path(__file__).parent)  # before any kernel loads from Numba's cache

if TYPE_CHECKING:
    from stretch.model.sn import SNRuntime, run_sn
    from stretch.operators.catalog import CATALOG, Param, build, load_operators, register
    from stretch.operators.compiled_join import band_join
    from stretch.vsn import Pipeline, run_vsn, run_vsn_pieces, setup

__all__ = [
    "CATALOG",
    "CapacityError",
    "InputError",
    "LateTupleError",
    "OPlus",
    "OperatorError",
    "Pipeline",
    "OutputTime",
    "Param",
    "ReconfigurationError",
    "SNRuntime",
    "Schema",
    "SchemaError",
    "StreamTuple",
    "StretchError",
    "WindowType",
    "Windows",
    "__version__",
    "band_join",
    "build",
    "load_operators",
    "register",
    "run_sn",
    "run_vsn",
    "run_vsn_pieces",
    "setup",
]

try:
    __version__ = version("stretch")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

_LAZY = {
    "CATALOG": "stretch.operators.catalog",
    "Param": "stretch.operators.catalog",
    "build": "stretch.operators.catalog",
    "load_operators": "stretch.operators.catalog",
    "register": "stretch.operators.catalog",
    "band_join": "stretch.operators.compiled_join",
    "SNRuntime": "stretch.model.sn",
    "run_sn": "stretch.model.sn",
    "Pipeline": "stretch.vsn",
    "run_vsn": "stretch.vsn",
    "run_vsn_pieces": "stretch.vsn",
    "setup": "stretch.vsn",
}


def __getattr__(name: str) -> Any:
    """Load the reference runtime, the catalog and the VSN runtime on first use.

    ``scalegate`` imports ``stretch.errors``; importing the runtime (which imports
    ``scalegate``) eagerly here would make the two packages import each other. The three
    load Numba, which processes that only need the client or the schemas (Spark's Python
    workers running the ``stretch`` data source: 10 of them in ``stretch demo``) do
    without: a process importing the data source took 0.6 s with Numba, 0.4 s without.
    """
    module = _LAZY.get(name)
    if module is None:
        msg = f"module 'stretch' has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module(module), name)
