"""Numba kernels of the Elastic ScaleGate over preallocated int64 arrays.

Concurrency: one spinlock per gate, an int64 cell taken with an atomic compare-and-swap
(LLVM ``cmpxchg``, acq_rel) and released with an atomic release store, emitted as Numba
intrinsics (``scalegate._atomics``). Every public kernel takes the lock, does its work and
releases it before returning, so the lock is never held while Python code runs, and the
kernels run with ``nogil=True``. A kernel that cannot take the lock within ``LOCK_SPINS``
atomic loads returns ``BUSY``; the Python wrapper backs off (yield, then sleeps growing to
1 ms), so waiting threads do not burn a core while the holder is descheduled.

Why a lock and not the lock-free ScaleGate of the paper: every operation is one short
critical section over a few cache lines (a finger search that usually stops after a step
or two, a copy of consecutive ready-log rows for readers), batches amortise the 5.6 ns CAS
over many nodes, and the lock makes bounded capacity with reclamation, elastic
reader/source sets and the ``_check`` snapshot linearizable without hazard pointers or
epochs, which Numba cannot express safely. Correctness first;
``benchmarks/bench_scalegate.py`` measures the cost.

Keys are (ts, source, seq), the total order of docs/design.md decision 2. A node is ready
(Definition 3 with ties) iff ``(ts, source) <= B``, B the smallest ``(frontier, id)`` over
live sources (active, not ended): every later node of such a source has a larger key.
Inserts always land after the ready prefix, so readers never miss a node; the ready prefix
is tracked by a cursor and copied, node by node as it grows, into the ready log that
readers read (docs/scalegate.md, "Why readers read a log"). Only the kernels that can move
B (adds and source changes) advance the cursor, before they release the lock, so readers
copy log rows and never touch the list's rows. Reclamation frees the prefix every reader
passed. With
``NUMBA_DISABLE_JIT=1`` the kernels run as plain Python (the coverage run).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np
from numba import njit
from numpy.typing import NDArray

from scalegate._atomics import atomic_cas, atomic_load, atomic_store
from scalegate._nodes import (
    BUSY,
    DATA,
    DUMMY,
    E_BACKWARDS,
    E_CLOSED,
    E_INACTIVE,
    E_RESERVED,
    E_UNSORTED,
    FLUSH,
    FULL,
    HEAD,
    L_HEIGHT,
    L_ROW,
    M_FREE_TOP,
    M_LOCK,
    M_LOG_MASK,
    M_RDR_HI,
    M_READY_END,
    M_READY_N,
    M_READY_TAIL,
    M_RESERVE,
    M_RNG,
    M_SCRATCH,
    M_SINCE,
    M_SRC_HI,
    M_UNUSED,
    N_HEIGHT,
    N_KIND,
    N_NEXT,
    N_PAYLOAD,
    N_SEQ,
    N_SRC,
    N_TS,
    NIL,
    OK,
    R_ACTIVE,
    R_POS,
    REFUSED,
    S_ACTIVE,
    S_DONE,
    S_FINGER,
    S_FRONTIER,
    S_SEQ,
    TS_MAX,
    WATERMARK,
)

I64 = NDArray[np.int64]
_F = TypeVar("_F", bound=Callable[..., Any])

LOCK_SPINS = 2048  # atomic loads before a kernel gives up with BUSY


def _jit(fn: _F) -> _F:
    """Compile ``fn`` with the gate's one set of JIT options, keeping its signature.

    ``nogil`` lets threads run kernels in parallel (docs/design.md decision 5); ``cache`` keeps
    compiled kernels on disk across processes.
    """
    return cast(_F, njit(fn, nogil=True, cache=True))


@_jit
def try_lock(meta: I64) -> bool:
    """Take the gate's spinlock, spinning at most ``LOCK_SPINS`` times."""
    for _ in range(LOCK_SPINS):
        if atomic_load(meta, M_LOCK) == 0 and atomic_cas(meta, M_LOCK, 0, 1) == 0:
            return True
    return False


@_jit
def unlock(meta: I64) -> None:
    """Release the gate's spinlock."""
    atomic_store(meta, M_LOCK, 0)


