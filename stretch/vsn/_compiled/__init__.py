"""The kernel paths of the VSN runtime: Alg. 4 L15-18 over runs of ready tuples.

An operator declares its kernel in ``OPlus.kernel`` (a spec of
``stretch.operators.kernels``); ``compile_operator`` maps the spec to the class that
drives that kernel for the instances of a pool. An operator without a spec runs its
Python functions in each instance (the generic path); ``Pipeline.status().path`` says which.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stretch.model.oplus import KernelSpec, OPlus
from stretch.operators.kernels import AggregateSpec, BandJoinSpec, ForwardSpec
from stretch.vsn._compiled.aggregates import AggregateKernel, KeyTable
from stretch.vsn._compiled.band_join import BandJoinKernel
from stretch.vsn._compiled.forward import ForwardKernel
from stretch.vsn._compiled.panes import PaneKernel
from stretch.vsn._instance import CompiledOperator

__all__ = ["KERNEL_PATHS", "compile_operator"]


def _forward(op: OPlus, spec: ForwardSpec) -> CompiledOperator:
    return ForwardKernel(op, spec.keys)


def _band_join(op: OPlus, spec: BandJoinSpec) -> CompiledOperator:
    return BandJoinKernel(op, spec.keys, spec.join, spec.by_band)


def _aggregate(op: OPlus, spec: AggregateSpec) -> CompiledOperator:
    """Panes where the spec declares an associative combine, else a table per window."""
    kernel = PaneKernel if spec.combine is not None else AggregateKernel
    return kernel(op, KeyTable(op, spec.keys, spec.b), take_max=spec.take_max)


KERNEL_PATHS: dict[type[KernelSpec], Callable[[OPlus, Any], CompiledOperator]] = {
    ForwardSpec: _forward,
    BandJoinSpec: _band_join,
    AggregateSpec: _aggregate,
}
"""The one registration place of kernels: an operator's spec type -> its kernel path."""


def compile_operator(op: OPlus) -> CompiledOperator | None:
    """The kernel path ``op`` declares (``op.kernel``), or None for the generic path."""
    spec = op.kernel
    make = KERNEL_PATHS.get(type(spec)) if spec is not None else None
    return make(op, spec) if make is not None else None
