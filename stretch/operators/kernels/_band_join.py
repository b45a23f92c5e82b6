"""Numba kernels of the catalog's band joins (Operator 10): an instance's keys over a run.

The catalog's J+ (``stretch.operators.joins.band_join``) gives every tuple all K keys; key k stores
a tuple when its sequence number in its stream is ``seq % K == k``, and, when a
tuple arrives, purges the opposite side's tuples older than ``t.ts - WS`` and compares
the rest. One call handles every key an instance owns (key by key, so a key's stores
stay in cache over the run), releasing the GIL once per run rather than once per key;
the caller puts the matches in the reference order (tuple, key, stored order) with
``order_matches``.

Each key's window keeps, per side, the columns the predicate reads in contiguous arrays
of its own (a copy made when the key stores a tuple, dropped when the caller compacts
the store), so the inner loop streams through the stored tuples in memory order instead
of gathering each one from the shared input columns, where consecutive tuples of a key
lie K rows apart.

The comparison loop is a vector loop: a probe meets the opposite store in blocks of
``BLOCK`` tuples; a ``candidate`` test, branch-free, counts the block's candidates (Numba
and LLVM turn that loop into SIMD code: 8 lanes of i64 and double on AVX-512), and only a
block with a candidate is scanned again, in stored order, with the exact ``match``,
writing each pair, so the matches and their order are those of a plain scan. A key's
consecutive run tuples of one side with one ts (up to ``GROUP``) share a window, and each
block is counted for all of them while it is in L1 (the 1T of
``benchmarks/onethread_scalejoin.py`` does the same over its whole window). Indices in
the loop are unsigned: on a signed index Numba adds a select for negative indices and
LLVM then gathers instead of loading contiguous lanes. ``candidate`` must hold for every
pair ``match`` accepts or raises on (a superset); ScaleJoin's candidate is its predicate
with ``x - a`` wrapping (the exact predicate takes a select more); hedge's divides, so its
candidate is a division-free test of the same ratio with room for rounding.
``tests/operators/test_vectorized.py`` checks in the LLVM IR that both loops of each
entry point are vector loops.

``_band_join`` is that loop for any predicate; each join has an entry point that names
its predicate (``scalejoin_run``, ``hedge_run``). Numba inlines the loop and the
predicate into the entry point (``inline="always"``, in its IR), so each entry point is
compiled and optimised as one function, as fast as a loop with the predicate written in,
and takes no function argument, so Numba's on-disk cache can key it: a jitted function
passed as an argument gets a type that differs in every process, and the cache would
recompile (and add a file) each time. A predicate takes ``(left, l, right, r)``: the
tuples of the columns it reads of L and of R, and the index of each tuple in them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numba import literal_unroll, njit
from numpy.typing import NDArray

__all__ = [
    "DONE",
    "OUT_FULL",
    "PIECE",
    "STORE_FULL",
    "hedge_run",
    "order_matches",
    "scalejoin_run",
]

Columns = tuple[NDArray[Any], ...]
"""The columns a predicate reads of one side."""
Index = int | np.uint64
"""A tuple's index in its columns (unsigned in the comparison loops)."""
Match = Callable[[Columns, Index, Columns, Index], bool]
"""A predicate: whether L tuple ``l`` and R tuple ``r`` (indices in the columns) match."""
Fill = tuple[tuple[NDArray[Any], NDArray[Any]], ...]
"""Per column a side's predicate reads: (the stores' column, the input column)."""

LAST = 4
"""The column of ``bounds`` holding the ts of the last tuple the key saw (0-3: head/tail
of L and R)."""
NEVER = -(2**62)
"""``bounds[:, LAST]`` of a key that saw no tuple yet."""
DONE = 0
"""Kernel status: the whole run was processed."""
OUT_FULL = 1
"""Kernel status: stopped before a tuple whose matches might not fit in ``out``."""
STORE_FULL = 2
"""Kernel status: stopped before a tuple, a key's store of its side being full."""
PIECE = 4
"""Kernel status: stopped with every key at one run tuple, ``piece`` matches found
(``INDEX_FULL``, 3, is the indexed kernel's)."""
BLOCK = 256
"""Stored tuples whose candidates are counted at once before any match is written."""
GROUP = 32
"""The most run tuples of one side and one ts compared with a block while it is in L1."""


TEN = np.uint64(10)
TWENTY = np.uint64(20)


