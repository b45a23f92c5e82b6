"""The operator catalog: forward, the band joins and the windowed aggregates, as O+.

It owns what each named operator computes: its schemas, parameters and Python functions
(``catalog``, ``joins``), user registration (``register``), and the compiled kernels with
the specs by which an operator declares one (``kernels``). It does not run operators:
``stretch.model.run_sn`` and the VSN runtime (``stretch.vsn``) do.
"""

from stretch.operators.catalog import CATALOG, OperatorSpec, Param, build, register

__all__ = ["CATALOG", "OperatorSpec", "Param", "build", "register"]
