"""The order of a source's rows: by ``ts``, and rows with equal ``ts`` by their content.

A stream's sequence numbers (``seq``, decision 2) follow this order, and through them the
output order (``(ts, cause)``). Ordering ties by content, not by arrival, makes the output
a function of the rows alone: any split of the input into files, Spark partitions,
micro-batches or shards gives the same sequence numbers. Within one ``ts`` rows compare
column by column in schema order: integers and booleans by value, floats by their IEEE
754 bits as a total order (-0.0 before 0.0, NaN after +inf), strings by their UTF-8 bytes.
Rows equal in every column are identical, so their relative order does not matter.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stretch.model._byte_table import utf8_buffers
from stretch.model._order_kernels import order_ties_texts
from stretch.model.schema import TS

__all__ = ["in_stream_order"]

_SIGN_MASK = np.int64(0x7FFF_FFFF_FFFF_FFFF)


def in_stream_order(table: pa.Table) -> pa.Table:
    """``table``'s rows in stream order (``ts``, then content). O(n) if already in it.

    ``ts`` and the leading number columns whose ranges allow it are packed into one int64
    per row (``_packed_keys``) and the rows sorted by it in one NumPy sort, if they are
    not in its order already. The columns after those (from the first string or float
    column on, or once the ranges no longer fit) order the rows that still tie, in a
    compiled loop: numbers by int64 keys, strings by comparing the tied rows' UTF-8 bytes
    in their Arrow buffers.
    """
    ts = table.column(TS).to_numpy()
    if len(ts) < 2:
        return table
    steps = ts[1:] - ts[:-1]
    if bool(np.all(steps > 0)):
        return table
    if table.num_columns == 1 and bool(np.all(steps >= 0)):
        return table
    names = [name for name in table.column_names if name != TS]
    packed, n_packed = _packed_keys(table, ts, names)
    by = _sorting(packed)
    if by is not None:
        packed = packed[by]
    order = _ties(table, packed, by, names[n_packed:])
    if len(order):
        by = order if by is None else by[order]
    return table if by is None else table.take(pa.array(by))


_FEW_RUNS = 64
"""Rows per descent at or above which packed keys are a few sorted runs to merge."""


def _packed_keys(table: pa.Table, ts: np.ndarray, names: list[str]) -> tuple[np.ndarray, int]:
    """One int64 per row that orders like ``ts`` and the first k columns, and k.

    Each key less its minimum is a digit of a mixed-radix number whose radices are the
    keys' ranges, so the packing is exact: rows with one number are equal in those
    columns. Integer and boolean columns are taken while the ranges multiply to less than
    2**63; the first string or float column stops it (a float's key, its bits, spans more
    than that unless its values are very few).
    """
    low = int(ts.min())
    size = int(ts.max()) - low + 1
    if size >= 2**63:
        return ts, 0
    packed = ts - low
    for k, name in enumerate(names):
        column = table.column(name)
        if not (pa.types.is_integer(column.type) or pa.types.is_boolean(column.type)):
            return packed, k
        key = _key(column, None)
        low = int(key.min())
        span = int(key.max()) - low + 1
        if size * span >= 2**63:
            return packed, k
        packed = packed * span + (key - low)
        size *= span
    return packed, len(names)


def _sorting(packed: np.ndarray) -> np.ndarray | None:
    """The permutation that sorts ``packed``, or None if it is sorted.

    A few ascending runs (a merge of sorted parts) go through NumPy's stable sort, a
    timsort that merges them in about one pass; others through its faster quicksort.
    Rows with one packed key tie, and ``_ties`` orders them.
    """
    descents = int(np.count_nonzero(packed[1:] < packed[:-1]))
    if descents == 0:
        return None
    if descents * _FEW_RUNS <= len(packed):
        return np.argsort(packed, kind="stable")
    return np.argsort(packed)


def _ties(
    table: pa.Table, packed: np.ndarray, by: np.ndarray | None, names: list[str]
) -> np.ndarray:
    """The order of rows with equal ``packed`` keys by the columns ``names`` (empty: as is).

    ``packed`` is sorted; row i of it is ``table``'s row ``by[i]`` (i if ``by`` is None).
    Only the rows that tie go to the compiled kernel, their keys gathered in sorted order:
    equal keys lie side by side, so the kernel reorders within those runs only.
    """
    same = packed[1:] == packed[:-1]
    if not names or not same.any():
        return np.empty(0, dtype=np.int64)
    tied = np.zeros(len(packed), dtype=np.bool_)  # rows that share their key with a neighbour
    tied[1:] = same
    tied[:-1] |= same
    at = np.flatnonzero(tied)  # their places in sorted order
    rows = at if by is None else by[at]  # the table's rows there
    every = len(at) == len(packed)
    keys = np.empty((len(names), len(at)), dtype=np.int64)
    kinds = np.full(len(names), -1, dtype=np.int64)
    texts: list[pa.Array] = []
    for c, name in enumerate(names):
        column = table.column(name)
        if pa.types.is_string(column.type):  # a key is its string's index in the texts
            kinds[c] = len(texts)
            if every:  # text r is the table's row r
                texts.append(column.combine_chunks())
                keys[c] = rows
            else:  # text i is tied row i's
                texts.append(column.take(pa.array(rows)).combine_chunks())
                keys[c] = np.arange(len(at))
        else:
            keys[c] = _key(column, rows)
    offsets, data = _texts(texts, len(at))
    order = order_ties_texts(np.ascontiguousarray(packed[at]), keys, kinds, offsets, data)
    if not len(order):
        return order
    moved = np.arange(len(packed))
    moved[at] = at[order]
    return moved


def _texts(columns: list[pa.Array], n: int) -> tuple[np.ndarray, np.ndarray]:
    """The strings of ``columns`` (n each) as one byte buffer and a row of offsets each."""
    offsets = np.zeros((len(columns), n + 1), dtype=np.int64)
    parts = []
    base = 0
    for c, column in enumerate(columns):
        data, starts = utf8_buffers(column)
        offsets[c] = starts - starts[0] + base
        parts.append(data[starts[0] : starts[-1]])
        base += int(starts[-1] - starts[0])
    data = np.concatenate(parts) if parts else np.empty(0, dtype=np.uint8)
    return offsets, data


def _key(column: pa.ChunkedArray, rows: np.ndarray | None) -> np.ndarray:
    """int64s that order like ``column``'s values at ``rows`` (all if None; not strings).

    Floats by their IEEE 754 total order; other types (uint64) by their dense rank. Numbers
    are picked from the column's NumPy view: no Arrow call per column, which would cost
    more than the ordering itself for the few rows of a small batch.
    """
    kind = column.type
    numeric = pa.types.is_boolean(kind) or (pa.types.is_integer(kind) and kind != pa.uint64())
    if pa.types.is_floating(kind) or numeric:
        values = column.to_numpy()
        values = values if rows is None else values[rows]
        return np.asarray(values, dtype=np.int64) if numeric else _float_key(values)
    if rows is not None:
        column = column.take(pa.array(rows))
    return np.asarray(pc.rank(column, "ascending", tiebreaker="dense"), dtype=np.int64)


def _float_key(values: np.ndarray) -> np.ndarray:
    """int64s that order like the floats' IEEE 754 total order."""
    bits = np.ascontiguousarray(values, dtype=np.float64).view(np.int64)
    return np.where(bits < 0, bits ^ _SIGN_MASK, bits)
