"""Panes (Enorm): wordcount, paircount and longest_tweet with their windows' work shared.

With WS / WA = k, each tuple falls in k overlapping windows, and the per-window path
(``AggregateKernel``) folds it into each of the k tables. An aggregate whose combine is
associative (counts add, maxima take the larger; ``AggregateSpec.combine``) can instead
keep one partial value per key per *pane*: the windows' bounds cut time into panes of
``gcd(WA, WS)`` ms, and every window is a run of ``WS / gcd`` whole panes. A tuple is
folded once, into its pane's table (the same ``update_window``), and a window's table is
combined from its panes' tables when it closes (``combine_panes``).

The rows are the per-window path's. A key's value is the combine of its panes' values,
and its cause (the window's tie-break, the generic path's ``created``) is the earliest
tuple of the window with that key: the creator recorded by its earliest pane that has it.
A pane is dropped once every window holding it has closed. Which windows closed is a
function of the watermark alone (``l + WS <= W``), and every instance meets a
reconfiguration's barrier at the same watermark, so a pane's entries can move to a key's
new owner like a window's.

A pane that ended (``p + gcd <= W``) takes no more tuples, since later tuples have later
ts; its entries are then copied once, in pane order, into the instance's ``_PaneLog``, so
that the panes of a closing window lie side by side there and are combined from one
slice, instead of being gathered again for each of the ``WS / WA`` windows holding them.
"""

from __future__ import annotations

import bisect
import math

import numpy as np
from numpy.typing import NDArray

from stretch.model.oplus import END_OF_INPUT, OPlus
from stretch.operators.kernels._aggregate import CREATED, combine_panes
from stretch.vsn._compiled.aggregates import AggregateKernel, KeyTable, _Entries, _Window
from stretch.vsn._instance import VSNInstance
from stretch.vsn._reconfiguration import EpochPlan

__all__ = ["PaneKernel"]

_NO_POSITIONS = np.empty(0, dtype=np.int64)
LOG_ENTRIES = 1024
"""The entries a pane log has room for at first."""


class _PaneLog:
    """An instance's ended panes' entries, side by side in pane order.

    ``spans[p]`` is where pane p's entries lie in ``keys``, ``values`` and ``created``
    (``CREATED`` rows); the entries from ``first`` on are live, and when a pane does not
    fit after ``end`` the live ones move to the start of new arrays (at least twice the
    room they and the pane need). Derived from the panes' tables: rebuilt after a
    switch, which moves entries between instances.
    """

    def __init__(self) -> None:
        self.keys = np.empty(LOG_ENTRIES, dtype=np.int64)
        self.values = np.empty(LOG_ENTRIES, dtype=np.int64)
        self.created = np.empty((CREATED, LOG_ENTRIES), dtype=np.int64)
        self.spans: dict[int, tuple[int, int]] = {}
        self.first = self.end = 0  # the live entries: [first, end)
        self.last = -END_OF_INPUT  # the last pane logged

    def extend(self, panes: dict[int, _Window], starts: list[int], ended: int) -> None:
        """Log the panes of ``starts`` (sorted) after the last logged, up to ``ended``."""
        for p in starts[bisect.bisect_right(starts, self.last) :]:
            if p >= ended:
                break
            entries = panes[p].entries()
            n = entries.keys.shape[0]
            self._room(n)
            at = self.end
            self.keys[at : at + n] = entries.keys
            self.values[at : at + n] = entries.values
            self.created[:, at : at + n] = entries.created
            self.spans[p] = (at, at + n)
            self.end, self.last = at + n, p

    @property
    def nbytes(self) -> int:
        """The bytes of its arrays (its room, not only the live entries)."""
        return int(self.keys.nbytes + self.values.nbytes + self.created.nbytes)

    def drop(self, p: int) -> None:
        """Forget pane p, the earliest live one (if it was logged)."""
        span = self.spans.pop(p, None)
        if span is not None:
            self.first = span[1]

    def _room(self, n: int) -> None:
        """Room for n more entries: drop the dead prefix or grow the arrays."""
        if self.end + n <= self.keys.shape[0]:
            return
        live = self.end - self.first
        size = max(self.keys.shape[0], 2 * (live + n))
        keys, values = np.empty(size, np.int64), np.empty(size, np.int64)
        created = np.empty((CREATED, size), np.int64)
        keys[:live] = self.keys[self.first : self.end]
        values[:live] = self.values[self.first : self.end]
        created[:, :live] = self.created[:, self.first : self.end]
        shift = self.first
        self.spans = {p: (a - shift, b - shift) for p, (a, b) in self.spans.items()}
        self.keys, self.values, self.created = keys, values, created
        self.first, self.end = 0, live


