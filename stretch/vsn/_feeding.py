"""Feeding ESG_in from the sources without waiting for room (Alg. 5, ``addSTRETCH``).

What a producer brings (rows the reorder buffer released, control tuples of
reconfigurations, the released watermark) is kept in its ``SourceStore`` and offered to
ESG_in without waiting (``ElasticScaleGate.offer_*``); what does not fit is the source's
backlog. Three parties move backlogs in, each in the source's order (control tuples at the
source's last ts first, then rows, then the watermark), so the merged stream and the
output are the same as with blocking adds:

* the producer, right away (``feed``) and then while rows keep going in (``help``);
* the output drainer (``pump``), woken by an instance that took nodes, and so freed room,
  while a source has a backlog.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from scalegate import ElasticScaleGate
from stretch.vsn._ingest import SourceStore
from stretch.vsn._pool import InstancePool

__all__ = ["Feeder"]

TRIM_ROWS = 1 << 16
"""A source drops rows no instance reads any more once it can drop this many at once."""

FEED_PATIENCE_S = 0.002
"""How long a producer keeps feeding its backlog without any row going in."""

FEED_DEADLINE_S = 0.5
"""The longest a producer call helps to feed its source's backlog."""

FEED_YIELDS = 8
"""Feeding attempts that only yield the GIL before sleeping ``FEED_SLEEP_S``."""

FEED_SLEEP_S = 50e-6
"""The pause between later feeding attempts of a producer."""

LOCK_WAIT_S = 0.05
"""How long the drainer waits for a source's lock before it comes back later."""


class Feeder:
    """Moves the sources' backlogs into ESG_in, never waiting for room while locked.

    Args:
        esg_in: The gate the instances read.
        pool: The instance pool (trim horizon, wake-ups, stop flag).
        sources: The input sources' stores, by source index.

    Attributes:
        trim_rows: A source drops rows no instance reads any more once it can drop this
            many at once.

    """

    def __init__(
        self, esg_in: ElasticScaleGate, pool: InstancePool, sources: Sequence[SourceStore]
    ) -> None:
        self.esg_in = esg_in
        self.pool = pool
        self.sources = sources
        self.trim_rows = TRIM_ROWS

    def feed(self, store: SourceStore) -> bool:
        """Move a source's backlog into ESG_in as far as there is room now.

        The caller holds ``store.lock`` and wakes the instances afterwards; the store
        offers its own backlog (``SourceStore.feed``). Returns whether anything went in.
        """
        return store.feed(self.esg_in, self.pool.trim_horizon(), self.trim_rows)

    def help(self, store: SourceStore) -> None:
        """Keep moving the source's backlog into ESG_in while that makes progress.

        A producer whose rows did not all fit feeds them itself as readers free room,
        which is faster than leaving them to the drainer; it gives up once no row went
        in for ``FEED_PATIENCE_S`` (the rows wait for another source, not for readers),
        after ``FEED_DEADLINE_S`` in all, or when the pipeline stops. The lock is held
        only while feeding, so reconfigurations and the drainer are never held up.
        """
        started = idle_since = time.monotonic()
        attempt = 0
        while store.has_backlog() and not self.pool.stopping:
            now = time.monotonic()
            if now - idle_since > FEED_PATIENCE_S or now - started > FEED_DEADLINE_S:
                return
            time.sleep(0 if attempt < FEED_YIELDS else FEED_SLEEP_S)
            with store.lock:
                moved = self.feed(store)
            if moved:
                self.pool.wake_all()
                idle_since, attempt = time.monotonic(), 0
            else:
                attempt += 1

    def pump(self) -> None:
        """Move every source's backlog into ESG_in as far as there is room (the drainer)."""
        waited = False
        for store in self.sources:
            if not store.has_backlog():
                continue
            waited = True
            if not store.lock.acquire(timeout=LOCK_WAIT_S):
                self.pool.drainer_wake.set()  # a producer holds it: come back soon
                continue
            try:
                self.feed(store)
            finally:
                store.lock.release()
        if waited:
            self.pool.wake_all()
