"""The operator catalog: forward, the band joins and the windowed aggregates, as O+.

It owns what each named operator computes: its schemas, parameters and Python functions
(``catalog``, ``joins``), user registration (``register``, ``load_operators``), band
joins with a user's compiled predicate (``compiled_join.band_join``), and the kernels with
the specs by which an operator declares one (``kernels``). It does not run operators:
``stretch.model.run_sn`` and the VSN runtime (``stretch.vsn``) do.
"""

from stretch.operators.catalog import (
    CATALOG,
    ENTRY_POINT_GROUP,
    OperatorSpec,
    Param,
    build,
    load_operators,
    register,
)
from stretch.operators.compiled_join import band_join

__all__ = [
    "CATALOG",
    "ENTRY_POINT_GROUP",
    "OperatorSpec",
    "Param",
    "band_join",
    "build",
    "load_operators",
    "register",
]
