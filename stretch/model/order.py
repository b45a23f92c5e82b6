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

from stretch.model.schema import TS

__all__ = ["in_stream_order"]

_SIGN_MASK = np.int64(0x7FFF_FFFF_FFFF_FFFF)


def in_stream_order(table: pa.Table) -> pa.Table:
    """``table``'s rows in stream order (``ts``, then content). O(n) if already in it.

    Sorts only when the rows are out of ``ts`` order or two rows share a ``ts``.
    """
    ts = table.column(TS).to_numpy()
    if len(ts) < 2:
        return table
    steps = ts[1:] - ts[:-1]
    if bool(np.all(steps > 0)):
        return table
    if bool(np.all(steps >= 0)) and table.num_columns == 1:
        return table
    keys = {TS: pa.array(ts)}
    for i, field in enumerate(table.schema):
        if field.name == TS:
            continue
        column = table.column(i)
        if pa.types.is_floating(field.type):
            column = pa.array(_float_key(column.to_numpy(zero_copy_only=False)))
        keys[f"c{i}"] = column
    order = pc.sort_indices(pa.table(keys), sort_keys=[(name, "ascending") for name in keys])
    return table.take(order)


def _float_key(values: np.ndarray) -> np.ndarray:
    """int64s that order like the floats' IEEE 754 total order."""
    bits = np.ascontiguousarray(values, dtype=np.float64).view(np.int64)
    return np.where(bits < 0, bits ^ _SIGN_MASK, bits)
