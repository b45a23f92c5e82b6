"""The smallest allowed lateness that admits every micro-batch of a job's input files.

A source's reorder buffer refuses a micro-batch holding a row older than its released
watermark: the largest ``ts`` of the batches before, less the allowed lateness L (a batch
is sorted before it is added, so no row is late within its own batch). ``stretch
pipeline`` feeds each directory's files in name order, whole files per micro-batch (as
many as ``--files-per-trigger`` says, else as fit in its rows per micro-batch; the sizes
``stretch.spark.files.batch_sizes`` gives), so from each file's ``ts`` range every
batch's range follows, and with it
the L that admits all of them: the largest distance from the maximum ``ts`` of the
batches before one to that batch's minimum. Each file's range comes from its Parquet
footer (the column statistics of its row groups), or from its ``ts`` column where a
footer has none.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from stretch.model.schema import TS, event_time_ms

__all__ = ["admitting_lateness_ms", "file_ts_range_ms"]

_UNITS_PER_MS = {"MILLIS": 1, "MICROS": 1_000, "NANOS": 1_000_000}
"""Units of a Parquet timestamp per ms, by the logical type's ``timeUnit``."""


def file_ts_range_ms(path: Path) -> tuple[int, int] | None:
    """The smallest and largest ``ts`` of a Parquet file in ms (floored), None if empty.

    O(row groups) from the footer; reads the ``ts`` column only when a row group has no
    min/max statistics of it (or stores it as INT96).

    Raises:
        OSError: the file cannot be read.
        pyarrow.ArrowException: it is not Parquet, or has no ``ts`` column.
        SchemaError: a ``ts`` in seconds is outside the int64 ms range.

    """
    metadata = pq.read_metadata(path)
    if metadata.num_rows == 0:
        return None
    index = metadata.schema.names.index(TS)
    column = metadata.schema.column(index)
    integer = column.physical_type in ("INT32", "INT64")
    per_ms = _per_ms(column.logical_type.to_json()) if integer else None
    lows, highs = [], []
    for group in range(metadata.num_row_groups):
        chunk = metadata.row_group(group).column(index)
        stats = chunk.statistics
        if chunk.num_values == 0:
            continue
        if per_ms is None or stats is None or not stats.has_min_max:
            return _read_range_ms(path)
        lows.append(int(stats.min_raw) // per_ms)
        highs.append(int(stats.max_raw) // per_ms)
    return (min(lows), max(highs)) if lows else None


def _per_ms(logical: str) -> int | None:
    """Units per ms of a ``ts`` column's raw statistics (None: not read from them)."""
    kind = json.loads(logical) if logical else {}
    name = kind.get("Type", "None")
    if name in ("None", "Int"):
        return 1
    if name == "Timestamp":
        unit = str(kind.get("timeUnit", "")).upper()
        return next((n for key, n in _UNITS_PER_MS.items() if unit.startswith(key)), None)
    return None


def _read_range_ms(path: Path) -> tuple[int, int] | None:
    """The ``ts`` range of a file read from its ``ts`` column."""
    values = pq.read_table(path, columns=[TS]).column(TS).combine_chunks()
    if pa.types.is_timestamp(values.type):  # floored to ms, as the source reads it
        values = event_time_ms(values, str(path))
    ms = values.cast(pa.int64()).to_numpy()
    return (int(ms.min()), int(ms.max())) if len(ms) else None


def admitting_lateness_ms(
    ranges: Sequence[tuple[int, int] | None], batch_sizes: Sequence[int]
) -> int:
    """The smallest allowed lateness under which no micro-batch of one source is late.

    Args:
        ranges: Each file's ``ts`` range in reading order (None: an empty file).
        batch_sizes: The files of each micro-batch, in order (they sum to ``len(ranges)``).

    Returns:
        The largest ``max ts of the batches before - min ts of a batch`` over the
        batches, or 0 when every batch starts at or after all before it. O(files).

    """
    needed = 0
    seen: int | None = None
    first = 0
    for size in batch_sizes:
        batch = [r for r in ranges[first : first + size] if r is not None]
        first += size
        if not batch:
            continue
        low, high = min(r[0] for r in batch), max(r[1] for r in batch)
        if seen is not None:
            needed = max(needed, seen - low)
        seen = high if seen is None else max(seen, high)
    return needed
