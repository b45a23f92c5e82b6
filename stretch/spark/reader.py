"""The readers: an operator's output log as a streaming or a batch DataFrame.

The output log (docs/design.md decision 9) is a sequence of rows with increasing offsets.
A micro-batch reads the offset range ``[start, end)``, split into read tasks of at most
``rowsPerPartition`` rows, each fetching its range as Arrow and yielding record batches
with the operator's output columns (``ts`` first, long ms) and ``offset``. The log is
committed (trimmed) only when Spark commits the batch, so a query restarted from its
checkpoint re-reads what it had not committed.

With several sidecars in ``url`` (the shards of one operator) an offset is
``{"offset": n, "shards": [...]}``: the merged offset and each shard's offset at a cut
(``stretch.merge``). A micro-batch reads up to the shards' common output watermark, in one
read task that merges the shards' rows; ``maxRowsPerTrigger`` and ``rowsPerPartition``
apply to one sidecar only.

A micro-batch planned before a restart may promise offsets the log does not hold yet: a
sidecar without ``--state-dir`` that restarted has a new, empty operator, which reaches
the same offsets again only as its writers replay the input (the operator is
deterministic). Before its read tasks start, a micro-batch waits on the driver, up to
``PROMISED_WAIT_S``, until each log holds the offsets it reads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from stretch.client import ServiceError, StretchClient
from stretch.errors import InputError, StretchError
from stretch.merge import Cut
from stretch.model.schema import CAUSE
from stretch.spark.options import ReaderOptions

__all__ = [
    "OFFSET",
    "PROMISED_WAIT_S",
    "OffsetRange",
    "StretchBatchReader",
    "StretchStreamReader",
    "output_schema",
]

OFFSET = "offset"
"""The column holding each row's offset in the output log."""
SHARDS = "shards"
"""The key of a sharded reader's offset holding each shard's offset at the cut."""

_SPARK_TYPES: dict[pa.DataType, DataType] = {
    pa.int64(): LongType(),
    pa.float64(): DoubleType(),
    pa.bool_(): BooleanType(),
    pa.string(): StringType(),
}
_FETCH_ROWS = 100_000
_SCHEMA_READS = 10
"""How many times the schema is read at the log's end before a trim past it fails it."""
PROMISED_WAIT_S = 600.0
"""How long a micro-batch waits for the log to reach the offsets it was planned with
(after a restart of a sidecar without ``--state-dir``, while its writers replay the input)."""
_LONG_POLL_MS = 10_000
_TOO_MANY_WAITS = 429

logger = logging.getLogger(__name__)


@dataclass
class OffsetRange(InputPartition):
    """One read task: the log's rows ``[start, end)``."""

    start: int
    end: int


@dataclass
class CutRange(InputPartition):
    """One read task of a sharded operator: the merged rows between two cuts."""

    start: tuple[int, ...]
    end: tuple[int, ...]


def output_schema(options: ReaderOptions) -> StructType:
    """The reader's Spark schema: the operator's output columns, then ``offset``.

    Raises:
        InputError: an output column of a type Spark's reader does not carry.
        StretchError: the sidecar refused the request (e.g. no such operator).

    """
    with options.shards() as client:
        table_schema = _log_schema(client.shards[0], options.operator)
    fields = []
    for field in table_schema:
        if field.name == CAUSE:
            continue
        kind = _SPARK_TYPES.get(field.type)
        if kind is None:
            msg = f"output column {field.name!r} of {options.operator!r} has type {field.type}"
            raise InputError(msg)
        fields.append(StructField(field.name, kind))
    return StructType([*fields, StructField(OFFSET, LongType())])


