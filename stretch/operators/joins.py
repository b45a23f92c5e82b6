"""Band and theta joins as J+ operators: ScaleJoin (Operator 10) over a match predicate.

Every tuple carries all K keys (f_MK), so every instance sees it and compares it with
its share of the stored tuples of the opposite stream; each tuple is stored by exactly
one key, chosen round robin by its sequence number in its stream (``seq % K``): a choice
that depends on the tuple alone, so a pipeline restored from the tuples in its windows
stores them where the original did. A join with a band may store by the band instead
(``partition="band"``): the key of the block of band cells its band key falls in
(``kernels._band_index.store_keys``), also a function of the tuple alone. Its matches
are the same; only their order within one tuple's (by key, then stored order) follows
the keys. An instance then holds the tuples of its blocks only, and its index skips the
probes whose band lies in other instances' blocks: the probe work splits between the
instances instead of every instance visiting every probe's cells.
A pair is compared once, when its later tuple arrives, and only if the two ``ts`` are at
most WS apart: the stored side is purged of tuples older than ``t.ts - WS`` first. The
band includes both ends, so the O+ window is one tick longer than the band: ``[l, l + WS +
1)`` holds every tuple that a later one within WS can still match.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

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
from stretch.operators.kernels._band_index import band_cells, store_keys

__all__ = ["JoinSide", "band_join"]

Match = Callable[[StreamTuple, StreamTuple], Payload | None]


@dataclass(slots=True)
class JoinSide:
    """zeta of one side's window instance: the stored tuples T.

    It has no length on purpose: f_S never empties a join's window set. The set is removed
    only after a gap of more than WS in the input (``stretch.model.instance``).
    """

    stored: deque[StreamTuple] = field(default_factory=deque)


def _store_key(keys: int, kernel: BandJoin | None, partition: str) -> Callable[[StreamTuple], int]:
    """The key that stores a tuple: ``seq % keys``, or its band's block (``store_keys``)."""
    if partition == "seq":
        return lambda t: t.seq % keys
    if partition != "band":
        msg = f"partition must be 'seq' or 'band', got {partition[:40]!r}"
        raise ValueError(msg)
    if kernel is None or kernel.band is None:
        msg = "partition 'band' needs a band (an indexed join: index=on)"
        raise ValueError(msg)
    band = kernel.band
    # The last tuple and its key: f_U sees a tuple once per key. One entry, replaced
    # whole, so that instances sharing the operator (the generic path) read a consistent
    # pair; held, the tuple cannot be freed and another take its identity.
    last: list[tuple[StreamTuple | None, int]] = [(None, 0)]

    def by_band(t: StreamTuple) -> int:
        seen, key = last[0]
        if seen is t:
            return key
        value = band.keys(t.source, tuple(np.array([t[c]]) for c in band.reads[t.source]))
        cell = band_cells(value, band.width)[0]
        key = int(store_keys(np.array([t.seq]), cell, keys, True)[0])
        last[0] = (t, key)
        return key

    return by_band


def band_join(
    name: str,
    wa_ms: int,
    ws_ms: int,
    inputs: tuple[Schema, Schema],
    output: Schema,
    match: Match,
    keys: int,
    kernel: BandJoin | None = None,
    partition: str = "seq",
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
        partition: ``"seq"``: a tuple is stored by key ``seq % keys`` (ScaleJoin's round
            robin); ``"band"``: by its band's block (``kernel.band`` is then required).

    Raises:
        ValueError: ``partition`` is neither, or ``"band"`` without a band.

    """
    all_keys = tuple(range(keys))
    store_key = _store_key(keys, kernel, partition)

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
        if store_key(t) == w.key:
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
        kernel=None if kernel is None else BandJoinSpec(keys, kernel, partition == "band"),
    )
