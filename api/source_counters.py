"""What one REST source of an operator received, and the batch ids it has seen.

The counters feed the operator's status (``sources``, ``counters``) and the metrics
(``stretch_tuples_in_total``, ``stretch_late_tuples_total``,
``stretch_duplicate_batches_total``). A batch is a duplicate if its ``batch_id`` was seen
on the source (``api.batch_ids``), or if its staging writer committed it or a later batch
(``api.staging``). A checkpoint keeps the counters (``state``); a restore takes them back
(``restore``) and counts the journal's ``batch`` and ``counted`` records after it again.
Requests change them under ``lock``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from stretch.api.batch_ids import BatchIds

__all__ = ["SourceCounters"]


@dataclass
class SourceCounters:
    """What one source received over HTTP, and the batch ids it has seen."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    batch_ids: BatchIds = field(default_factory=BatchIds)
    tuples_in: int = 0
    batches: int = 0
    duplicate_batches: int = 0
    late_tuples: int = 0
    writers: dict[str, int] = field(default_factory=dict)
    """Each staging writer's last committed batch (its later batches are new)."""

    def seen(self, batch_id: int | None, writer: tuple[str, int] | None) -> bool:
        """Whether a batch was added before: by its id, or by its writer's (id, batch). O(1)."""
        return (batch_id is not None and batch_id in self.batch_ids) or (
            writer is not None and writer[1] <= self.writers.get(writer[0], -1)
        )

    def count(self, late_tuples: int = 0, duplicate_batches: int = 0) -> None:
        """Count late rows and duplicate batches (of a batch whose rows were not applied)."""
        self.late_tuples += late_tuples
        self.duplicate_batches += duplicate_batches

    def added(
        self, batch_id: int | None, writer: tuple[str, int] | None, tuples: int, dropped: int
    ) -> None:
        """Count a batch added: ``tuples`` rows in, ``dropped`` late rows left out.

        Its id (if any) is seen from now on, and its writer's batch (if any) is the
        writer's last committed one.
        """
        if batch_id is not None:
            self.batch_ids.add(batch_id)
        if writer is not None:
            self.writers[writer[0]] = writer[1]
        self.batches += 1
        self.tuples_in += tuples
        self.count(late_tuples=dropped)

    def state(self) -> dict[str, Any]:
        """The counters, batch ids and writers, as a checkpoint keeps them (JSON)."""
        return {
            "tuples_in": self.tuples_in,
            "batches": self.batches,
            "duplicate_batches": self.duplicate_batches,
            "late_tuples": self.late_tuples,
            "batch_ids": self.batch_ids.state(),
            "writers": dict(self.writers),
        }

    def restore(self, saved: dict[str, Any]) -> None:
        """Take back what ``state`` saved (a restore, before any request)."""
        self.tuples_in = int(saved["tuples_in"])
        self.batches = int(saved["batches"])
        self.duplicate_batches = int(saved["duplicate_batches"])
        self.late_tuples = int(saved["late_tuples"])
        self.batch_ids = BatchIds.from_state(saved["batch_ids"])
        self.writers = {str(k): int(v) for k, v in saved["writers"].items()}
