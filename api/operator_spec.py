"""An operator's spec, and what is built from it at a create and at a restore.

The spec is the create request's fields (kept as ``operator.json`` with a state
directory, ``api.durability``). A create (``api.registry``) and a restore from the files
(``api.recovery``) build the same things from it: the O+ named after its instance
(``build_instance``), the runtime's settings under the service's limits
(``runtime_settings``) and the managed operator around the pipeline
(``managed_operator``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from stretch.api.limits import ServiceLimits
from stretch.api.metrics import ServiceMetrics
from stretch.api.operators import ManagedOperator
from stretch.model.oplus import OPlus
from stretch.operators.catalog import CATALOG, build
from stretch.vsn import Pipeline, RuntimeSettings, Shard

__all__ = ["build_instance", "managed_operator", "runtime_settings"]

MAX_PENDING_RECONFIGURATIONS = 100
"""Reconfigurations of one operator that may wait for their barrier; more get 429."""


def build_instance(name: str, operator: str, params: Mapping[str, Any]) -> OPlus:
    """The O+ of catalog ``operator`` named after its instance ``name``.

    The runtime names its operator in every message (a late row: ``source 0 of
    'bi-sj'``), its threads and its logs; a service may run several instances of one
    catalog operator, so the instance's name is the one that tells them apart.
    """
    return replace(build(operator, params), name=name)


def runtime_settings(
    limits: ServiceLimits, capacity: int, allowed_lateness_ms: int, shard: Shard | None
) -> RuntimeSettings:
    """The runtime's settings of an operator: refuse rather than queue, within ``limits``."""
    return RuntimeSettings(
        shard=shard,
        capacity=capacity,
        allowed_lateness_ms=allowed_lateness_ms,
        max_held_rows=limits.max_held_rows,
        max_uncommitted_rows=limits.max_uncommitted_rows,
        refuse_behind_backlog=True,
        max_pending_reconfigurations=MAX_PENDING_RECONFIGURATIONS,
    )


def managed_operator(
    name: str,
    spec: Mapping[str, Any],
    pipeline: Pipeline,
    metrics: ServiceMetrics,
    limits: ServiceLimits,
) -> ManagedOperator:
    """The managed operator ``name`` of ``spec`` around its started ``pipeline``."""
    return ManagedOperator(
        name,
        spec["operator"],
        spec["params"],
        pipeline,
        spec["capacity"],
        metrics,
        limits,
        one_stream=CATALOG[spec["operator"]].one_stream,
    )
