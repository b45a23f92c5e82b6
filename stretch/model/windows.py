"""Window-instance bookkeeping: the state sigma of section 4.2, one store per key group.

A ``WindowStore`` holds, for the keys of one key group, each key's sets of I window
instances ordered by their left boundary ``l`` (``sigma[k][1]`` is the earliest), and an
index from ``l`` to the keys with a set there, so that ``processSN`` finds the expired
sets at ``rho`` without scanning every key. The shared state of the VSN runtime is a list
of G stores: a store is touched only by the owner of its key group (docs/design.md decision 4).
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field

from sortedcontainers import SortedDict

from stretch.model.oplus import Key, State, Windows

__all__ = ["WindowSet", "WindowStore"]

Cause = tuple[int, ...]


@dataclass(slots=True)
class WindowSet:
    """The I window instances of one key starting at ``l``.

    Attributes:
        key: The key.
        l: The left boundary (inclusive); the right one is ``l + WS`` (exclusive).
        states: One state per input stream.
        created: Where the set starts in the total order: (ts, source, seq, key index)
            of the earliest tuple in its window that updated it (the tuple that created
            it, until a single-type set slides past that tuple). Ties among outputs of
            expired windows are broken by it, so output order depends neither on the
            parallelism nor on tuples that left the window.
        last_ts: The ``ts`` of the latest tuple that updated the set.
        updates: For a single-type set, ``(ts, cause)`` of each update still in its
            window, oldest first (``created`` after a slide is the first of them).

    """

    key: Key
    l: int
    states: list[State]
    created: Cause
    last_ts: int
    updates: deque[tuple[int, Cause]] = field(default_factory=deque)

    def view(self) -> Windows:
        """The read-only view passed to f_U, f_O and f_S."""
        return Windows(self.key, self.l, tuple(self.states))


class WindowStore:
    """The window sets of the keys of one key group.

    Complexities are in the number of window sets ``n`` of the store.
    """

    def __init__(self) -> None:
        self._by_key: dict[Key, list[WindowSet]] = {}
        # l -> {key: None}, in creation order; made on first use, as most of the G stores
        # of an instance stay empty and a SortedDict costs tens of microseconds to make.
        self._by_l: SortedDict | None = None

    def __len__(self) -> int:
        return len(self._by_key)

    def __bool__(self) -> bool:
        return bool(self._by_key)

    def sets_of(self, key: Key) -> list[WindowSet]:
        """The window sets of ``key``, earliest first. O(1)."""
        return self._by_key.get(key, [])

    def get(self, key: Key, l: int) -> WindowSet | None:
        """The set of ``key`` at ``l``, if any. O(log n)."""
        sets = self._by_key.get(key)
        if not sets:
            return None
        i = bisect.bisect_left(sets, l, key=lambda s: s.l)
        return sets[i] if i < len(sets) and sets[i].l == l else None

    def create(self, key: Key, l: int, states: list[State], created: Cause) -> WindowSet:
        """Add a set for ``key`` at ``l`` (absent: see ``get``) with ``states``. O(log n)."""
        window_set = WindowSet(key, l, states, created, created[0])
        sets = self._by_key.setdefault(key, [])
        bisect.insort(sets, window_set, key=lambda s: s.l)
        self._index(window_set)
        return window_set

    def shift(self, window_set: WindowSet, new_l: int, states: list[State]) -> None:
        """shift: move a (single-type) set to ``new_l`` with new states. O(log n + slid).

        The set's ``created`` becomes its earliest update at or after ``new_l``.
        """
        self._unindex(window_set)
        window_set.l = new_l
        window_set.states = states
        updates = window_set.updates
        while len(updates) > 1 and updates[0][0] < new_l:
            updates.popleft()
        if updates:
            window_set.created = updates[0][1]
        self._index(window_set)

    def remove(self, window_set: WindowSet) -> None:
        """remove: drop a set. O(log n)."""
        sets = self._by_key[window_set.key]
        sets.remove(window_set)
        if not sets:
            del self._by_key[window_set.key]
        self._unindex(window_set)

    def earliest_l(self) -> int | None:
        """rho: the earliest left boundary of any set, or None if empty. O(1)."""
        return self._by_l.peekitem(0)[0] if self._by_l else None  # None or empty: no set

    def keys_at(self, l: int) -> list[Key]:
        """The keys with a set at ``l``, in creation order. O(keys at l)."""
        return list(self._by_l.get(l, ())) if self._by_l is not None else []

    def _index(self, window_set: WindowSet) -> None:
        if self._by_l is None:
            self._by_l = SortedDict()
        self._by_l.setdefault(window_set.l, {})[window_set.key] = None

    def _unindex(self, window_set: WindowSet) -> None:
        assert self._by_l is not None  # the set was indexed when created
        keys = self._by_l[window_set.l]
        del keys[window_set.key]
        if not keys:
            del self._by_l[window_set.l]
