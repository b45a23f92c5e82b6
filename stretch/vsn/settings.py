"""The runtime's settings: one frozen, validated object, and the limits it checks against.

A ``Pipeline`` takes a ``RuntimeSettings``; ``setup``'s keyword arguments are shorthands
for its fields. The service (``api``) builds one from its own limits, so every bound of
the runtime is named here once.
"""

from __future__ import annotations

from dataclasses import dataclass

from stretch.errors import OperatorError
from stretch.model.mapping import Shard

__all__ = ["DEFAULT_CAPACITY", "MAX_LATENESS_MS", "MAX_PARALLELISM", "RuntimeSettings"]

MAX_PARALLELISM = 64
"""The largest pool (n): the gates' reader and source slots."""

DEFAULT_CAPACITY = 1 << 16
"""Nodes each gate holds by default."""

MAX_LATENESS_MS = 1 << 40
"""The largest allowed lateness (about 35 years)."""


@dataclass(frozen=True)
class RuntimeSettings:
    """How a pipeline buffers, bounds and checks its work.

    Attributes:
        capacity: Nodes each gate (ESG_in, ESG_out) holds; ingest beyond it waits in the
            source (its backlog) and, with ``max_held_rows``, is refused.
        allowed_lateness_ms: How far behind its largest ``ts`` a source's rows may arrive
            (each source's reorder buffer, docs/design.md decision 8).
        max_held_rows: Rows a source may hold in its reorder buffer after a batch; a batch
            that would pass it is refused (``CapacityError``). None: no bound.
        max_uncommitted_rows: Output rows not committed after which input is refused
            (``CapacityError``: read and commit the output) and the output pauses: the
            log takes no more rows (beyond the rest of one ``ts``) and the instances wait
            for room in ESG_out until a reader commits. None: no bound.
        refuse_behind_backlog: Refuse a batch (``CapacityError``) while rows of the
            source's earlier batches still wait for room in ESG_in, instead of queueing it
            behind them (a service's admission: memory stays bounded by the gate).
        max_pending_reconfigurations: Reconfigurations that may wait for their barrier;
            one more is refused (``CapacityError``). None: no bound.
        kept_reconfigurations: Reconfiguration records kept (the most recent).
        trim_rows: A source drops rows no instance reads any more once it can drop this
            many at once.
        audit: Check that no key group is touched by two instances in an epoch (tests).
        compiled: Run the operator's declared kernel (``OPlus.kernel``) if it has one.
        compact_dictionary_bytes: The string dictionary (string columns' codes, shared
            by the sources) drops the strings no held row or kernel state uses any more
            once its strings take this many bytes (their UTF-8 plus about 40 each) and
            twice what those kept by its last compaction took. It does so at an epoch
            barrier, requesting one at the current plan (a reconfiguration with cause
            ``"compaction"``). A kernel's key table (the aggregates' words, hashtags or
            pairs) is compacted by the same bound. None: never.
        shard: The key groups this pipeline owns when the operator is sharded over
            several sidecars (docs/design.md "Sharding"); None: every group. Its output
            log then carries each row's cause (``CAUSE``) for the merge.

    """

    capacity: int = DEFAULT_CAPACITY
    allowed_lateness_ms: int = 0
    max_held_rows: int | None = None
    max_uncommitted_rows: int | None = None
    refuse_behind_backlog: bool = False
    max_pending_reconfigurations: int | None = None
    kept_reconfigurations: int = 1024
    trim_rows: int = 1 << 16
    audit: bool = False
    compiled: bool = True
    compact_dictionary_bytes: int | None = 64 << 20
    shard: Shard | None = None

    def __post_init__(self) -> None:
        if self.capacity < 2:
            msg = f"runtime setting capacity must be >= 2 nodes, got {self.capacity}"
            raise OperatorError(msg)
        if not 0 <= self.allowed_lateness_ms <= MAX_LATENESS_MS:
            msg = (
                f"runtime setting allowed_lateness_ms must be in 0..{MAX_LATENESS_MS}, "
                f"got {self.allowed_lateness_ms}"
            )
            raise OperatorError(msg)
        for name in (
            "max_held_rows",
            "max_uncommitted_rows",
            "max_pending_reconfigurations",
            "kept_reconfigurations",
            "trim_rows",
            "compact_dictionary_bytes",
        ):
            value = getattr(self, name)
            if value is not None and value < 1:
                msg = f"runtime setting {name} must be >= 1, got {value}"
                raise OperatorError(msg)
