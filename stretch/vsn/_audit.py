"""Checking Theorem 3 while the runtime runs: no key group has two owners in one epoch.

Tests and benchmarks turn it on with ``setup(..., audit=True)``; then every access of an
instance to sigma, and every key group a kernel touches, is recorded per epoch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from stretch.model.windows import WindowStore

__all__ = ["AuditedState", "OwnershipAudit"]


class _Toucher(Protocol):
    """An instance as the audit sees it: its id and its epoch's plan."""

    @property
    def j(self) -> int: ...

    @property
    def plan(self) -> Any: ...


class OwnershipAudit:
    """A checker that no key group is touched by two instances in one epoch (Theorem 3).

    ``violations`` lists ``(epoch, group, first instance, second instance)``.
    """

    def __init__(self) -> None:
        self.owner: dict[tuple[int, int], int] = {}
        self.violations: list[tuple[int, int, int, int]] = []

    def touch(self, epoch: int, group: int, instance: int) -> None:
        """Record that ``instance`` touched ``group`` in ``epoch``."""
        first = self.owner.setdefault((epoch, group), instance)
        if first != instance:
            self.violations.append((epoch, group, first, instance))


class AuditedState(Sequence[WindowStore]):
    """sigma as one instance sees it, recording every key group it touches."""

    def __init__(self, sigma: list[WindowStore], audit: OwnershipAudit, instance: _Toucher) -> None:
        self._sigma = sigma
        self._audit = audit
        self._instance = instance

    def __len__(self) -> int:
        return len(self._sigma)

    def __getitem__(self, group: Any) -> Any:
        self._audit.touch(self._instance.plan.epoch, group, self._instance.j)
        return self._sigma[group]

    def __iter__(self) -> Iterator[WindowStore]:
        return iter(self._sigma)
