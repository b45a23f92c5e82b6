"""The streaming writer: executors stage their partitions, the driver commits the batch.

Each write task (one partition of a micro-batch, on an executor) converts its rows to
``ts`` in ms and stages them on the sidecar as part ``partition id`` of batch ``batch id``
of writer ``query id`` (``api/staging.py``). The driver's ``commit`` then asks the sidecar
to add the parts, in partition order, as one batch: the result does not depend on which
partition arrived first, no row passes through the driver, and a micro-batch Spark replays
after a crash is a duplicate the sidecar ignores (batch ids are per query id, which a
restart from the same checkpoint keeps). ``abort`` discards the staged parts.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from stretch.errors import InputError
from stretch.model.schema import TS
from stretch.spark.options import WriterOptions

__all__ = ["QUERY_ID", "BATCH_ID", "StagedPart", "StretchStreamWriter", "event_time"]

logger = logging.getLogger(__name__)

QUERY_ID = "sql.streaming.queryId"
"""The task-local property naming the streaming query (the writer's id)."""
BATCH_ID = "streaming.sql.batchId"
"""The task-local property holding the micro-batch id."""

_MS_PER_UNIT = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}


@dataclass
class StagedPart(WriterCommitMessage):
    """What one write task staged: the part of ``batch_id`` of ``writer`` it sent."""

    writer: str
    batch_id: int
    part: int
    rows: int


def event_time(table: pa.Table, column: str, where: str) -> pa.Table:
    """``table`` with its event time as an int64 ``ts`` in ms, first.

    Args:
        table: Rows as Spark hands them over.
        column: The event-time column: a timestamp (any unit; floored to ms) or an integer
            in ms.
        where: What the rows are, for messages.

    Raises:
        InputError: the column is missing, holds nulls, or has another type; or another
            column is already named ``ts``.

    """
    if column not in table.column_names:
        msg = (
            f"{where}: no event-time column {column!r} (has {', '.join(table.column_names)}); "
            "set the option 'timestampColumn'"
        )
        raise InputError(msg)
    if column != TS and TS in table.column_names:
        msg = f"{where}: both {column!r} (the timestampColumn) and {TS!r} are columns; drop one"
        raise InputError(msg)
    values = table.column(column).combine_chunks()
    if values.null_count:
        msg = f"{where}: column {column!r} holds {values.null_count} null event time(s)"
        raise InputError(msg)
    kind = values.type
    if pa.types.is_timestamp(kind):
        up, down = _MS_PER_UNIT[kind.unit]
        raw = values.cast(pa.int64()).to_numpy()
        ts = pa.array(raw * up if up > 1 else np.floor_divide(raw, down), pa.int64())
    elif pa.types.is_integer(kind):
        ts = values.cast(pa.int64())
    else:
        msg = (
            f"{where}: event-time column {column!r} is {kind}; it must be a timestamp or "
            "a long in ms"
        )
        raise InputError(msg)
    rest = [name for name in table.column_names if name != column]
    return pa.Table.from_arrays([ts, *(table.column(name) for name in rest)], names=[TS, *rest])


class StretchStreamWriter(DataSourceStreamArrowWriter):
    """Writes micro-batches into one source of an operator of the sidecar.

    Args:
        options: The parsed writer options.

    """

    def __init__(self, options: WriterOptions) -> None:
        self.options = options

    def _where(self) -> str:
        return f"source {self.options.source} of {self.options.operator!r}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedPart:
        """Stage this task's partition on the sidecar (runs on an executor).

        Raises:
            InputError: the task carries no streaming query or batch id, or bad event times.
            StretchError: the sidecar refused the part (the message is the sidecar's).

        """
        context = TaskContext.get()
        writer = context.getLocalProperty(QUERY_ID) if context else None
        batch = context.getLocalProperty(BATCH_ID) if context else None
        if context is None or not writer or batch is None:
            msg = (
                f"{self._where()}: the stretch writer runs only in a streaming query "
                "(no query id or batch id in the task)"
            )
            raise InputError(msg)
        part = context.partitionId()
        batches = list(iterator)
        rows = sum(b.num_rows for b in batches)
        if rows:
            where = f"{self._where()}, batch {batch} partition {part}"
            table = event_time(pa.Table.from_batches(batches), self.options.timestamp_column, where)
            with self.options.client() as client:
                client.stage_part(
                    self.options.operator,
                    self.options.source,
                    writer,
                    int(batch),
                    part,
                    table,
                    retry_s=self.options.retry_ms / 1000,
                )
        return StagedPart(writer=writer, batch_id=int(batch), part=part, rows=rows)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Make the staged partitions visible as one batch, in partition order (driver).

        Raises:
            StretchError: the sidecar refused the batch, e.g. late rows with
                ``lateRows=fail`` (the message is the sidecar's).

        """
        staged = _staged(messages)
        parts = sorted(m.part for m in staged if m.rows)
        if not parts:
            return
        writer = staged[0].writer
        with self.options.client() as client:
            answer: dict[str, Any] = client.commit_staged(
                self.options.operator,
                self.options.source,
                writer,
                batchId,
                parts,
                late_rows=self.options.late_rows,
                allowed_lateness_ms=self.options.allowed_lateness_ms,
                retry_s=self.options.retry_ms / 1000,
            )
        logger.info(
            "%s: batch %d of writer %s: %d rows added, %d late rows dropped%s",
            self._where(),
            batchId,
            writer,
            answer["accepted"],
            answer["dropped"],
            " (a replay: already committed)" if answer["duplicate"] else "",
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Discard the batch's staged partitions (driver)."""
        writers = {m.writer for m in _staged(messages)}
        with self.options.client() as client:
            for writer in sorted(writers):
                client.abort_staged(self.options.operator, self.options.source, writer, batchId)


def _staged(messages: list[WriterCommitMessage | None]) -> list[StagedPart]:
    return [m for m in messages if isinstance(m, StagedPart)]