@_jit
def _key_less(nodes: I64, a: int, ts: int, src: int, seq: int) -> bool:
    """Whether node ``a`` precedes the key (ts, src, seq) in the total order."""
    a_ts = nodes[a, N_TS]
    if a_ts != ts:
        return bool(a_ts < ts)
    a_src = nodes[a, N_SRC]
    if a_src != src:
        return bool(a_src < src)
    return bool(nodes[a, N_SEQ] < seq)


@_jit
def _node_less(nodes: I64, a: int, b: int) -> bool:
    """Whether node ``a`` precedes node ``b`` in the total order."""
    return _key_less(nodes, a, nodes[b, N_TS], nodes[b, N_SRC], nodes[b, N_SEQ])


@_jit
def ready_bound(sources: I64, meta: I64, skip: int) -> tuple[int, int]:
    """Return B = min (frontier, id) over live sources (active, not ended) except ``skip``.

    ``(TS_MAX, max_sources)`` when no source holds back readiness.
    """
    b_ts = TS_MAX
    b_src = sources.shape[0]
    for s in range(meta[M_SRC_HI]):
        live = s != skip and sources[s, S_ACTIVE] == 1 and sources[s, S_DONE] == 0
        if live and _pair_less(sources[s, S_FRONTIER], s, b_ts, b_src):
            b_ts = sources[s, S_FRONTIER]
            b_src = s
    return b_ts, b_src


@_jit
def _pair_less(a_ts: int, a_src: int, b_ts: int, b_src: int) -> bool:
    """Whether (a_ts, a_src) < (b_ts, b_src) lexicographically."""
    return bool(a_ts < b_ts or (a_ts == b_ts and a_src < b_src))


@_jit
def _advance_ready(nodes: I64, sources: I64, meta: I64, ready: I64) -> None:
    """Extend the ready prefix up to B, logging each node it takes in; O(S + new).

    The log (``ready``, a ring of ``(ts, source, seq, kind, payload)`` rows) holds the
    ready nodes in order, so readers copy them from consecutive memory instead of walking
    the list's rows, which the adding thread wrote on another core. Run by every kernel
    that moves B (adds, source changes) before it releases the lock, so the log holds
    every ready node whenever the lock is free.
    """
    b_ts, b_src = ready_bound(sources, meta, -1)
    tail = meta[M_READY_TAIL]
    count = meta[M_READY_N]
    end = meta[M_READY_END]
    x = nodes[tail, N_NEXT]
    while x != NIL and not _pair_less(b_ts, b_src, nodes[x, N_TS], nodes[x, N_SRC]):
        if count > meta[M_LOG_MASK]:  # every row of the ring holds a ready node
            _grow_log(ready, meta, end, count)
        tail = x
        count += 1
        slot = end & meta[M_LOG_MASK]
        for c in range(N_PAYLOAD + 1):
            ready[slot, c] = nodes[x, c]
        ready[slot, L_ROW] = x
        ready[slot, L_HEIGHT] = nodes[x, N_HEIGHT]
        end += 1
        x = nodes[x, N_NEXT]
    meta[M_READY_TAIL] = tail
    meta[M_READY_N] = count
    meta[M_READY_END] = end


@_jit
def _grow_log(ready: I64, meta: I64, end: int, held: int) -> None:
    """Double the ready log's ring; entries ``end - held .. end - 1`` keep their index.

    Entry i moves from row ``i & (size - 1)`` to ``i & (2 size - 1)``: the rows of the new
    upper half, unused so far, so no entry is overwritten. O(held).
    """
    size = meta[M_LOG_MASK] + 1
    for i in range(end - held, end):
        if i & size:
            for c in range(ready.shape[1]):
                ready[i & (2 * size - 1), c] = ready[i & (size - 1), c]
    meta[M_LOG_MASK] = 2 * size - 1


@_jit
def _random_height(meta: I64, levels: int) -> int:
    """Tower height with P(h > k) = 4**-k, from a 31-bit LCG kept in ``meta``."""
    height = 1
    x = meta[M_RNG]
    while height < levels:
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        if (x >> 16) & 3 != 0:
            break
        height += 1
    meta[M_RNG] = x
    return height


