"""The kernel paths of the VSN runtime: Alg. 4 L15-18 over runs of ready tuples.

An operator declares its kernel in ``OPlus.kernel`` (a spec of
``stretch.operators.kernels``); ``compile_operator`` maps the spec to the class that
drives that kernel for the instances of a pool. An operator without a spec runs its
Python functions in each instance (the generic path); ``Pipeline.stats()`` says which.
"""

from __future__ import annotations

from stretch.model.oplus import OPlus
from stretch.operators.kernels import AggregateSpec, BandJoinSpec, ForwardSpec
from stretch.vsn.compiled.aggregates import AggregateKernel, KeyTable
from stretch.vsn.compiled.band_join import BandJoinKernel
from stretch.vsn.compiled.forward import ForwardKernel
from stretch.vsn.instance import CompiledOperator

__all__ = ["compile_operator"]


def compile_operator(op: OPlus) -> CompiledOperator | None:
    """The kernel path ``op`` declares (``op.kernel``), or None for the generic path."""
    spec = op.kernel
    if isinstance(spec, ForwardSpec):
        return ForwardKernel(op, spec.keys)
    if isinstance(spec, BandJoinSpec):
        return BandJoinKernel(op, spec.keys, spec.join)
    if isinstance(spec, AggregateSpec):
        return AggregateKernel(op, KeyTable(op, spec.keys, spec.b), take_max=spec.take_max)
    return None
