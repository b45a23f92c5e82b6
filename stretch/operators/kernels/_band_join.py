"""Numba kernels of the catalog's band joins (Operator 10): an instance's keys over a run.

The catalog's J+ (``stretch.operators.joins.band_join``) gives every tuple all K keys; key k stores
a tuple when the tuple counter c (the same for every key) is ``c % K == k``, and, when a
tuple arrives, purges the opposite side's tuples older than ``t.ts - WS`` and compares
the rest. One call handles every key an instance owns (key by key, so a key's stores
stay in cache over the run), releasing the GIL once per run rather than once per key;
the caller puts the matches in the reference order (tuple, key, stored order).

``_band_join`` is that loop for any match predicate; each join has an entry point that
names its predicate (``scalejoin_run``, ``hedge_run``). Numba inlines the loop and the
predicate into the entry point (``inline="always"``, in its IR), so each entry point is
compiled and optimised as one function, as fast as a loop with the predicate written in,
and takes no function argument, so Numba's on-disk cache can key it: a jitted function
passed as an argument gets a type that differs in every process, and the cache would
recompile (and add a file) each time. A predicate takes ``(left, l, right, r)``: the
tuples of the input columns it reads of L and of R, and the sequence numbers of the pair.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

__all__ = ["hedge_run", "scalejoin_run"]

Columns = tuple[NDArray[Any], ...]
"""The input columns a predicate reads of one side, indexed by sequence number."""
Match = Callable[[Columns, int, Columns, int], bool]
"""A predicate: whether L tuple ``l`` and R tuple ``r`` (sequence numbers) match."""

COUNT = 4
"""The column of ``bounds`` holding a key's tuple counter c (0-3: head/tail L, R)."""
LAST = 5
"""The column of ``bounds`` holding the ts of the last tuple the key saw."""
NEVER = -(2**62)
"""``bounds[:, LAST]`` of a key that saw no tuple yet."""


@njit(inline="always")
def _scalejoin_match(left: Columns, l: int, right: Columns, r: int) -> bool:
    """``catalog._scalejoin_match`` on L (x, y) and R (a, b): both within 10."""
    return bool(abs(left[0][l] - right[0][r]) <= 10 and abs(left[1][l] - right[1][r]) <= 10)


@njit(inline="always")
def _hedge_match(left: Columns, l: int, right: Columns, r: int) -> bool:
    """``catalog._hedge_match`` on (symbol code, price, avg_price), float for float.

    The same operations in the same order as the Python predicate, so every ratio and
    comparison is bit for bit the reference's, and an ``avg_price`` of 0 raises
    ZeroDivisionError as it does there (Numba's Python error model); equal symbols have
    equal codes (one dictionary per pipeline).
    """
    if left[0][l] == right[0][r]:
        return False
    nd_left = (left[1][l] - left[2][l]) / left[2][l]
    if nd_left == 0:
        return False
    nd_right = (right[1][r] - right[2][r]) / right[2][r]
    return bool(-1.05 <= nd_right / nd_left <= -0.95)