@_jit
def _reclaim(nodes: I64, sources: I64, readers: I64, free: I64, meta: I64, ready: I64) -> None:
    """Free the ready nodes every active reader passed (all of them when there is none).

    Readers' positions count the ready nodes they passed, so the freed prefix is the
    first ``min(positions) - first`` nodes, ``first`` being the ready count of the oldest
    node held. Their rows and heights come from the ready log (consecutive memory), not
    from walking the list: HEAD's pointer at each level becomes the successor of the last
    freed node at least that tall, so only those few rows are read. Source fingers into
    the freed prefix move to HEAD, so no handle refers to a free row. O(freed + R + S L).
    """
    meta[M_SINCE] = 0
    end = meta[M_READY_END]
    stop = end
    for r in range(meta[M_RDR_HI]):
        if readers[r, R_ACTIVE] == 1 and readers[r, R_POS] < stop:
            stop = readers[r, R_POS]
    first = end - meta[M_READY_N]
    freed = stop - first
    if freed <= 0:
        return
    mask = meta[M_LOG_MASK]
    top = meta[M_FREE_TOP]
    linked = 0  # levels whose HEAD pointer is set: newest freed first, so each is the last
    for i in range(stop - 1, first - 1, -1):
        x = ready[i & mask, L_ROW]
        while linked < ready[i & mask, L_HEIGHT]:
            nodes[HEAD, N_NEXT + linked] = nodes[x, N_NEXT + linked]
            linked += 1
        free[top + i - first] = x
    meta[M_FREE_TOP] = top + freed
    meta[M_READY_N] -= freed
    if meta[M_READY_N] == 0:
        meta[M_READY_TAIL] = HEAD
    x = ready[(stop - 1) & mask, L_ROW]  # the last node freed
    for s in range(meta[M_SRC_HI]):
        for lvl in range(nodes.shape[1] - N_NEXT):
            f = sources[s, S_FINGER + lvl]
            if f != HEAD and not _node_less(nodes, x, f):
                sources[s, S_FINGER + lvl] = HEAD


@_jit
def _make_room(
    nodes: I64, sources: I64, readers: I64, free: I64, meta: I64, ready: I64, need: int
) -> int:
    """Return the number of free rows, reclaiming first if fewer than ``need`` are reused.

    Rows never used are taken only after a reclamation, so the rows touched follow the
    nodes held at once, not the capacity: a reclamation runs when the reclaimed rows fall
    short and either the unused ones do too or an eighth of the rows in use were taken
    since the last one (so passes stay O(1) amortised per node, and the rows in use grow
    at most by an eighth, plus one batch, beyond the most nodes held).
    """
    used = free.shape[0] - meta[M_UNUSED]
    if meta[M_FREE_TOP] < need and (meta[M_UNUSED] < need or 8 * meta[M_SINCE] >= used):
        _reclaim(nodes, sources, readers, free, meta, ready)
    return int(meta[M_FREE_TOP] + meta[M_UNUSED])


@_jit
def _take_row(free: I64, meta: I64) -> int:
    """A free row: the last reclaimed one, else the first never used. The caller has room."""
    meta[M_SINCE] += 1
    top = meta[M_FREE_TOP]
    if top > 0:
        meta[M_FREE_TOP] = top - 1
        return int(free[top - 1])
    unused = meta[M_UNUSED]
    meta[M_UNUSED] = unused - 1
    return int(free.shape[0] - unused + 1)


@_jit
def _insert(
    nodes: I64, sources: I64, free: I64, meta: I64, s: int, ts: int, kind: int, payload: int
) -> None:
    """Link a new node of source ``s`` after its previous one (a finger search).

    The caller holds the lock, validated ``ts`` and admitted the node. Expected O(log d)
    for d nodes between the source's previous node and the new one.
    """
    levels = nodes.shape[1] - N_NEXT
    new = _take_row(free, meta)
    seq = sources[s, S_SEQ]
    sources[s, S_SEQ] = seq + 1
    height = _random_height(meta, levels)
    nodes[new, N_TS] = ts
    nodes[new, N_SRC] = s
    nodes[new, N_SEQ] = seq
    nodes[new, N_KIND] = kind
    nodes[new, N_PAYLOAD] = payload
    nodes[new, N_HEIGHT] = height
    # Climb while the finger's successor on the next level still precedes the new key.
    lvl = 0
    while lvl + 1 < levels:
        nxt = nodes[sources[s, S_FINGER + lvl + 1], N_NEXT + lvl + 1]
        if nxt == NIL or not _key_less(nodes, nxt, ts, s, seq):
            break
        lvl += 1
    lvl = max(lvl, height - 1)
    x = sources[s, S_FINGER + lvl]
    while lvl >= 0:
        finger = sources[s, S_FINGER + lvl]  # may be stale, never freed: a valid start
        if _node_less(nodes, x, finger):
            x = finger
        nxt = nodes[x, N_NEXT + lvl]
        while nxt != NIL and _key_less(nodes, nxt, ts, s, seq):
            x = nxt
            nxt = nodes[x, N_NEXT + lvl]
        if lvl < height:
            nodes[new, N_NEXT + lvl] = nxt
            nodes[x, N_NEXT + lvl] = new
            sources[s, S_FINGER + lvl] = new
        else:
            sources[s, S_FINGER + lvl] = x
        lvl -= 1
    sources[s, S_FRONTIER] = ts
    if kind == WATERMARK and ts == TS_MAX:
        sources[s, S_DONE] = 1


