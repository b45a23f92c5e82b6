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

    The rows are ordered by ``ts`` (a stable NumPy sort, only if they are not in ``ts``
    order), then each run of equal ``ts`` by its content in a compiled loop: numbers by
    int64 keys, strings by comparing the tied rows' UTF-8 bytes in their Arrow buffers.
    """
    ts = table.column(TS).to_numpy()
    if len(ts) < 2:
        return table
    steps = ts[1:] - ts[:-1]
    if bool(np.all(steps > 0)):
        return table
    backwards = not bool(np.all(steps >= 0))
    if not backwards and table.num_columns == 1:
        return table
    by_ts = np.argsort(ts, kind="stable") if backwards else None
    if by_ts is not None:
        ts = ts[by_ts]
    tied = np.zeros(len(ts), dtype=np.bool_)  # rows that share their ts with a neighbour
    tied[1:] = ts[1:] == ts[:-1]
    tied[:-1] |= tied[1:]
    every = bool(tied.all())
    rows = np.flatnonzero(tied) if by_ts is None else by_ts[tied]
    names = [name for name in table.column_names if name != TS]
    keys = np.zeros((len(names), len(ts)), dtype=np.int64)  # only tied rows' keys matter
    kinds = np.full(len(names), -1, dtype=np.int64)
    texts: list[pa.Array] = []
    for c, name in enumerate(names):
        column = table.column(name)
        if pa.types.is_string(column.type):  # the tied rows' strings; a key is its index
            kinds[c] = len(texts)
            if every:  # row r's string is text r
                texts.append(column.combine_chunks())
                keys[c] = np.arange(len(ts))
            else:  # tied row rows[i]'s string is text i
                texts.append(column.take(pa.array(rows)).combine_chunks())
                keys[c, rows] = np.arange(len(rows))
        elif every:
            keys[c] = _key(column, None)
        else:
            keys[c, rows] = _key(column, rows)
    if by_ts is not None:
        # C order, the layout ``stretch warm`` compiles the kernels for: ``keys[:, by_ts]``
        # is in Fortran order, and the kernels would compile again for it.
        keys = np.take(keys, by_ts, axis=1)
    offsets, data = _texts(texts, len(rows))
    order = order_ties_texts(np.ascontiguousarray(ts, dtype=np.int64), keys, kinds, offsets, data)
    if by_ts is None:
        return table.take(pa.array(order)) if len(order) else table
    return table.take(pa.array(by_ts[order] if len(order) else by_ts))


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