@njit(inline="always")
def _scalejoin_candidate(left: Columns, l: Index, right: Columns, r: Index) -> bool:
    """True for every pair ``_scalejoin_match`` accepts: ``x - a`` wrapping in uint64.

    ``x - a + 10 <= 20`` in uint64 (a wrapping, well-defined subtraction: no signed
    overflow for LLVM to assume away) is ``|x - a| <= 10`` exactly, but for pairs 2**64 -
    10 or more apart (one near each end of int64), which the scan then refuses. As cheap
    as the signed test and a vector loop.
    """
    near = np.uint64(left[0][l]) - np.uint64(right[0][r]) + TEN <= TWENTY
    return bool(near & (abs(left[1][l] - right[1][r]) <= 10))


@njit(inline="always")
def _scalejoin_match(left: Columns, l: Index, right: Columns, r: Index) -> bool:
    """``catalog._scalejoin_match`` on L (x, y) and R (a, b): both within 10, branch-free.

    ``|x - a|`` is the larger minus the smaller in uint64, exact for any two int64
    (``x - a`` in int64 wraps once they are 2**63 or more apart, and the wrapped
    difference could fall within 10, as Python's exact integers never do).
    """
    x, a = left[0][l], right[0][r]
    ux, ua = np.uint64(x), np.uint64(a)
    apart = (ux - ua) if x >= a else (ua - ux)
    return bool((apart <= TEN) & (abs(left[1][l] - right[1][r]) <= 10))


@njit(inline="always")
def _hedge_candidate(left: Columns, l: Index, right: Columns, r: Index) -> bool:
    """Branch-free and division-free: true for every pair ``_hedge_match`` accepts.

    The ratio ``nd_right / nd_left`` is ``cross / scale`` below, so
    within [-1.05, -0.95] it gives ``|cross + scale| <= 0.05 |scale|`` (0.06 leaves room
    for rounding); overflow and underflow make a candidate too, for the scan to decide.
    """
    d_left = left[1][l] - left[2][l]
    d_right = right[1][r] - right[2][r]
    cross = d_right * left[2][l]
    scale = right[2][r] * d_left
    near = abs(cross + scale) <= 0.06 * abs(scale)
    odd = (abs(cross) >= np.inf) | (abs(scale) >= np.inf) | (abs(scale) < 1e-300)
    return bool((left[0][l] != right[0][r]) & (near | odd))


@njit(inline="always")
def _hedge_match(left: Columns, l: Index, right: Columns, r: Index) -> bool:
    """``catalog._hedge_match`` on (symbol code, price, avg_price), float for float.

    The same operations in the same order as the Python predicate, so every ratio and
    comparison is bit for bit the reference's; a trade with an ``avg_price`` of 0 has no
    ND and matches nothing; equal symbols have equal codes (one dictionary per pipeline).
    """
    if left[0][l] == right[0][r] or left[2][l] == 0 or right[2][r] == 0:
        return False
    nd_left = (left[1][l] - left[2][l]) / left[2][l]
    if nd_left == 0:
        return False
    nd_right = (right[1][r] - right[2][r]) / right[2][r]
    return bool(-1.05 <= nd_right / nd_left <= -0.95)


@njit(nogil=True)  # not inlined: literal_unroll needs a function of its own
def _store_row(fill: Fill, at: int, row: int) -> None:
    """Copy input row ``row`` of each column into its store at index ``at``."""
    for pair in literal_unroll(fill):
        pair[0][at] = pair[1][row]


@njit(inline="always")
def _emit(out: NDArray[np.int64], n_out: int, i: int, key: int, partner: int, j: int) -> int:
    """Write match (tuple index, key, partner seq, j) at ``out[:, n_out]``; the next n."""
    out[0, n_out] = i
    out[1, n_out] = key
    out[2, n_out] = partner
    out[3, n_out] = j
    return n_out + 1