@njit(inline="always")
def _band_join(
    match: Match,
    slot_keys: NDArray[np.int64],
    keys: int,
    ws: int,
    wa: int,
    progress: NDArray[np.int64],
    run_ts: NDArray[np.int64],
    run_source: NDArray[np.int64],
    run_seq: NDArray[np.int64],
    store_ts: NDArray[np.int64],
    store_seq: NDArray[np.int64],
    bounds: NDArray[np.int64],
    left: Columns,
    right: Columns,
    bases: NDArray[np.int64],
    out: NDArray[np.int64],
    stats: NDArray[np.int64],
) -> bool:
    """Process the run for the keys ``slot_keys``, key by key; return whether all is done.

    Slot s holds key ``slot_keys[s]``: ``store_ts[s, side]`` / ``store_seq[s, side]``
    (side 0 = L, 1 = R) between ``bounds[s, 2 side]`` and ``bounds[s, 2 side + 1]``, and
    its counter in ``bounds[s, COUNT]``; the stores have room for the whole run. A key
    whose window set the reference would remove before a tuple (the set slid past the
    last tuple that updated it: ``earliestWinL(ts) > bounds[s, LAST]``, for the join's
    window of ``ws + 1`` ms, see ``stretch.operators.joins``) starts over empty, with its counter at
    0, as the reference's new set does. ``ws`` is the band: pairs at most ``ws`` apart.
    ``progress[s]`` is the next run tuple of slot s. Matches go to ``out[:, n]`` as (tuple
    index, key, partner seq, j-th match of the tuple and key); ``stats`` holds the matches
    written and the comparisons made. Stops before a tuple whose matches might not fit;
    the caller takes the matches, grows ``out`` if none were written, and calls again.
    A pair is L tuple l and R tuple r whichever arrived last; it matches when
    ``match(left, l - bases[0], right, r - bases[1])``, ``left`` and ``right`` being the
    columns it reads, which hold the rows from sequence number ``bases[side]`` on.
    """
    n_out = stats[0]
    cap = out.shape[1]
    for s in range(slot_keys.shape[0]):
        key = slot_keys[s]
        for i in range(progress[s], run_ts.shape[0]):
            this = 0 if run_source[i] == 0 else 1
            other = 1 - this
            head, tail = bounds[s, 2 * other], bounds[s, 2 * other + 1]
            if n_out + (tail - head) > cap:
                progress[s] = i
                stats[0] = n_out
                return False
            ts = run_ts[i]
            seq = run_seq[i]
            if ((ts - ws - 1) // wa + 1) * wa > bounds[s, LAST]:  # window: WS + 1
                bounds[s, 0], bounds[s, 2] = bounds[s, 1], bounds[s, 3]
                bounds[s, COUNT] = 0
                head = tail
            bounds[s, LAST] = ts
            count = bounds[s, COUNT] + 1
            bounds[s, COUNT] = count
            other_ts, other_seq = store_ts[s, other], store_seq[s, other]
            while head < tail and other_ts[head] + ws < ts:
                head += 1
            bounds[s, 2 * other] = head
            j = 0
            for p in range(head, tail):
                partner = other_seq[p]
                if this == 0:
                    hit = match(left, seq - bases[0], right, partner - bases[1])
                else:
                    hit = match(left, partner - bases[0], right, seq - bases[1])
                if hit:
                    out[0, n_out] = i
                    out[1, n_out] = key
                    out[2, n_out] = partner
                    out[3, n_out] = j
                    j += 1
                    n_out += 1
            stats[1] += tail - head
            if count % keys == key:
                t = bounds[s, 2 * this + 1]
                store_ts[s, this, t] = ts
                store_seq[s, this, t] = seq
                bounds[s, 2 * this + 1] = t + 1
        progress[s] = run_ts.shape[0]
    stats[0] = n_out
    return True


@njit(nogil=True, cache=True)
def scalejoin_run(
    slot_keys: NDArray[np.int64],
    keys: int,
    ws: int,
    wa: int,
    progress: NDArray[np.int64],
    run_ts: NDArray[np.int64],
    run_source: NDArray[np.int64],
    run_seq: NDArray[np.int64],
    store_ts: NDArray[np.int64],
    store_seq: NDArray[np.int64],
    bounds: NDArray[np.int64],
    left: Columns,
    right: Columns,
    bases: NDArray[np.int64],
    out: NDArray[np.int64],
    stats: NDArray[np.int64],
) -> bool:
    """``_band_join`` with ScaleJoin's predicate; ``left`` = (x, y), ``right`` = (a, b)."""
    return _band_join(
        _scalejoin_match,
        slot_keys,
        keys,
        ws,
        wa,
        progress,
        run_ts,
        run_source,
        run_seq,
        store_ts,
        store_seq,
        bounds,
        left,
        right,
        bases,
        out,
        stats,
    )


@njit(nogil=True, cache=True)
def hedge_run(
    slot_keys: NDArray[np.int64],
    keys: int,
    ws: int,
    wa: int,
    progress: NDArray[np.int64],
    run_ts: NDArray[np.int64],
    run_source: NDArray[np.int64],
    run_seq: NDArray[np.int64],
    store_ts: NDArray[np.int64],
    store_seq: NDArray[np.int64],
    bounds: NDArray[np.int64],
    left: Columns,
    right: Columns,
    bases: NDArray[np.int64],
    out: NDArray[np.int64],
    stats: NDArray[np.int64],
) -> bool:
    """``_band_join`` with hedge's predicate; each side is (symbol, price, avg_price)."""
    return _band_join(
        _hedge_match,
        slot_keys,
        keys,
        ws,
        wa,
        progress,
        run_ts,
        run_source,
        run_seq,
        store_ts,
        store_seq,
        bounds,
        left,
        right,
        bases,
        out,
        stats,
    )
