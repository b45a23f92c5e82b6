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

import numpy as np

from scalegate import ElasticScaleGate
from stretch.model.oplus import END_OF_INPUT
from stretch.vsn.ingest import SourceStore
from stretch.vsn.pool import InstancePool

__all__ = ["Feeder"]

ADD_CHUNK = 4096
"""Rows per ESG_in offer, so a big table goes in as room frees rather than all at once."""

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

    def feed(self, store: SourceStore) -> None:
        """Move a source's backlog into ESG_in as far as there is room now.

        In order: pending control tuples (at the source's last ts in the gate), rows not
        yet in the gate, then the released watermark. Never waits for room. The caller
        holds ``store.lock`` and wakes the instances afterwards. O(rows moved log d).
        """
        gate = self.esg_in
        while True:
            while store.controls:
                if not gate.offer_control(store.source, store.controls[0]):
                    return
                store.controls.popleft()
            if not store.unfed:
                break
            rows = store.rows()
            start = store.fed - rows.base
            ts = rows.ts[start : start + min(store.unfed, ADD_CHUNK)]
            added = gate.offer_batch(
                store.source, ts, np.arange(store.fed, store.fed + len(ts), dtype=np.int64)
            )
            if not added:
                return
            store.fed += added
        horizon = self.pool.trim_horizon()
        if horizon is not None:
            store.trim(horizon, self.trim_rows)
        released = store.reorder.released
        if released > (store.watermark if store.watermark is not None else -END_OF_INPUT):
            if not gate.offer_watermark(store.source, released):
                return
            store.watermark = released
            store.closed = released == END_OF_INPUT

    def backlog(self, store: SourceStore) -> int:
        """Rows of ``store`` that wait for room in ESG_in, after trying to move them in."""
        with store.lock:
            waited = store.has_backlog()
            self.feed(store)
            unfed = store.unfed
        if waited:
            self.pool.wake_all()
        return unfed

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
                before = (store.fed, len(store.controls), store.watermark)
                self.feed(store)
                moved = before != (store.fed, len(store.controls), store.watermark)
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