@_jit
def _admit(
    nodes: I64,
    sources: I64,
    readers: I64,
    free: I64,
    meta: I64,
    ready: I64,
    s: int,
    ts: I64,
    partial: bool,
) -> int:
    """Return how many nodes of ``ts`` source ``s`` may add now: all, a prefix, or FULL.

    A prefix only with ``partial``. Flow control that cannot deadlock: a source that does
    not hold back readiness adds a node only while the unready nodes stay within capacity -
    reserve; the bound source (the one B comes from) needs just a free row. The reserve (at
    least max_sources rows) covers the one unready node, at most, that each other source
    added while it was the bound, so once readers drain the ready prefix the bound source
    always finds a row (see docs/scalegate.md).
    """
    n = ts.shape[0]
    room = _make_room(nodes, sources, readers, free, meta, ready, n)
    unready = free.shape[0] - room - meta[M_READY_N]
    o_ts, o_src = ready_bound(sources, meta, s)
    f = sources[s, S_FRONTIER]
    k = 0
    while k < min(n, room):
        if not _pair_less(f, s, o_ts, o_src):  # not the bound: its node is not ready
            if unready >= free.shape[0] - meta[M_RESERVE]:
                break
            unready += 1
        elif not _pair_less(ts[k], s, o_ts, o_src):  # the bound overtakes another source
            unready += 1
        f = ts[k]
        k += 1
    return k if k == n or (partial and k > 0) else FULL


@_jit
def _add(
    nodes: I64,
    sources: I64,
    readers: I64,
    free: I64,
    meta: I64,
    ready: I64,
    s: int,
    ts: I64,
    payload: I64,
    kind: int,
    partial: bool,
) -> int:
    """Validate, admit and insert nodes of one kind; the caller holds the lock."""
    if sources[s, S_ACTIVE] == 0:
        return E_INACTIVE
    if sources[s, S_DONE] == 1:
        return E_CLOSED
    if ts[0] < sources[s, S_FRONTIER]:
        return E_BACKWARDS
    if ts[ts.shape[0] - 1] == TS_MAX and kind != WATERMARK:
        return E_RESERVED
    n = _admit(nodes, sources, readers, free, meta, ready, s, ts, partial)
    for i in range(n):
        _insert(nodes, sources, free, meta, s, ts[i], kind, payload[i])
    if n > 0:
        _advance_ready(nodes, sources, meta, ready)
    return n


@_jit
def _sorted(ts: I64) -> bool:
    """Whether ``ts`` never decreases. O(n) in a loop the compiler vectorizes.

    It counts descents over two slices instead of returning at the first: an early exit
    would not vectorize, and a backlog offered again while the gate is full pays this
    check on every offer.
    """
    later, earlier = ts[1:], ts[:-1]
    descents = 0
    for i in range(later.shape[0]):
        descents += later[i] < earlier[i]
    return descents == 0


@_jit
def add_batch(
    nodes: I64,
    sources: I64,
    readers: I64,
    free: I64,
    meta: I64,
    ready: I64,
    s: int,
    ts: I64,
    payload: I64,
    partial: bool,
) -> int:
    """Add DATA nodes: all, or with ``partial`` the prefix flow control admits (>= 1).

    Returns the number added or a negative status (nothing added). O(n log d).
    """
    if ts.shape[0] == 0:
        return 0
    if not _sorted(ts):
        return E_UNSORTED
    if not try_lock(meta):
        return BUSY
    status = _add(nodes, sources, readers, free, meta, ready, s, ts, payload, DATA, partial)
    unlock(meta)
    return status


