"""Idempotent batches: the batch ids a source has seen, in bounded memory.

Spark's ``foreachBatch`` is at-least-once: after a failure it resends a batch with the same
id. A source remembers its most recent ids in a set of at most ``RECENT_BATCH_IDS`` ids;
when the set is full the smallest id is forgotten and becomes the source's low-water mark:
every id at or below it counts as seen. Writers whose ids grow (Spark's batch ids do) lose
nothing by this; a writer that sends an id older than its last ``RECENT_BATCH_IDS`` ids
gets it acknowledged as a duplicate.
"""

from __future__ import annotations

import heapq

__all__ = ["RECENT_BATCH_IDS", "BatchIds"]

RECENT_BATCH_IDS = 4096
"""Batch ids a source remembers exactly; older ones fall under its low-water mark."""


class BatchIds:
    """The batch ids one source has seen: a low-water mark and a bounded recent set.

    Args:
        recent: How many ids are remembered exactly.

    """

    def __init__(self, recent: int = RECENT_BATCH_IDS) -> None:
        self._limit = recent
        self._recent: set[int] = set()
        self._heap: list[int] = []  # the same ids, smallest first
        self.low_water = -1
        """Every id at or below it counts as seen."""

    def __len__(self) -> int:
        """Ids remembered exactly."""
        return len(self._recent)

    def __contains__(self, batch_id: object) -> bool:
        """Whether ``batch_id`` was seen (or is at or below the low-water mark). O(1)."""
        return isinstance(batch_id, int) and (
            batch_id <= self.low_water or batch_id in self._recent
        )

    def state(self) -> dict[str, object]:
        """The ids as JSON-ready data (for a checkpoint)."""
        return {"low_water": self.low_water, "recent": sorted(self._recent)}

    @classmethod
    def from_state(cls, state: dict[str, object], recent: int = RECENT_BATCH_IDS) -> BatchIds:
        """The ids ``state()`` returned."""
        ids = cls(recent)
        for batch_id in state.get("recent", []):  # type: ignore[attr-defined]
            ids.add(int(batch_id))
        ids.low_water = max(ids.low_water, int(state.get("low_water", -1)))  # type: ignore[call-overload]
        return ids

    def add(self, batch_id: int) -> None:
        """Remember ``batch_id``; forget the smallest id beyond the limit. O(log recent)."""
        if batch_id in self:
            return
        self._recent.add(batch_id)
        heapq.heappush(self._heap, batch_id)
        if len(self._heap) > self._limit:
            oldest = heapq.heappop(self._heap)
            self._recent.discard(oldest)
            self.low_water = max(self.low_water, oldest)
