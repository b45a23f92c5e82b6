"""Band and theta joins as J+ operators: ScaleJoin (Operator 10) over a match predicate.

Every tuple carries all K keys (f_MK), so every instance sees it and compares it with
its share of the stored tuples of the opposite stream; each tuple is stored by exactly
one key, chosen round robin by its sequence number in its stream (``seq % K``): a choice
that depends on the tuple alone, so a pipeline restored from the tuples in its windows
stores them where the original did.
A pair is compared once, when its later tuple arrives, and only if the two ``ts`` are at
most WS apart: the stored side is purged of tuples older than ``t.ts - WS`` first. The
band includes both ends, so the O+ window is one tick longer than the band: ``[l, l + WS +
1)`` holds every tuple that a later one within WS can still match.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from stretch.model.oplus import (
    OPlus,
    OutputTime,
    Payload,
    State,
    StreamTuple,
    Windows,
    WindowType,
)
from stretch.model.schema import Schema
from stretch.operators.kernels import BandJoin, BandJoinSpec

__all__ = ["JoinSide", "band_join"]

Match = Callable[[StreamTuple, StreamTuple], Payload | None]


@dataclass(slots=True)
class JoinSide:
    """zeta of one side's window instance: the stored tuples T.

    It has no length on purpose: f_S never empties a join's window set. The set is removed
    only after a gap of more than WS in the input (``stretch.model.instance``).
    """

    stored: deque[StreamTuple] = field(default_factory=deque)


def band_join(
    name: str,
    wa_ms: int,
    ws_ms: int,
    inputs: tuple[Schema, Schema],
    output: Schema,
    match: Match,
    keys: int,
    kernel: BandJoin | None = None,
) -> OPlus:
    """A two-stream J+ (Operator 10) emitting ``match(left, right)`` for pairs within WS.

    Args:
        name: Operator name.
        wa_ms: WA (the paper uses delta = 1 ms).
        ws_ms: WS: pairs whose ``ts`` differ by at most this are compared.
        inputs: The schemas of L (source 0) and R (source 1).
        output: The schema of ``match``'s payloads.
        match: Returns the output payload of a matching pair, or None.
        keys: K, the number of keys the stored tuples are spread over.
        kernel: The compiled form of ``match`` (a ``BandJoin`` of
            ``stretch.operators.kernels``), or None to run ``match`` in Python.

    """
    all_keys = tuple(range(keys))

    def update(w: Windows, t: StreamTuple) -> tuple[Sequence[State], Sequence[Payload]]:
        this, opposite = (w.states[0], w.states[1]) if t.source == 0 else (w.states[1], w.states[0])
        stored = opposite.stored
        while stored and stored[0].ts + ws_ms < t.ts:
            stored.popleft()
        if t.source == 0:
            found = (match(t, other) for other in stored)
        else:
            found = (match(other, t) for other in stored)
        payloads = [p for p in found if p is not None]
        if t.seq % keys == w.key:
            this.stored.append(t)
        return w.states, payloads

    def keep(w: Windows, new_l: int) -> Sequence[State]:
        return w.states

    return OPlus(
        name,
        wa_ms,
        ws_ms + 1,
        inputs,
        multi_key=lambda t: all_keys,
        window_type=WindowType.SINGLE,
        output=output,
        update=update,
        slide=keep,
        new_state=JoinSide,
        update_time=OutputTime.INPUT,
        kernel=None if kernel is None else BandJoinSpec(keys, kernel),
    )
