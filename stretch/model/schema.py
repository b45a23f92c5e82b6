"""Schemas: the named, typed columns of a stream, and how input tables are checked.

Every stream carries an int64 ``ts`` column (event time in milliseconds, docs/design.md
decision 1) followed by the payload columns its schema names. Column types are few on
purpose: they are the types the compiled kernels understand.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stretch.errors import SchemaError

__all__ = [
    "CAUSE",
    "TS",
    "TS_MAX_MS",
    "TS_MIN_MS",
    "ColumnType",
    "Schema",
    "conform",
    "event_time_ms",
]

TS = "ts"
CAUSE = "_cause"
"""The output column of a shard's rows holding each row's cause (``CAUSE_WIDTH`` int64s).

Rows of all shards sorted by ``(ts, cause)`` are the output of one unsharded pipeline, in
its order (docs/design.md "Sharding"); the merge drops the column.
"""

TS_MIN_MS = -(2**62)
TS_MAX_MS = 2**62
"""The event times an input row may carry (about 146 million years either side of 1970).

The int64 values beyond are the runtime's own: ``END_OF_INPUT`` (2**63 - 1) is the
watermark of a closed source, and window arithmetic (``ts + WS``) must not overflow.
"""


class ColumnType(Enum):
    """The payload column types the service understands."""

    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    STR = "str"

    @property
    def arrow(self) -> pa.DataType:
        """The Arrow type a column of this kind is stored as."""
        return _ARROW[self]

    @classmethod
    def holding(cls, dtype: pa.DataType) -> ColumnType | None:
        """The kind whose Arrow type holds every value of ``dtype``, or None.

        ``conform`` casts integers of any width, floats and large strings to it.
        """
        if pa.types.is_integer(dtype):
            return cls.INT
        if pa.types.is_floating(dtype):
            return cls.FLOAT
        if pa.types.is_boolean(dtype):
            return cls.BOOL
        if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
            return cls.STR
        return None


_ARROW = {
    ColumnType.INT: pa.int64(),
    ColumnType.FLOAT: pa.float64(),
    ColumnType.BOOL: pa.bool_(),
    ColumnType.STR: pa.string(),
}


@dataclass(frozen=True)
class Schema:
    """An ordered list of payload columns; ``ts`` is implicit and always first."""

    columns: tuple[tuple[str, ColumnType], ...]

    @classmethod
    def of(cls, **columns: str) -> Schema:
        """Build a schema from keyword arguments: ``Schema.of(x="int", y="float")``."""
        return cls(tuple((name, ColumnType(kind)) for name, kind in columns.items()))

    @property
    def names(self) -> tuple[str, ...]:
        """Payload column names in order."""
        return tuple(name for name, _ in self.columns)

    def __iter__(self) -> Iterator[tuple[str, ColumnType]]:
        return iter(self.columns)

    def __len__(self) -> int:
        return len(self.columns)

    def arrow(self) -> pa.Schema:
        """The Arrow schema of a table of this stream: ``ts`` first, then the payload."""
        return self._arrow

    @cached_property
    def _arrow(self) -> pa.Schema:  # made once: every batch a pipeline admits is checked on it
        return pa.schema([(TS, pa.int64())] + [(n, t.arrow) for n, t in self.columns])

    def empty_table(self) -> pa.Table:
        """An empty table with this schema."""
        return self.arrow().empty_table()

    def table(self, ts: Sequence[int], rows: Sequence[Sequence[Any]]) -> pa.Table:
        """Build a table from event times and payload rows (in schema order)."""
        return pa.Table.from_batches([self.record_batch(ts, rows)])

    def record_batch(self, ts: Sequence[int], rows: Sequence[Sequence[Any]]) -> pa.RecordBatch:
        """Build a record batch from event times and payload rows (in schema order)."""
        arrays = [pa.array(list(ts), pa.int64())]
        for i, (_, kind) in enumerate(self.columns):
            arrays.append(pa.array([row[i] for row in rows], kind.arrow))
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow())


def conform(table: pa.Table, schema: Schema, where: str, row_offset: int = 0) -> pa.Table:
    """Check ``table`` against ``schema`` and return it with exactly the schema's columns.

    ``ts`` is int64 ms, or an Arrow timestamp of any unit and time zone (Spark's
    TimestampType is ``timestamp[us, tz=UTC]``; a naive one is read as UTC), converted to
    ms since the epoch, floored. Integers are accepted where floats are expected when
    float64 holds them exactly (magnitude at most 2**53), and unsigned integers where int64
    holds them; every other mismatch is an error, as is a ``ts`` outside
    ``TS_MIN_MS..TS_MAX_MS`` or a column name the table holds twice. Extra columns are dropped.

    Args:
        table: The input, e.g. as read from a file or pushed over HTTP.
        schema: The payload columns the operator expects.
        where: What the input is, for messages (a file name, "source 1 of 'j'").
        row_offset: The rows of ``where`` before ``table`` (a file read a batch at a
            time), added to the row numbers of messages.

    Raises:
        SchemaError: naming ``where``, the column and the first offending row (1-based).

    """
    if table.schema.equals(schema.arrow()) and not any(c.null_count for c in table.columns):
        _check_ts_range(table.column(TS), where, row_offset)
        return table  # already conformed (a replay's batches, a chained pipeline's output)
    arrays = []
    names = table.column_names
    for name, arrow_type in [(TS, pa.int64())] + [(n, t.arrow) for n, t in schema]:
        if name not in names:
            msg = f"{where}: missing column {name!r} (has {', '.join(names)})"
            raise SchemaError(msg)
        if names.count(name) > 1:
            msg = (
                f"{where}: column {name!r} appears {names.count(name)} times; names must be unique"
            )
            raise SchemaError(msg)
        arrays.append(_cast(table.column(name), arrow_type, where, name, row_offset))
    _check_ts_range(arrays[0], where, row_offset)
    return pa.Table.from_arrays(arrays, schema=schema.arrow())


_MS_PER_UNIT = {"s": 1000, "ms": 1}
_UNITS_PER_MS = {"us": 1000, "ns": 1_000_000}


def event_time_ms(column: pa.Array, where: str) -> pa.Array:
    """A timestamp column (any unit, any or no time zone) as int64 ms since the epoch (UTC).

    Finer units are floored to the millisecond, so order is kept.

    Raises:
        SchemaError: a value in seconds is outside the int64 ms range (``where`` names it).

    """
    unit = column.type.unit
    raw = column.cast(pa.int64())
    if unit in _UNITS_PER_MS:
        return pa.array(np.floor_divide(raw.to_numpy(), _UNITS_PER_MS[unit]), pa.int64())
    try:
        return pc.multiply_checked(raw, _MS_PER_UNIT[unit])
    except pa.ArrowInvalid:
        msg = f"{where}: column {TS!r}: a timestamp is outside the event time range in ms"
        raise SchemaError(msg) from None


def _cast(
    column: pa.ChunkedArray, target: pa.DataType, where: str, name: str, row_offset: int
) -> pa.Array:
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if column.null_count:
        row = row_offset + pc.index(pc.is_null(column), True).as_py() + 1
        msg = f"{where}: row {row}, column {name!r}: missing value"
        raise SchemaError(msg)
    source = column.type
    if name == TS and pa.types.is_timestamp(source):
        return event_time_ms(column, where)
    if source == target:
        return column
    allowed = (
        (
            pa.types.is_integer(source)
            and (pa.types.is_integer(target) or pa.types.is_floating(target))
        )
        or (pa.types.is_floating(source) and pa.types.is_floating(target))
        or (pa.types.is_dictionary(source) and pa.types.is_string(target))
        or (pa.types.is_large_string(source) and pa.types.is_string(target))
        or pa.types.is_null(source)
    )
    if allowed:
        try:
            return column.cast(target)
        except pa.ArrowInvalid:
            row, value = _first_bad(column, target)
            msg = (
                f"{where}: row {row_offset + row}, column {name!r}: {value!r} ({source}) cannot "
                f"be held exactly as {_type_name(target)} ({target})"
            )
            raise SchemaError(msg) from None
    row, value = _first_bad(column, target)
    msg = (
        f"{where}: row {row_offset + row}, column {name!r}: expected {_type_name(target)}, "
        f"got {value!r} ({source})"
    )
    raise SchemaError(msg)


def _check_ts_range(ts: pa.Array | pa.ChunkedArray, where: str, row_offset: int) -> None:
    if not len(ts):
        return
    # NumPy, not Arrow's min_max: the call costs more than the check on a small batch.
    values = ts.to_numpy() if isinstance(ts, pa.ChunkedArray) else ts.to_numpy(zero_copy_only=False)
    if int(values.min()) >= TS_MIN_MS and int(values.max()) <= TS_MAX_MS:
        return
    outside = pc.or_(pc.less(ts, TS_MIN_MS), pc.greater(ts, TS_MAX_MS))
    row = pc.index(outside, True).as_py()
    msg = (
        f"{where}: row {row_offset + row + 1}, column {TS!r}: {ts[row].as_py()} is outside the "
        f"event time range {TS_MIN_MS}..{TS_MAX_MS} (ms)"
    )
    raise SchemaError(msg)


def _first_bad(column: pa.Array, target: pa.DataType) -> tuple[int, object]:
    """The first row (1-based) whose value cannot be read as ``target``, and the value."""
    for i in range(len(column)):
        try:
            column.slice(i, 1).cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return i + 1, _shown(column[i])
    return 1, _shown(column[0]) if len(column) else None


def _shown(value: pa.Scalar) -> object:
    """``value`` as Python, or the Arrow scalar where Python has no such value.

    A timestamp or date beyond Python's years 1..9999 is one: it prints as Arrow does.
    """
    try:
        return value.as_py()
    except (OverflowError, ValueError):
        return value


def _type_name(target: pa.DataType) -> str:
    for kind, arrow_type in _ARROW.items():
        if arrow_type == target:
            return kind.value
    return str(target)