@_jit
def add_node(
    nodes: I64,
    sources: I64,
    readers: I64,
    free: I64,
    meta: I64,
    ready: I64,
    s: int,
    ts: int,
    payload: int,
    kind: int,
    at_frontier: bool,
) -> int:
    """Add one node; ``at_frontier`` puts it at the source's last ts. 1 or a status."""
    if not try_lock(meta):
        return BUSY
    # Scratch cells of meta, owned by the lock holder, stand in for 1-element arrays.
    meta[M_SCRATCH] = sources[s, S_FRONTIER] if at_frontier else ts
    meta[M_SCRATCH + 1] = payload
    one = meta[M_SCRATCH : M_SCRATCH + 1]
    status = _add(
        nodes, sources, readers, free, meta, ready, s, one, meta[M_SCRATCH + 1 :], kind, False
    )
    unlock(meta)
    return status


@_jit
def get_batch(
    nodes: I64,
    sources: I64,
    readers: I64,
    free: I64,
    meta: I64,
    ready: I64,
    r: int,
    max_n: int,
) -> tuple[int, I64, I64, I64, NDArray[np.int8], I64]:
    """Pass reader ``r`` over up to ``max_n`` ready DATA/CONTROL/WATERMARK nodes.

    Returns (count or status, ts, source, seq, kind, payload). O(k), k nodes passed:
    one pass over the ready log counts them, so each column is allocated at its exact
    length, and one copies them.
    """
    n = 0
    status = BUSY
    if try_lock(meta):
        status = E_INACTIVE
        if readers[r, R_ACTIVE] == 1:
            status = OK
            mask = meta[M_LOG_MASK]
            start = stop = readers[r, R_POS]
            end = meta[M_READY_END]
            while n < max_n and stop != end:
                n += ready[stop & mask, N_KIND] not in (DUMMY, FLUSH)
                stop += 1
    cols = np.empty((4, n), dtype=np.int64)
    kinds = np.empty(n, dtype=np.int8)
    if status == OK:
        i = 0
        for pos in range(start, stop):
            row = ready[pos & mask]
            if row[N_KIND] not in (DUMMY, FLUSH):
                cols[0, i] = row[N_TS]
                cols[1, i] = row[N_SRC]
                cols[2, i] = row[N_SEQ]
                cols[3, i] = row[N_PAYLOAD]
                kinds[i] = row[N_KIND]
                i += 1
        readers[r, R_POS] = stop
        status = n
    if status != BUSY:
        unlock(meta)
    return status, cols[0], cols[1], cols[2], kinds, cols[3]


@_jit
def get_one(
    nodes: I64, sources: I64, readers: I64, meta: I64, ready: I64, r: int
) -> tuple[int, int, int, int, int, int]:
    """Return reader ``r``'s next ready node: (status, ts, source, seq, kind, payload).

    Status 1 when a node is returned, 0 when none is ready. O(k).
    """
    if not try_lock(meta):
        return BUSY, 0, 0, 0, 0, 0
    if readers[r, R_ACTIVE] == 0:
        unlock(meta)
        return E_INACTIVE, 0, 0, 0, 0, 0
    mask = meta[M_LOG_MASK]
    pos = readers[r, R_POS]
    end = meta[M_READY_END]
    while pos != end and ready[pos & mask, N_KIND] in (DUMMY, FLUSH):
        pos += 1
    found = pos != end
    readers[r, R_POS] = pos + 1 if found else pos
    unlock(meta)
    if not found:
        return OK, 0, 0, 0, 0, 0
    row = ready[pos & mask]
    return 1, row[N_TS], row[N_SRC], row[N_SEQ], row[N_KIND], row[N_PAYLOAD]


@_jit
def change_readers(readers: I64, meta: I64, ids: I64, by: int, add: bool) -> int:
    """Add readers at ``by``'s position, or remove readers; all or none (REFUSED)."""
    if not try_lock(meta):
        return BUSY
    status = OK if readers[by, R_ACTIVE] == 1 else REFUSED
    for i in ids:
        if (readers[i, R_ACTIVE] == 1) == add:
            status = REFUSED
    if status == OK:
        for i in ids:
            readers[i, R_ACTIVE] = 1 if add else 0
            if add:
                readers[i, R_POS] = readers[by, R_POS]
                meta[M_RDR_HI] = max(meta[M_RDR_HI], i + 1)
    unlock(meta)
    return status


