"""What every kernel path needs from a run of ready nodes and from its instance."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from scalegate import DATA
from stretch.vsn._instance import ReadyNodes, VSNInstance

__all__ = ["audit_groups", "data_nodes", "owned_groups"]


def data_nodes(nodes: ReadyNodes, start: int, stop: int) -> tuple[NDArray[np.int64], ...]:
    """``(ts, source, seq)`` of the data tuples among nodes ``start..stop``.

    Views of the nodes' columns when every node is a data tuple (most runs), else copies.
    """
    mask = nodes.kind[start:stop] == DATA
    if mask.all():
        return nodes.ts[start:stop], nodes.source[start:stop], nodes.payload[start:stop]
    return (
        nodes.ts[start:stop][mask],
        nodes.source[start:stop][mask],
        nodes.payload[start:stop][mask],
    )


def owned_groups(instance: VSNInstance) -> NDArray[np.bool_]:
    """Which key groups the instance owns in its current epoch."""
    owned: NDArray[np.bool_] = instance.plan.owners == instance.j
    return owned


def audit_groups(instance: VSNInstance, groups: NDArray[np.int64]) -> None:
    """Record, if the pipeline audits ownership, that the instance touched ``groups``."""
    audit = instance.shared.audit
    if audit is not None:
        for group in np.unique(groups).tolist():
            audit.touch(instance.plan.epoch, group, instance.j)