def _log_schema(client: StretchClient, operator: str) -> pa.Schema:
    """The Arrow schema of the operator's output log, read with at most one row.

    It is read at the log's end, or at its committed offset where that lies beyond the end,
    not at its start: after a restart the sidecar re-applies a commit as its rows come
    back and trims them, so the start may be gone by the time it is asked for. A reader's
    commit between the status and the read may pass that end too; then the read is tried
    again at the new end, up to ``_SCHEMA_READS`` times.

    Raises:
        StretchError: the sidecar refused the read for another reason, or the log was
            trimmed past its end each time.

    """
    for _ in range(_SCHEMA_READS):
        output = client.status(operator)["output"]
        end = max(int(output["end_offset"]), int(output["committed_offset"]))
        try:
            return client.output(operator, end, max_rows=1)[0].schema
        except ServiceError:
            start = int(client.status(operator)["output"]["start_offset"])
            if start <= end:
                raise
    msg = (
        f"reading the output schema of {operator!r}: the log was trimmed past its end "
        f"{_SCHEMA_READS} times over (readers committing as it grows); try again"
    )
    raise StretchError(msg)


def _ranges(start: int, end: int, rows_per_partition: int) -> list[OffsetRange]:
    return [
        OffsetRange(lo, min(lo + rows_per_partition, end))
        for lo in range(start, end, rows_per_partition)
    ]


def _read(
    options: ReaderOptions, schema: StructType, part: OffsetRange
) -> Iterator[pa.RecordBatch]:
    """The rows of ``part`` as record batches of exactly ``to_arrow_schema(schema)``."""
    target = to_arrow_schema(schema)
    offset = part.start
    with options.client() as client:
        while offset < part.end:
            table, next_offset = client.output(
                options.operator, offset, max_rows=min(part.end - offset, _FETCH_ROWS)
            )
            if next_offset <= offset:
                msg = (
                    f"output of {options.operator!r}: offsets {offset}..{part.end} were "
                    "promised but the log returned none"
                )
                raise InputError(msg)
            offsets = pa.array(np.arange(offset, next_offset, dtype=np.int64))
            columns = [
                table.column(f.name).combine_chunks().cast(f.type) if f.name != OFFSET else offsets
                for f in target
            ]
            yield pa.RecordBatch.from_arrays(columns, schema=target)
            offset = next_offset


def _read_cuts(
    options: ReaderOptions, schema: StructType, part: CutRange
) -> Iterator[pa.RecordBatch]:
    """The merged rows of the shards between two cuts, as record batches of the schema."""
    target = to_arrow_schema(schema)
    start, end = Cut(part.start), Cut(part.end)
    with options.shards() as client:
        table, _ = client.read_between(options.operator, start, end)
    offsets = pa.array(np.arange(start.offset, start.offset + table.num_rows, dtype=np.int64))
    columns = [
        table.column(f.name).combine_chunks().cast(f.type) if f.name != OFFSET else offsets
        for f in target
    ]
    yield pa.RecordBatch.from_arrays(columns, schema=target)


def _await_offsets(
    client: StretchClient, operator: str, start: int, end: int, deadline: float, where: str = ""
) -> None:
    """Wait until ``operator``'s log on ``client`` holds every offset before ``end``.

    Returns at once when it does (one status request); else long-polls the log's end
    until it reaches ``end``, the log finishes short of it, or ``deadline``
    (``time.monotonic()``) passes.

    Raises:
        StretchError: the log finished short of ``end`` (all sources closed), or had not
            reached it by ``deadline``; the message names the offsets and the log's end.

    """
    what = f"output of {operator!r}{where}: a micro-batch planned to read offsets {start}..{end}"
    waiting = False
    while True:
        output = client.status(operator)["output"]
        have = int(output["end_offset"])
        if have >= end:
            if waiting:
                logger.info("%s; the log holds them now", what)
            return
        if output["finished"]:
            msg = (
                f"{what}, but the log ended at {have} (every source closed): the operator's "
                "input is not the one that produced those offsets"
            )
            raise StretchError(msg)
        left_s = deadline - time.monotonic()
        if left_s <= 0:
            msg = (
                f"{what}; waited {PROMISED_WAIT_S:g} s for the log to reach {end}, but it "
                f"ends at {have}: its writers did not replay the input that far (after a "
                "restart of a sidecar without --state-dir they replay it from the start: "
                "docs/spark.md, 'Restarting')"
            )
            raise StretchError(msg)
        if not waiting:
            logger.info("%s; the log ends at %d: waiting up to %.0f s", what, have, left_s)
            waiting = True
        try:  # returns once a row is at ``have``, the log finishes, or the poll ends
            client.output(
                operator, have, max_rows=1, wait_ms=int(min(left_s * 1000, _LONG_POLL_MS))
            )
        except ServiceError as exc:
            if exc.status != _TOO_MANY_WAITS:
                raise
            time.sleep(min(1.0, max(left_s, 0.0)))  # the sidecar's long-polls are all taken


