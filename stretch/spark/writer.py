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

import io
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from stretch.client import StretchClient
from stretch.errors import InputError
from stretch.model.schema import TS, event_time_ms
from stretch.sharded import ShardedClient
from stretch.spark.options import WriterOptions

__all__ = ["QUERY_ID", "BATCH_ID", "StagedPart", "StretchStreamWriter", "event_time"]

logger = logging.getLogger(__name__)

QUERY_ID = "sql.streaming.queryId"
"""The task-local property naming the streaming query (the writer's id)."""
BATCH_ID = "streaming.sql.batchId"
"""The task-local property holding the micro-batch id."""

_RECONNECT = (httpx.NetworkError, httpx.RemoteProtocolError)
"""Transport errors a kept connection the sidecar closed gives (the client raises them as
``SidecarUnreachableError``, their cause)."""
T = TypeVar("T")

_clients: dict[tuple[str, str | None], StretchClient | ShardedClient] = {}
_clients_lock = threading.Lock()


def _with_client(options: WriterOptions, call: Callable[[StretchClient | ShardedClient], T]) -> T:
    """``call`` with this process's client of the sidecar(s), kept open between calls.

    Spark reuses a Python worker for the write tasks of many micro-batches, and the
    driver's for their commits; a new client per call cost a TLS context and a TCP
    connection each time (50-100 ms on a loaded 2-core machine, twice per micro-batch).
    A kept connection the sidecar has closed meanwhile (e.g. it restarted) fails with a
    network error: the call is made once more on a new client. Every call the writer
    makes may be repeated: a part staged again replaces itself, a commit repeated is a
    duplicate, an abort repeated discards nothing.
    """
    key = (options.url, options.token)
    for attempt in (1, 2):
        with _clients_lock:
            client = _clients.get(key)
            if client is None:
                client = _clients[key] = options.client()
        try:
            return call(client)
        except httpx.TransportError as exc:
            if not isinstance(exc.__cause__ or exc, _RECONNECT):
                raise
            with _clients_lock:
                if _clients.get(key) is client:
                    del _clients[key]
            client.close()
            if attempt == 2:
                raise
    raise AssertionError  # unreachable: the second attempt returns or raises


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
        ts = event_time_ms(values, where)
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

    _committed = False
    """This driver-side writer committed a micro-batch."""
    _skipped = False
    """A micro-batch without write tasks came before any commit of this writer."""

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
        where = f"{self._where()}, batch {batch} partition {part}"
        iterator = iter(iterator)
        first = next((b for b in iterator if b.num_rows), None)
        if first is None:
            return StagedPart(writer=writer, batch_id=int(batch), part=part, rows=0)
        column = self.options.timestamp_column
        stream = _PartStream(first, iterator, lambda rows: _event_time_batch(rows, column, where))
        _with_client(
            self.options,
            lambda client: client.stage_part(
                self.options.operator,
                self.options.source,
                writer,
                int(batch),
                part,
                stream,
                retry_s=self.options.retry_ms / 1000,
            ),
        )
        rows = stream.rows
        return StagedPart(writer=writer, batch_id=int(batch), part=part, rows=rows)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Make the staged partitions visible as one batch, in partition order (driver).

        A micro-batch without rows is committed too, so the operator knows the writer from
        its first micro-batch on. A commit above micro-batch 0 says the writer
        ``continues``: the sidecar refuses it if the operator has none of the writer's
        earlier micro-batches (an in-memory sidecar that restarted lost them; a query
        restarted from its checkpoint would otherwise go on without them). Only a
        micro-batch without any write task (no partition) cannot be committed, as nothing
        tells the writer's id; a writer whose first micro-batches were such says it
        continues only after its first commit.

        Raises:
            StretchError: the sidecar refused the batch, e.g. late rows with
                ``lateRows=fail``, or a writer that continues but is new to the operator
                (the message is the sidecar's).

        """
        staged = _staged(messages)
        if not staged:
            if not self._committed:
                self._skipped = True
            return
        parts = sorted(m.part for m in staged if m.rows)
        writer = staged[0].writer
        answer: dict[str, Any] = _with_client(
            self.options,
            lambda client: client.commit_staged(
                self.options.operator,
                self.options.source,
                writer,
                batchId,
                parts,
                late_rows=self.options.late_rows,
                allowed_lateness_ms=self.options.allowed_lateness_ms,
                retry_s=self.options.retry_ms / 1000,
                continues=batchId > 0 and (self._committed or not self._skipped),
            ),
        )
        self._committed = True
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

        def abort(client: StretchClient | ShardedClient) -> None:
            for writer in sorted(writers):
                client.abort_staged(self.options.operator, self.options.source, writer, batchId)

        _with_client(self.options, abort)


def _event_time_batch(batch: pa.RecordBatch, column: str, where: str) -> pa.RecordBatch:
    """One record batch through ``event_time``."""
    table = event_time(pa.Table.from_batches([batch]), column, where)
    return table.combine_chunks().to_batches()[0]


class _PartStream:
    """A partition's rows as an Arrow IPC stream, sent while Spark still hands them over.

    Spark gives a write task its partition as Arrow record batches (10,000 rows each by
    default); each is converted (``event_time``) and sent as soon as it comes, so the
    upload overlaps Spark's scan instead of following it. Iterating yields the whole
    stream every time: the batches converted so far again, then the rest from Spark; a
    request that is retried (429, a dropped connection) sends the whole part again.

    Args:
        first: The partition's first non-empty batch (converted now: a bad event-time
            column fails the task before anything is sent).
        rest: Spark's iterator over the remaining batches.
        convert: Event time to ``ts`` in ms, per batch.

    """

    def __init__(
        self,
        first: pa.RecordBatch,
        rest: Iterator[pa.RecordBatch],
        convert: Callable[[pa.RecordBatch], pa.RecordBatch],
    ) -> None:
        self._convert = convert
        self._done = [convert(first)]
        self._rest = rest

    @property
    def rows(self) -> int:
        """The rows converted so far (all of them once the stream was sent whole)."""
        return sum(b.num_rows for b in self._done)

    def _batches(self) -> Iterator[pa.RecordBatch]:
        sent = 0
        while sent < len(self._done):
            yield self._done[sent]
            sent += 1
        for batch in self._rest:
            converted = self._convert(batch)
            self._done.append(converted)
            yield converted

    def __iter__(self) -> Iterator[bytes]:
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, self._done[0].schema) as ipc:
            for batch in self._batches():
                ipc.write_batch(batch)
                yield _drain(sink)
        yield _drain(sink)  # the end-of-stream marker, written on close


def _drain(sink: io.BytesIO) -> bytes:
    chunk = sink.getvalue()
    sink.seek(0)
    sink.truncate()
    return chunk


def _staged(messages: list[WriterCommitMessage | None]) -> list[StagedPart]:
    return [m for m in messages if isinstance(m, StagedPart)]