@njit(inline="always")
def _group(
    run_ts: NDArray[np.int64], run_source: NDArray[np.int64], i: int, ws: int, wa: int
) -> tuple[int, int]:
    """Run tuple i's group and window: ``(stop, earliest)``.

    The group is run tuples ``[i, stop)``: the next tuples of i's side with its ts (at
    most ``GROUP``), which share a window (unless the window set could restart between
    them: WA > WS + 1). ``earliest`` is where the join's window (WS + 1) of ts starts.
    """
    n = run_ts.shape[0]
    ts = run_ts[i]
    left = run_source[i] == 0
    earliest = ((ts - ws - 1) // wa + 1) * wa
    stop = i + 1
    if earliest <= ts:
        while (
            stop < n and stop - i < GROUP and run_ts[stop] == ts and (run_source[stop] == 0) == left
        ):
            stop += 1
    return stop, earliest


@njit(inline="always")
def _probe_left(
    candidate: Match,
    match: Match,
    left: Columns,
    rows: NDArray[np.int64],
    first: int,
    stop: int,
    stored_right: Columns,
    at: int,
    head: int,
    tail: int,
    other_seq: NDArray[np.int64],
    hits: NDArray[np.int64],
    out: NDArray[np.int64],
    n_out: int,
    key: int,
) -> int:
    """Run tuples ``[first, stop)`` of L, one ts, against R's stored ``[head, tail)``.

    Block by block, each probe counts the block's candidates while the block is in L1, a
    loop without a branch that Numba vectorizes (the index is unsigned, so no wraparound
    select turns the contiguous loads into gathers); then each probe scans again, in
    stored order and with the exact predicate, only its blocks holding a candidate,
    writing each match. ``rows`` holds the probes' rows in ``left`` (by ``q - first``).
    Returns the next ``n_out``.
    """
    for block in range(head, tail, BLOCK):
        last = np.uint64(at + min(block + BLOCK, tail))
        for q in range(first, stop):
            row = rows[q - first]
            count = 0
            for p in range(np.uint64(at + block), last):
                count += candidate(left, row, stored_right, p)
            hits[q - first, (block - head) // BLOCK] = count
    for q in range(first, stop):
        row = rows[q - first]
        j = 0
        for block in range(head, tail, BLOCK):
            if hits[q - first, (block - head) // BLOCK]:
                for p in range(np.uint64(at + block), np.uint64(at + min(block + BLOCK, tail))):
                    if match(left, row, stored_right, p):
                        n_out = _emit(out, n_out, q, key, other_seq[p - at], j)
                        j += 1
    return n_out


@njit(inline="always")
def _probe_right(
    candidate: Match,
    match: Match,
    right: Columns,
    rows: NDArray[np.int64],
    first: int,
    stop: int,
    stored_left: Columns,
    at: int,
    head: int,
    tail: int,
    other_seq: NDArray[np.int64],
    hits: NDArray[np.int64],
    out: NDArray[np.int64],
    n_out: int,
    key: int,
) -> int:
    """``_probe_left`` for run tuples of R against L's stored tuples."""
    for block in range(head, tail, BLOCK):
        last = np.uint64(at + min(block + BLOCK, tail))
        for q in range(first, stop):
            row = rows[q - first]
            count = 0
            for p in range(np.uint64(at + block), last):
                count += candidate(stored_left, p, right, row)
            hits[q - first, (block - head) // BLOCK] = count
    for q in range(first, stop):
        row = rows[q - first]
        j = 0
        for block in range(head, tail, BLOCK):
            if hits[q - first, (block - head) // BLOCK]:
                for p in range(np.uint64(at + block), np.uint64(at + min(block + BLOCK, tail))):
                    if match(stored_left, p, right, row):
                        n_out = _emit(out, n_out, q, key, other_seq[p - at], j)
                        j += 1
    return n_out


@njit(inline="always")
def _band_join(
    candidate: Match,
    match: Match,
    slot_keys: NDArray[np.int64],
    keys: int,
    ws: int,
    wa: int,
    progress: NDArray[np.int64],
    run_ts: NDArray[np.int64],
    run_source: NDArray[np.int64],
    run_seq: NDArray[np.int64],
    run_key: NDArray[np.int64],
    store_ts: NDArray[np.int64],
    store_seq: NDArray[np.int64],
    bounds: NDArray[np.int64],
    stored_left: Columns,
    stored_right: Columns,
    fill_left: Fill,
    fill_right: Fill,
    left: Columns,
    right: Columns,
    bases: NDArray[np.int64],
    out: NDArray[np.int64],
    stats: NDArray[np.int64],
    piece: int,
    chunk_pairs: int,
) -> int:
    """Process the run for the keys ``slot_keys``, key by key in chunks; return a status.

    Slot s holds key ``slot_keys[s]``: ``store_ts[s, side]`` / ``store_seq[s, side]``
    (side 0 = L, 1 = R) between ``bounds[s, 2 side]`` and ``bounds[s, 2 side + 1]``, the
    columns the predicate reads of those tuples at ``s * capacity + p`` of
    ``stored_left`` / ``stored_right`` (``capacity = store_ts.shape[2]``; ``fill_left``
    and ``fill_right`` pair each of them with its input column). A key whose window set
    the reference would remove before a tuple (the set slid past the last tuple that
    updated it: ``earliestWinL(ts) > bounds[s, LAST]``, for the join's window of
    ``ws + 1`` ms, see ``stretch.operators.joins``) starts over empty, as the reference's
    new set does. ``ws`` is the band: pairs at most ``ws`` apart.
    ``progress[s]`` is the next run tuple of slot s; ``run_key[q]`` the key that stores
    run tuple q (``store_keys``). Matches go to ``out[:, n]`` as
    (tuple index, key, partner seq, j-th match of the tuple and key); ``stats`` holds the
    matches written and the comparisons made. Returns ``DONE``, or stops before a tuple
    whose matches might not fit (``OUT_FULL``: the caller takes the matches, grows
    ``out`` if none were written, and calls again) or that finds its key's store full
    (``STORE_FULL``: the caller compacts or grows the stores and calls again). The input
    columns ``left`` and ``right`` hold the rows from sequence number ``bases[side]`` on.

    The run goes in chunks of tuples that can make at most ``chunk_pairs`` pairs with the
    windows held (at least one tuple), each chunk key by key: after a chunk every key
    stands at the same run tuple, so once ``piece`` matches are in ``out`` (at once if
    ``piece`` <= 0: the caller holds a piece from calls before) the kernel stops there
    (``PIECE``): with the caller's, they are all the matches of the tuples before it, which
    it can emit however many more the rest of the run makes. A call that stopped inside a
    chunk is resumed to that chunk's end before a new chunk starts.
    """
    capacity = store_ts.shape[2]
    n = run_ts.shape[0]
    slots = slot_keys.shape[0]
    hits = np.empty((GROUP, capacity // BLOCK + 1), np.int64)
    rows = np.empty(GROUP, np.int64)
    while True:
        start, furthest, window = n, 0, 0
        for s in range(slots):
            start = min(start, progress[s])
            furthest = max(furthest, progress[s])
            window += bounds[s, 1] - bounds[s, 0] + bounds[s, 3] - bounds[s, 2]
        if start >= n:
            break
        if start < furthest:
            # A call that stopped in a chunk left some keys ahead: finish that chunk first,
            # so that every key ends it at ``limit``, the furthest.
            limit = furthest
        else:
            limit = min(n, start + max(1, chunk_pairs // max(window, 1)))
            # Not in the middle of a group if it ends soon: its tuples share a block's reads.
            end = min(n, limit + GROUP)
            while (
                limit < end
                and run_ts[limit] == run_ts[limit - 1]
                and (run_source[limit] == run_source[limit - 1])
            ):
                limit += 1
        status = _band_join_chunk(
            candidate, match, slot_keys, ws, wa, progress, limit, run_ts, run_source,
            run_seq, run_key, store_ts, store_seq, bounds, stored_left, stored_right,
            fill_left, fill_right, left, right, bases, out, stats, hits, rows,
        )  # fmt: skip
        if status != DONE:
            return status
        if stats[0] >= piece and limit < n:
            return PIECE
    return DONE


@njit(inline="always")
def _band_join_chunk(
    candidate: Match,
    match: Match,
    slot_keys: NDArray[np.int64],
    ws: int,
    wa: int,
    progress: NDArray[np.int64],
    limit: int,
    run_ts: NDArray[np.int64],
    run_source: NDArray[np.int64],
    run_seq: NDArray[np.int64],
    run_key: NDArray[np.int64],
    store_ts: NDArray[np.int64],
    store_seq: NDArray[np.int64],
    bounds: NDArray[np.int64],
    stored_left: Columns,
    stored_right: Columns,
    fill_left: Fill,
    fill_right: Fill,
    left: Columns,
    right: Columns,
    bases: NDArray[np.int64],
    out: NDArray[np.int64],
    stats: NDArray[np.int64],
    hits: NDArray[np.int64],
    rows: NDArray[np.int64],
) -> int:
    """``_band_join`` for the run tuples before ``limit``, key by key; a status.

    Sets ``stats[0]`` to the matches in ``out`` and each key's ``progress`` (``limit``
    unless it stopped).
    """
    n_out = stats[0]
    cap_out = out.shape[1]
    capacity = store_ts.shape[2]
    for s in range(slot_keys.shape[0]):
        key = slot_keys[s]
        at = s * capacity
        i = progress[s]
        while i < limit:
            this = 0 if run_source[i] == 0 else 1
            other = 1 - this
            ts = run_ts[i]
            stop, earliest = _group(run_ts, run_source, i, ws, wa)
            stop = min(stop, limit)  # a chunk may split a group: its tuples share a window
            head, tail = bounds[s, 2 * other], bounds[s, 2 * other + 1]
            room = capacity - bounds[s, 2 * this + 1]
            if n_out + (stop - i) * (tail - head) > cap_out or room < stop - i:
                progress[s] = i
                stats[0] = n_out
                return OUT_FULL if room >= stop - i else STORE_FULL
            if earliest > bounds[s, LAST]:
                bounds[s, 0], bounds[s, 2] = bounds[s, 1], bounds[s, 3]
                head = tail
            bounds[s, LAST] = ts
            other_ts, other_seq = store_ts[s, other], store_seq[s, other]
            while head < tail and other_ts[head] + ws < ts:
                head += 1
            bounds[s, 2 * other] = head
            base = bases[this]
            for q in range(np.uint64(i), np.uint64(stop)):
                rows[q - i] = run_seq[q] - base
            if this == 0:  # one loop per side, each streaming through the other's store
                n_out = _probe_left(
                    candidate, match, left, rows, i, stop, stored_right, at, head, tail,
                    other_seq, hits, out, n_out, key,
                )  # fmt: skip
            else:
                n_out = _probe_right(
                    candidate, match, right, rows, i, stop, stored_left, at, head, tail,
                    other_seq, hits, out, n_out, key,
                )  # fmt: skip
            stats[1] += (stop - i) * (tail - head)
            for q in range(i, stop):  # the group's own stores: not compared with it
                if run_key[q] == key:
                    t = bounds[s, 2 * this + 1]
                    store_ts[s, this, t] = ts
                    store_seq[s, this, t] = run_seq[q]
                    if this == 0:
                        _store_row(fill_left, at + t, rows[q - i])
                    else:
                        _store_row(fill_right, at + t, rows[q - i])
                    bounds[s, 2 * this + 1] = t + 1
            i = stop
        progress[s] = i
    stats[0] = n_out
    return DONE


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
    run_key: NDArray[np.int64],
    store_ts: NDArray[np.int64],
    store_seq: NDArray[np.int64],
    bounds: NDArray[np.int64],
    stored_left: Columns,
    stored_right: Columns,
    fill_left: Fill,
    fill_right: Fill,
    left: Columns,
    right: Columns,
    bases: NDArray[np.int64],
    out: NDArray[np.int64],
    stats: NDArray[np.int64],
    piece: int,
    chunk_pairs: int,
) -> int:
    """``_band_join`` with ScaleJoin's predicate; L reads (x, y), R reads (a, b)."""
    return _band_join(
        _scalejoin_candidate,
        _scalejoin_match,
        slot_keys,
        keys,
        ws,
        wa,
        progress,
        run_ts,
        run_source,
        run_seq,
        run_key,
        store_ts,
        store_seq,
        bounds,
        stored_left,
        stored_right,
        fill_left,
        fill_right,
        left,
        right,
        bases,
        out,
        stats,
        piece,
        chunk_pairs,
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
    run_key: NDArray[np.int64],
    store_ts: NDArray[np.int64],
    store_seq: NDArray[np.int64],
    bounds: NDArray[np.int64],
    stored_left: Columns,
    stored_right: Columns,
    fill_left: Fill,
    fill_right: Fill,
    left: Columns,
    right: Columns,
    bases: NDArray[np.int64],
    out: NDArray[np.int64],
    stats: NDArray[np.int64],
    piece: int,
    chunk_pairs: int,
) -> int:
    """``_band_join`` with hedge's predicate; each side reads (symbol, price, avg_price)."""
    return _band_join(
        _hedge_candidate,
        _hedge_match,
        slot_keys,
        keys,
        ws,
        wa,
        progress,
        run_ts,
        run_source,
        run_seq,
        run_key,
        store_ts,
        store_seq,
        bounds,
        stored_left,
        stored_right,
        fill_left,
        fill_right,
        left,
        right,
        bases,
        out,
        stats,
        piece,
        chunk_pairs,
    )


SORT_AT = 32
"""A run of more matches than this is sorted with ``argsort`` (if out of order), not by
insertion."""


@njit(nogil=True, cache=True)
def order_matches(matches: NDArray[np.int64], n: int) -> NDArray[np.int64]:
    """The matches in the reference's order, each numbered within its tuple and key.

    ``matches`` holds a kernel's matches as columns (tuple index in ``[0, n)``, key,
    partner seq, the partner's stored position or rank), in any order of tuples. Returns
    them ordered by tuple index (a counting sort, stable), then by key and stored
    position, the fourth row replaced by the match's rank among its tuple's matches of
    that key. A tuple's matches are few, or come as a few runs in stored order per key
    (the nested loop writes them key by key in stored order; the band index cell by
    cell): a tuple with many is put in key order by a counting sort (while the keys are
    no more than its matches), then each key's matches by position, by insertion, or by
    ``argsort`` where they are many and out of order. O(matches + keys) for runs in order.
    """
    m = matches.shape[1]
    ordered = np.empty_like(matches)
    _counting_sort(matches, 0, 0, m, np.zeros(n + 1, np.int64), ordered)
    keys = 0
    for k in range(m):
        keys = max(keys, matches[1, k] + 1)
    count = np.zeros(keys + 1, np.int64)
    spare = np.empty_like(matches)
    start = 0
    while start < m:
        stop = start + 1
        while stop < m and ordered[0, stop] == ordered[0, start]:
            stop += 1
        if stop - start > SORT_AT and keys <= stop - start:
            _counting_sort(ordered, 1, start, stop, count, spare)
            ordered[:, start:stop] = spare[:, start:stop]
            lo = start
            while lo < stop:
                hi = lo + 1
                while hi < stop and ordered[1, hi] == ordered[1, lo]:
                    hi += 1
                _by_position(ordered, lo, hi)
                lo = hi
        else:
            _by_position(ordered, start, stop)
        for a in range(start, stop):
            first = a == start or ordered[1, a] != ordered[1, a - 1]
            ordered[3, a] = 0 if first else ordered[3, a - 1] + 1
        start = stop
    return ordered


@njit(nogil=True, cache=True, inline="always")
def _counting_sort(
    source: NDArray[np.int64],
    row: int,
    lo: int,
    hi: int,
    count: NDArray[np.int64],
    target: NDArray[np.int64],
) -> None:
    """Matches ``lo..hi-1`` of ``source`` into ``target``'s, stably by ``source[row]``.

    ``count`` is at least two longer than the largest value of ``source[row]`` there
    (its contents are overwritten).
    """
    count[:] = 0
    for a in range(lo, hi):
        count[source[row, a] + 1] += 1
    for q in range(count.shape[0] - 1):
        count[q + 1] += count[q]
    for a in range(lo, hi):
        t = lo + count[source[row, a]]
        count[source[row, a]] += 1
        for r in range(4):
            target[r, t] = source[r, a]


@njit(nogil=True, cache=True, inline="always")
def _by_position(ordered: NDArray[np.int64], lo: int, hi: int) -> None:
    """Matches ``lo..hi-1`` (rows 1-3) ordered by key, then stored position."""
    if hi - lo > SORT_AT:
        for a in range(lo + 1, hi):
            if ordered[1, a - 1] > ordered[1, a] or (
                ordered[1, a - 1] == ordered[1, a] and ordered[3, a - 1] > ordered[3, a]
            ):
                most = ordered[3, lo:hi].max() + 1
                order = np.argsort(ordered[1, lo:hi] * most + ordered[3, lo:hi]) + lo
                ordered[1:, lo:hi] = ordered[1:, order]
                return
        return
    for a in range(lo + 1, hi):
        key, partner, position = ordered[1, a], ordered[2, a], ordered[3, a]
        b = a
        while b > lo and (
            ordered[1, b - 1] > key or (ordered[1, b - 1] == key and ordered[3, b - 1] > position)
        ):
            ordered[1, b], ordered[2, b], ordered[3, b] = (
                ordered[1, b - 1], ordered[2, b - 1], ordered[3, b - 1],
            )  # fmt: skip
            b -= 1
        ordered[1, b], ordered[2, b], ordered[3, b] = key, partner, position