def _offset(cut: Cut) -> dict[str, Any]:
    return {OFFSET: cut.offset, SHARDS: list(cut.shards)}


def _cut(offset: Mapping[str, Any]) -> Cut:
    return Cut(tuple(int(o) for o in offset[SHARDS]))


def _committed_and_end(options: ReaderOptions) -> tuple[int, int]:
    """The log's committed offset (a commit beyond the end included) and its end offset."""
    with options.client() as client:
        output = client.status(options.operator)["output"]
    return int(output["committed_offset"]), int(output["end_offset"])


def _shard_starts(options: ReaderOptions) -> Cut:
    """Each shard's committed offset (``ShardedClient.committed``)."""
    with options.shards() as client:
        return client.committed(options.operator)


class StretchStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The output log of an operator as a stream; offsets are ``{"offset": n}``.

    Args:
        options: The parsed reader options.
        schema: The query's schema (``output_schema`` unless the user gave one).

    """

    def __init__(self, options: ReaderOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._target: int | None = None
        self._target_cut: Cut | None = None
        self._seen: tuple[int, ...] = ()  # each log's end as last seen by this reader

    def _available(self) -> Cut:
        with self.options.shards() as client:
            cut = client.available(self.options.operator)
        self._seen = cut.shards
        return cut

    def _offsets(self) -> tuple[int, int]:
        committed, end = _committed_and_end(self.options)
        self._seen = (end,)
        return committed, end

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        """Where the log starts (on each shard, when sharded): its committed offset.

        Not ``start_offset``: after a restart the rows before a commit are produced again
        and trimmed as they come, so a query starting there would find them gone.
        """
        if self.options.sharded:
            return _offset(_shard_starts(self.options))
        return {OFFSET: self._offsets()[0]}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        """``maxRowsPerTrigger`` if set, else everything available."""
        if self.options.max_rows_per_trigger is not None:
            return ReadMaxRows(self.options.max_rows_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        """The log's end, within the read limit and the ``availableNow`` target.

        Sharded: the cut at the shards' common output watermark (or the target's).
        """
        if self.options.sharded:
            cut = self._available()
            if self._target_cut is not None:
                cut = Cut(tuple(map(min, cut.shards, self._target_cut.shards)))
            return _offset(Cut(tuple(map(max, cut.shards, _cut(start).shards))))
        end = self._offsets()[1]
        if self._target is not None:
            end = min(end, self._target)
        if isinstance(limit, ReadMaxRows):
            end = min(end, start[OFFSET] + limit.max_rows)
        return {OFFSET: max(end, start[OFFSET])}

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        """Read up to the log's end as of now, and no further."""
        if self.options.sharded:
            self._target_cut = self._available()
        else:
            self._target = self._offsets()[1]

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """Read tasks of at most ``rowsPerPartition`` rows each (sharded: one task).

        First waits (on the driver, holding no task slot) until the log holds the batch's
        offsets: a batch planned before a restart may be ahead of a new operator's log.

        Raises:
            StretchError: the log did not reach them within ``PROMISED_WAIT_S``.

        """
        self._await_promised(start, end)
        if self.options.sharded:
            return [CutRange(_cut(start).shards, _cut(end).shards)]
        return _ranges(start[OFFSET], end[OFFSET], self.options.rows_per_partition)

    def _await_promised(self, start: Mapping[str, Any], end: Mapping[str, Any]) -> None:
        """Wait until each log (each shard's) holds the offsets ``start``..``end`` read.

        Nothing to ask when this reader planned the batch itself (it saw the logs reach
        ``end``): only a batch planned before a restart of the query is checked.
        """
        if self.options.sharded:
            ranges = list(zip(_cut(start).shards, _cut(end).shards, strict=True))
        else:
            ranges = [(int(start[OFFSET]), int(end[OFFSET]))]
        if len(self._seen) == len(ranges) and all(
            hi <= seen for (_, hi), seen in zip(ranges, self._seen, strict=True)
        ):
            return
        deadline = time.monotonic() + PROMISED_WAIT_S
        with self.options.shards() as client:
            for index, (shard, (lo, hi)) in enumerate(zip(client.shards, ranges, strict=True)):
                if hi > lo:
                    where = f" on shard {index}" if self.options.sharded else ""
                    _await_offsets(shard, self.options.operator, lo, hi, deadline, where)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The rows of one read task (runs on an executor)."""
        if isinstance(partition, CutRange):
            return _read_cuts(self.options, self.schema, partition)
        assert isinstance(partition, OffsetRange)
        return _read(self.options, self.schema, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed everything before ``end``: the log (each shard's) may trim it."""
        if not self.options.commit:
            return
        if self.options.sharded:
            cut = _cut(end).shards
            with self.options.shards() as client:
                for shard, offset in zip(client.shards, cut, strict=True):
                    shard.commit(self.options.operator, offset, cut)
            return
        with self.options.client() as client:
            client.commit(self.options.operator, end[OFFSET])


