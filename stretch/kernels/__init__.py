"""Numba kernels for catalog operators: Alg. 4 L15-18 over batches of ready tuples.

``compile_operator(op)`` returns the kernel path of a catalog operator (recognised by its
functions, not only by its name) or None, in which case the instances run the operator's
Python functions (the generic path).
"""

from __future__ import annotations

import inspect

from stretch import catalog, joins
from stretch.kernels.aggregates import aggregate_kernel
from stretch.kernels.operators import HEDGE, SCALEJOIN, BandJoin, BandJoinKernel, ForwardKernel
from stretch.oplus import OPlus
from stretch.pool import CompiledOperator

__all__ = ["compile_operator"]

_BAND_JOINS: dict[object, BandJoin] = {
    catalog._scalejoin_match: SCALEJOIN,
    catalog._hedge_match: HEDGE,
}
"""The catalog's band joins with a kernel, by their match predicate."""


def compile_operator(op: OPlus) -> CompiledOperator | None:
    """The kernel path of ``op`` if it is a catalog operator with one, else None."""
    update = op.update
    qualname = getattr(update, "__qualname__", "")
    module = getattr(update, "__module__", "")
    if module == catalog.__name__ and qualname == "_forward.<locals>.update":
        keys = inspect.getclosurevars(op.multi_key).nonlocals["keys"]
        return ForwardKernel(op, int(keys))
    if module == joins.__name__ and qualname == "band_join.<locals>.update":
        nonlocals = inspect.getclosurevars(update).nonlocals
        join = _BAND_JOINS.get(nonlocals.get("match"))
        if join is not None:
            return BandJoinKernel(op, int(nonlocals["keys"]), join)
    return aggregate_kernel(op)
