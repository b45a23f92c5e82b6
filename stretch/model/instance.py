"""One O+ instance: the window logic of Alg. 2 (processSN), shared by both runtimes.

An instance owns some key groups of the state sigma (a list of G ``WindowStore``s). In the
SN runtime each instance has a private sigma_j and sees only the tuples forwarded to it
(Alg. 1); in the VSN runtime all instances share sigma and see every tuple, and the key
mapping of the current epoch says which groups each one touches (Alg. 4).

Every output row carries a ``cause``: where in the total order it was produced. Output is
sorted by ``(ts, cause)``, which is the same whatever the parallelism or the key mapping,
so every run gives the same rows in the same order (docs/design.md decision 2).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from stretch.model.oplus import (
    END_OF_INPUT,
    Key,
    OPlus,
    OutputTime,
    Payload,
    StreamTuple,
    WindowType,
    is_empty,
)
from stretch.model.windows import WindowSet, WindowStore

__all__ = ["OPlusInstance", "OutputRow", "TraceEvent"]

EXPIRED = 0
UPDATED = 1


class OutputRow(NamedTuple):
    """An output tuple: ``ts``, payload in output-schema order, and its sort cause.

    ``cause`` is ``(0, *created, j)`` for the j-th payload of f_O on a set created at
    ``created``, and ``(1, ts, source, seq, key_index, window, j)`` for the j-th payload of
    f_U on tuple ``(ts, source, seq)``, its key ``key_index`` of f_MK and its window.
    """

    ts: int
    payload: Payload
    cause: tuple[int, ...]


TraceEvent = tuple[Any, ...]
"""A state operation as Execution Trace 16 lists them, e.g. ("set", "red", 0, (13,))."""


class OPlusInstance:
    """An O+ instance o+_j: watermark W, and the key groups of sigma it owns.

    Args:
        op: The operator.
        state: sigma, one store per key group (private in SN, shared in VSN).
        owns: Whether this instance is responsible for a key group now.
        emit: Called with each output row.
        trace: If given, the state operations are appended to it.

    """

    def __init__(
        self,
        op: OPlus,
        state: Sequence[WindowStore],
        owns: Callable[[int], bool],
        emit: Callable[[OutputRow], None],
        trace: list[TraceEvent] | None = None,
    ) -> None:
        self.op = op
        self.state = state
        self.owns = owns
        self.emit = emit
        self.trace = trace
        self.watermark = -END_OF_INPUT
        self.set_owned_groups(g for g in range(len(state)) if owns(g))

    def set_owned_groups(self, groups: Iterable[int]) -> None:
        """Replace the key groups this instance expires windows for (a reconfiguration).

        Rebuilds ``rho`` per group: a heap of ``(earliest l, group)`` entries such that
        every non-empty owned store has an entry no later than its earliest set. Entries
        may be stale (too early); popping one only re-checks its store.
        """
        self._rho = [(rho, g) for g in groups if (rho := self.state[g].earliest_l()) is not None]
        heapq.heapify(self._rho)

    def process(self, t: StreamTuple) -> None:
        """processSN (Alg. 2): update W, expire windows, then handle t."""
        self.advance(t.ts)
        self.handle_input_tuple(t)

    def advance(self, watermark: int) -> None:
        """updateW and the expiry loop of Alg. 2 (L26-29) for a new watermark."""
        if watermark <= self.watermark:
            return
        self.watermark = watermark
        latest_expired = watermark - self.op.ws_ms
        rho = self._rho
        while rho and rho[0][0] <= latest_expired:
            _, group = heapq.heappop(rho)
            store = self.state[group]
            self._expire(store)
            if (earliest := store.earliest_l()) is not None:
                heapq.heappush(rho, (earliest, group))

    def _expire(self, store: WindowStore) -> None:
        """Output and shift/remove every set of ``store`` that has expired.

        A set expires once ``l + WS <= W`` (section 2.3): no tuple still to come falls in
        it. Alg. 2 steps rho by WA; here rho jumps to the earliest set left, which skips
        only steps with no set.
        """
        ws = self.op.ws_ms
        while (rho := store.earliest_l()) is not None and rho + ws <= self.watermark:
            for key in store.keys_at(rho):
                self._forward_and_shift(store, store.sets_of(key)[0])

    def _forward_and_shift(self, store: WindowStore, window_set: WindowSet) -> None:
        """forwardAndShift (Alg. 2, L5-12).

        A single-type set slides by WA; one whose f_O outputs nothing jumps straight to the
        first boundary not expired. A set that would slide past the last tuple that
        updated it is removed instead: it would describe no tuple, and deciding this from
        the key's own tuples (not from W) keeps the output independent of the parallelism.
        """
        op = self.op
        view = window_set.view()
        self._emit(window_set.l + op.ws_ms, op.output_fn(view), (EXPIRED, *window_set.created))
        new_l = window_set.l + op.wa_ms
        if not op.emits_on_expiry:
            new_l += (self.watermark - op.ws_ms - window_set.l) // op.wa_ms * op.wa_ms
        if op.window_type is WindowType.MULTI or new_l > window_set.last_ts:
            self._remove(store, window_set)
            return
        states = list(op.slide(view, new_l))
        if all(is_empty(s) for s in states):
            self._remove(store, window_set)
        else:
            store.shift(window_set, new_l, states)
            self._trace("shift", window_set.key, new_l, tuple(states))

    def _remove(self, store: WindowStore, window_set: WindowSet) -> None:
        store.remove(window_set)
        self._trace("remove", window_set.key, window_set.l)

    def handle_input_tuple(self, t: StreamTuple) -> None:
        """handleInputTuple (Alg. 2, L14-23) for the keys of t this instance owns.

        Keys are the outer loop and windows the inner one, as in Execution Trace 16 (Alg.
        2 lists them the other way round; they touch disjoint window sets).
        """
        op = self.op
        mine = [(i, k) for i, k in enumerate(op.keys_of(t)) if self.owns(op.group_of(k))]
        if not mine:
            return
        first = op.earliest_win_l(t.ts)
        last = first if op.window_type is WindowType.SINGLE else op.latest_win_l(t.ts)
        for key_index, key in mine:
            store = self.state[op.group_of(key)]
            for window, l in enumerate(range(first, last + 1, op.wa_ms)):
                self._update(store, t, key_index, key, window, l)

    def _update(
        self, store: WindowStore, t: StreamTuple, key_index: int, key: Key, window: int, l: int
    ) -> None:
        op = self.op
        window_set = store.get(key, l)  # check&Create
        if window_set is None:
            window_set = store.create(
                key, l, [op.new_state() for _ in op.inputs], (*t.order, key_index)
            )
            heapq.heappush(self._rho, (l, op.group_of(key)))
        self._trace("check&Create", key, l)
        states, payloads = op.update(window_set.view(), t)
        ts = l + op.ws_ms if op.update_time is OutputTime.WINDOW_END else t.ts
        self._emit(ts, payloads, (UPDATED, *t.order, key_index, window))
        window_set.states = list(states)
        window_set.last_ts = t.ts
        if op.window_type is WindowType.SINGLE:
            window_set.updates.append((t.ts, (*t.order, key_index)))
        self._trace("set", key, window, tuple(states))

    def _emit(self, ts: int, payloads: Sequence[Payload], cause: tuple[int, ...]) -> None:
        for j, payload in enumerate(payloads):
            self.emit(OutputRow(ts, tuple(payload), (*cause, j)))

    def _trace(self, *event: Any) -> None:
        if self.trace is not None:
            self.trace.append(event)