class StretchBatchReader(DataSourceReader):
    """What the output log holds now, as a batch DataFrame (nothing is committed).

    Args:
        options: The parsed reader options.
        schema: The query's schema.

    """

    def __init__(self, options: ReaderOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        """Read tasks over the rows the log holds now (sharded: final merged rows, one task).

        They start at the committed offset, not at ``start_offset``: after a restart the
        rows before a commit come back and are trimmed as they come.
        """
        if self.options.sharded:
            with self.options.shards() as sharded:
                available = sharded.available(self.options.operator)
            return [CutRange(_shard_starts(self.options).shards, available.shards)]
        start, end = _committed_and_end(self.options)
        end = max(start, end)  # a commit beyond the end: nothing to read yet
        # An empty log still needs one (empty) task for Spark to plan the read.
        return _ranges(start, end, self.options.rows_per_partition) or [OffsetRange(start, end)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The rows of one read task (runs on an executor).

        Raises:
            StretchError: a streaming query committed (trimmed) rows of this task after
                the read was planned; the message says so.

        """
        if isinstance(partition, CutRange):
            what = f"the rows between cuts {partition.start} and {partition.end}"
            rows = _read_cuts(self.options, self.schema, partition)
            return self._untrimmed(rows, partition.start, what)
        assert isinstance(partition, OffsetRange)
        what = f"offsets {partition.start}..{partition.end}"
        rows = _read(self.options, self.schema, partition)
        return self._untrimmed(rows, (partition.start,), what)

    def _untrimmed(
        self, rows: Iterator[pa.RecordBatch], starts: tuple[int, ...], what: str
    ) -> Iterator[pa.RecordBatch]:
        """``rows``; should the sidecar refuse them, say so if a commit trimmed them."""
        try:
            yield from rows
        except ServiceError as exc:
            with self.options.shards() as client:
                now = [
                    int(s.status(self.options.operator)["output"]["start_offset"])
                    for s in client.shards
                ]
            passed = [i for i, (n, s) in enumerate(zip(now, starts, strict=True)) if n > s]
            if not passed:
                raise
            whose = f"shard {passed[0]}'s" if self.options.sharded else "the"
            msg = (
                f"batch read of {self.options.operator!r}: {what} were planned, but a reader "
                f"committed {whose} log up to {now[passed[0]]} since (committed rows are "
                "trimmed); read again for what the log holds now"
            )
            raise StretchError(msg) from exc