class PaneKernel(AggregateKernel):
    """An aggregate with an associative combine on one table per pane (``self.windows``).

    ``self.windows[j]`` maps a pane's start to instance j's table of it.

    Args:
        op: The operator.
        keys: Its f_MK over tweets, numbered once per row.
        take_max: Keep each key's maximum (longest_tweet) rather than a count.

    """

    def __init__(self, op: OPlus, keys: KeyTable, take_max: bool) -> None:
        super().__init__(op, keys, take_max)
        self.pane_ms = math.gcd(op.wa_ms, op.ws_ms)
        self.closed: dict[int, int] = {}  # instance -> W: each window with l + WS <= W is out
        self._positions: dict[int, NDArray[np.int64]] = {}  # instance -> combine's scratch
        self._logs: dict[int, _PaneLog] = {}  # instance -> its ended panes' entries

    def _spans(self, first_ts: int, last_ts: int) -> list[tuple[int, int]]:
        """The panes ``[p, p + gcd)`` from ``first_ts``'s to ``last_ts``'s."""
        g = self.pane_ms
        return [(p, p + g) for p in range(first_ts // g * g, last_ts // g * g + 1, g)]

    def advance(self, instance: VSNInstance, watermark: int, budget: int) -> int:
        """Emit the windows that ended by ``watermark`` (L15-17); drop the panes they freed.

        A window is emitted once: those with ``l + WS`` at or before the previous
        watermark are out already. Windows holding no pane are skipped in one step. Once
        ``budget`` rows went out it stops before a window that ends before ``watermark``
        and returns that window's end (else ``watermark``).
        """
        panes = self.windows.get(instance.j)
        closed = self.closed.get(instance.j, -END_OF_INPUT)
        if not panes or watermark <= closed:
            self.closed[instance.j] = max(closed, watermark)
            return watermark
        op = self.op
        wa, ws = op.wa_ms, op.ws_ms
        starts = sorted(panes)
        log = self._logs.setdefault(instance.j, _PaneLog())
        # Every pane of a window that ends by the watermark has ended.
        log.extend(panes, starts, watermark - self.pane_ms + 1)
        # The first window not out yet: the smallest l = k * WA with l + WS > closed.
        l = max(op.earliest_win_l(starts[0]), (closed - ws) // wa * wa + wa)
        ended: list[tuple[int, _Entries]] = []
        rows = 0
        reached = watermark
        while l + ws <= watermark:
            lo = bisect.bisect_left(starts, l)
            hi = bisect.bisect_left(starts, l + ws)
            if lo == hi:  # no pane in this window: on to the first window of the next pane
                if hi == len(starts):
                    break
                l = max(l + wa, op.earliest_win_l(starts[hi]))
                continue
            if rows >= budget and l + ws < watermark:
                reached = l + ws
                break
            begin, end = log.spans[starts[lo]][0], log.spans[starts[hi - 1]][1]
            entries = self._combined(instance.j, log, begin, end)
            ended.append((l + ws, entries))
            rows += entries.keys.shape[0]
            l += wa
        self._emit(instance, ended)
        # Out now: every window with l + WS <= closed.
        closed = watermark if reached == watermark else reached - 1
        self.closed[instance.j] = closed
        for p in starts:
            if op.latest_win_l(p) + ws > closed:
                break
            del panes[p]
            log.drop(p)
        return reached

    def _combined(self, j: int, log: _PaneLog, begin: int, end: int) -> _Entries:
        """A window's entries from instance j's logged panes ``[begin, end)``, in order."""
        position = self._positions.get(j, _NO_POSITIONS)
        if position.shape[0] < len(self.keys.strings):  # scratch for every key number
            position = np.full(2 * len(self.keys.strings), -1, dtype=np.int64)
            self._positions[j] = position
        keys, values, created = combine_panes(
            log.keys[begin:end],
            log.values[begin:end],
            log.created,
            begin,
            self.take_max,
            position,
        )
        return _Entries(keys, values, created)

    def state_bytes(self) -> int:
        """The panes' tables and the key table (``AggregateKernel``), and the pane logs."""
        return super().state_bytes() + sum(log.nbytes for log in list(self._logs.values()))

    def compact_tables(self, limit: int) -> None:
        """``AggregateKernel.compact_tables`` over the panes' tables; the logs are rebuilt."""
        if self.tables_due(limit):
            super().compact_tables(limit)
            self._logs = {}  # they hold the old numbers; rebuilt from the tables as at a switch

    def switch(self, plan: EpochPlan) -> None:
        """Move every pane entry to its key's owner under ``plan`` (no instance is running).

        The instances met at the barrier with one watermark, so the windows each has
        emitted are the same: a new owner emits from where they all are.
        """
        super().switch(plan)
        self._logs = {}
        if self.closed:
            closed = max(self.closed.values())
            self.closed = dict.fromkeys(range(plan.parallelism), closed)
