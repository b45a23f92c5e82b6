"""The band-join kernel for a user's predicate: one entry point per predicate, in memory.

A user's predicate is an ``@numba.njit`` function of the values of one L tuple and one R
tuple, ``predicate(*left_values, *right_values) -> bool``. ``predicate_run`` wraps it in
the ``(left, l, right, r)`` form ``_band_join`` inlines (an adapter generated for the
number of columns read of each side: Numba cannot spread a tuple of arrays of different
types into a call) and compiles an entry point that closes over it, so the predicate is
inlined into the loop as the catalog's are. Numba's disk cache cannot key a function
that closes over another jitted function, so the entry points are kept in memory, one per
(predicate, columns read): built once per process, compiled on the first run that uses
them, and reused by every operator and pipeline after that.

The predicate is both the block's candidate test and the exact test of ``_band_join``:
its comparison loop vectorizes when the predicate is branch-free once compiled, that is

* comparisons combined with ``&`` and ``|``: ``and``/``or``/``if`` branch, which LLVM
  turns back into selects only when both sides are cheap and cannot raise (write a
  negation as the opposite comparison);
* arithmetic (``+ - *``, ``abs``, ``min``/``max``) on the numeric columns; no ``/``,
  ``//`` or ``%`` by a value of the side being scanned (Numba checks it for zero and
  raises: a branch; by the probe's own value the check leaves the loop);
* no call that may raise, no allocation, strings only compared for (in)equality
  (they arrive as dictionary codes).

For example ``(abs(x - a) <= 3) & (abs(y - b) <= 4.5)`` vectorizes (so does the same
with ``and``, if-converted); ``abs(y / b - b / y) <= 0.02`` does not. A predicate that
does not vectorize is still correct: its count loop runs scalar, and a block holding a
match is compared twice. ``tests/operators/test_vectorized.py`` shows how to check a
predicate in the kernel's LLVM IR.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from numba import njit
from numba.core.dispatcher import Dispatcher

from stretch.operators.kernels._band_index import _indexed_join
from stretch.operators.kernels._band_join import _band_join

__all__ = ["predicate_indexed_run", "predicate_run"]

_RUNS: dict[tuple[Dispatcher, int, int], Callable[..., int]] = {}
_INDEXED: dict[tuple[Dispatcher, int, int], Callable[..., int]] = {}
_MATCHES: dict[tuple[Dispatcher, int, int], Callable[..., bool]] = {}
_LOCK = threading.Lock()


def _adapter(predicate: Dispatcher, n_left: int, n_right: int) -> Callable[..., bool]:
    """``match(left, l, right, r) = predicate(left[0][l], ..., right[0][r], ...)``."""
    values = [f"left[{c}][l]" for c in range(n_left)]
    values += [f"right[{c}][r]" for c in range(n_right)]
    source = f"def match(left, l, right, r):\n    return predicate({', '.join(values)})\n"
    namespace: dict[str, Any] = {"predicate": predicate}
    where = f"<band join adapter of {predicate.py_func.__qualname__}>"
    exec(compile(source, where, "exec"), namespace)
    match: Callable[..., bool] = njit(inline="always")(namespace["match"])
    return match


def _entry_point(match: Callable[..., bool]) -> Callable[..., int]:
    """An entry point with the signature of ``scalejoin_run`` running ``match``."""

    def run(
        slot_keys: Any,
        keys: int,
        ws: int,
        wa: int,
        progress: Any,
        run_ts: Any,
        run_source: Any,
        run_seq: Any,
        run_key: Any,
        store_ts: Any,
        store_seq: Any,
        bounds: Any,
        stored_left: Any,
        stored_right: Any,
        fill_left: Any,
        fill_right: Any,
        left: Any,
        right: Any,
        bases: Any,
        out: Any,
        stats: Any,
        piece: int,
        chunk_pairs: int,
    ) -> int:
        return _band_join(
            match,
            match,
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

    compiled: Callable[..., int] = njit(nogil=True)(run)
    return compiled


def _indexed_entry_point(match: Callable[..., bool]) -> Callable[..., int]:
    """An entry point with the signature of ``scalejoin_indexed_run`` running ``match``."""

    def run(
        slot_keys: Any,
        keys: int,
        ws: int,
        wa: int,
        progress: Any,
        run_ts: Any,
        run_source: Any,
        run_seq: Any,
        run_key: Any,
        run_cells: Any,
        store_ts: Any,
        store_seq: Any,
        store_cell: Any,
        bounds: Any,
        stored_left: Any,
        stored_right: Any,
        fill_left: Any,
        fill_right: Any,
        left: Any,
        right: Any,
        bases: Any,
        cells: Any,
        cell_head: Any,
        cell_count: Any,
        shift: int,
        small_window: int,
        block: int,
        grid_left: Any,
        grid_right: Any,
        fill_grid_left: Any,
        fill_grid_right: Any,
        out: Any,
        stats: Any,
    ) -> int:
        return _indexed_join(
            match, match, slot_keys, keys, ws, wa, progress, run_ts, run_source, run_seq,
            run_key, run_cells, store_ts, store_seq, store_cell, bounds, stored_left, stored_right,
            fill_left, fill_right, left, right, bases,
            (cells, cell_head, cell_count, shift, small_window, block),
            (grid_left, grid_right), (fill_grid_left, fill_grid_right), out, stats,
        )  # fmt: skip

    compiled: Callable[..., int] = njit(nogil=True)(run)
    return compiled


def _match(predicate: Dispatcher, n_left: int, n_right: int) -> Callable[..., bool]:
    """The adapter of ``predicate``, one per (predicate, columns read); call under _LOCK."""
    key = (predicate, n_left, n_right)
    match = _MATCHES.get(key)
    if match is None:
        match = _MATCHES[key] = _adapter(predicate, n_left, n_right)
    return match


def predicate_run(predicate: Dispatcher, n_left: int, n_right: int) -> Callable[..., int]:
    """The band-join entry point for ``predicate`` reading ``n_left`` + ``n_right`` values.

    The same object for the same arguments, for the life of the process, so it is
    compiled once (on its first call, for the column types it sees).
    """
    key = (predicate, n_left, n_right)
    with _LOCK:
        run = _RUNS.get(key)
        if run is None:
            run = _RUNS[key] = _entry_point(_match(predicate, n_left, n_right))
    return run


def predicate_indexed_run(predicate: Dispatcher, n_left: int, n_right: int) -> Callable[..., int]:
    """``predicate_run`` through a band's index (``_band_index``); one per process too."""
    key = (predicate, n_left, n_right)
    with _LOCK:
        run = _INDEXED.get(key)
        if run is None:
            run = _INDEXED[key] = _indexed_entry_point(_match(predicate, n_left, n_right))
    return run