@_jit
def _admit_marker(
    nodes: I64, sources: I64, readers: I64, free: I64, meta: I64, ready: I64, i: int, leaving: bool
) -> bool:
    """Whether flow control admits a DUMMY/FLUSH node at source ``i``'s frontier."""
    room = _make_room(nodes, sources, readers, free, meta, ready, 1)
    b_ts, b_src = ready_bound(sources, meta, i if leaving else -1)
    if room == 0:
        return False
    if not _pair_less(b_ts, b_src, sources[i, S_FRONTIER], i):  # ready once inserted
        return True
    return bool(free.shape[0] - room - meta[M_READY_N] < free.shape[0] - meta[M_RESERVE])


@_jit
def change_sources(
    nodes: I64,
    sources: I64,
    readers: I64,
    free: I64,
    meta: I64,
    ready: I64,
    ids: I64,
    by: int,
    add: bool,
) -> int:
    """Add sources (Lemma 3) or remove them, all or none: OK, REFUSED, E_CLOSED or BUSY.

    A new source copies ``by``'s handle and starts at its frontier (1 ms later when its id
    is lower, never below its own earlier life), so the ready prefix never shrinks and each
    id's stream stays sorted. A DUMMY (new source) or FLUSH (removed source) node marks the
    change when flow control admits it: readers never see either, so a marker is skipped
    (its seq still used) rather than ever block a reconfiguration. O(|ids| (S L + log d)).
    """
    if not try_lock(meta):
        return BUSY
    status = OK if sources[by, S_ACTIVE] == 1 else REFUSED
    # A source at TS_MAX (ended, or an id added again after it ended) leaves no later ts
    # for a lower id to start at: its nodes would precede ``by``'s, ready ones included.
    if status == OK and add and (sources[by, S_DONE] == 1 or sources[by, S_FRONTIER] == TS_MAX):
        status = E_CLOSED
    for i in ids:
        if (sources[i, S_ACTIVE] == 1) == add:
            status = REFUSED
    for i in ids:
        if status != OK:
            break
        if add:
            start = sources[by, S_FRONTIER]
            if i < by and start < TS_MAX:
                start += 1
            sources[i, S_FRONTIER] = max(start, sources[i, S_FRONTIER])
            sources[i, S_ACTIVE] = 1
            sources[i, S_DONE] = 0
            sources[i, S_FINGER:] = sources[by, S_FINGER:]
            meta[M_SRC_HI] = max(meta[M_SRC_HI], i + 1)
        if sources[i, S_DONE] == 0:
            if _admit_marker(nodes, sources, readers, free, meta, ready, i, not add):
                kind = DUMMY if add else FLUSH
                _insert(nodes, sources, free, meta, i, sources[i, S_FRONTIER], kind, 0)
            else:  # a skipped marker keeps its seq: seq values never depend on timing
                sources[i, S_SEQ] += 1
        sources[i, S_ACTIVE] = 1 if add else 0
        _advance_ready(nodes, sources, meta, ready)
    unlock(meta)
    return status


@_jit
def occupancy(nodes: I64, sources: I64, readers: I64, free: I64, meta: I64, ready: I64) -> int:
    """Reclaim, then count the nodes held; or BUSY."""
    if not try_lock(meta):
        return BUSY
    _reclaim(nodes, sources, readers, free, meta, ready)
    held = free.shape[0] - meta[M_FREE_TOP] - meta[M_UNUSED]
    unlock(meta)
    return int(held)


@_jit
def admits(
    nodes: I64, sources: I64, readers: I64, free: I64, meta: I64, ready: I64, s: int, ts: I64
) -> int:
    """Return how many of ``ts`` source ``s`` may add now without waiting (n or FULL); BUSY."""
    if not try_lock(meta):
        return BUSY
    admitted = _admit(nodes, sources, readers, free, meta, ready, s, ts, False)
    unlock(meta)
    return admitted


@_jit
def watermark(sources: I64, meta: I64) -> tuple[int, int]:
    """Return (status, min frontier over live sources); TS_MAX when there is none."""
    if not try_lock(meta):
        return BUSY, 0
    b_ts = ready_bound(sources, meta, -1)[0]
    unlock(meta)
    return OK, b_ts
