"""The operators the service runs: one VSN pipeline per name, and what HTTP adds to it.

HTTP adds three things to a ``stretch`` pipeline: idempotent batches (a ``batch_id`` seen
before on a source is acknowledged and ignored, since Spark's ``foreachBatch`` is
at-least-once), settings that make the runtime's admission refuse rather than queue (a
batch is taken when the rows of the source's earlier batches are all in ESG_in, else
``CapacityError`` -> 429 and the client retries; the runtime decides, under its own lock),
and per-source counters for the status and the metrics (``api.source_counters``). A
self-join declared ``one_stream`` in the catalog (hedge) has one REST source whose batches
feed both its pipeline sources. A deleted operator wakes its output's listeners (the
long-polls) at once, before its threads are stopped, so that they answer 404 instead of
waiting out their time.

The rest of what an operator does over HTTP lives beside it: its autoscaler
(``api.autoscaler``), what it shows (``api.status``), and its checkpoints and restore
(``api.recovery``).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import pyarrow as pa

from stretch.api.autoscaler import OperatorAutoscaler
from stretch.api.errors import NotFoundError, TooLargeError
from stretch.api.latency import ArrivalClock, LatencyObserver
from stretch.api.limits import ServiceLimits
from stretch.api.metrics import ServiceMetrics
from stretch.api.operator_journal import JournalWriter, OperatorJournal
from stretch.api.schemas import CheckpointInfo
from stretch.api.source_counters import SourceCounters
from stretch.errors import InputError, LateTupleError
from stretch.vsn import Admission, Pipeline, ReconfigurationStatus

__all__ = ["ManagedOperator", "SourceCounters"]  # SourceCounters: re-exported, as before

KEPT_CHECKPOINTS = 100
"""Checkpoint records an operator keeps for ``GET .../checkpoints`` (the most recent)."""


class ManagedOperator:
    """A named, running pipeline with idempotent, non-blocking ingest.

    Args:
        name: The instance name.
        operator: The catalog operator name.
        params: The catalog parameters as given.
        pipeline: The running pipeline.
        capacity: ESG_in's capacity, the ingest admission bound.
        metrics: The service's metrics.
        limits: The service's limits on buffered rows.
        one_stream: The operator joins one stream with itself (catalog ``one_stream``):
            clients send it as source 0, which feeds every pipeline source.

    """

    def __init__(
        self,
        name: str,
        operator: str,
        params: Mapping[str, Any],
        pipeline: Pipeline,
        capacity: int,
        metrics: ServiceMetrics,
        limits: ServiceLimits,
        *,
        one_stream: bool = False,
    ) -> None:
        self.name = name
        self.operator = operator
        self.params = dict(params)
        self.pipeline = pipeline
        self.capacity = capacity
        inputs = range(pipeline.op.n_inputs)
        self.feeds = (tuple(inputs),) if one_stream else tuple((i,) for i in inputs)
        """The pipeline sources each REST source feeds."""
        # A one-stream batch goes into every pipeline source it feeds, so it takes their room.
        self.max_batch_rows = min(capacity // len(self.feeds[0]), limits.max_held_rows)
        self.limits = limits
        self.threads = pipeline.max_parallelism + 2  # the pool, the drainer, the observer
        self.sources = [SourceCounters() for _ in self.feeds]
        self.metrics = metrics
        self._clock = ArrivalClock(len(self.sources))
        latency = metrics.output_latency.labels(name)
        self._observer = LatencyObserver(
            pipeline, self._clock, latency.observe, name=f"api-{name}-latency"
        )
        self._observer.start()
        self.autoscaler = OperatorAutoscaler(name, pipeline, self._change)
        self.journal: OperatorJournal | None = None  # set when the service is durable
        self.committed_cut: tuple[int, ...] | None = None
        """The latest cut a sharded reader committed here (``commit``)."""
        self.checkpoints: deque[CheckpointInfo] = deque(maxlen=KEPT_CHECKPOINTS)
        self._listeners: list[Callable[[], None]] = []
        self._listeners_lock = threading.Lock()
        self._stopped = False

    @contextmanager
    def _change(self) -> Iterator[JournalWriter]:
        """Hold the ingest gate while changing the operator; yield a journal writer.

        The writer appends a record (ahead of the change, under the caller's lock); on
        leaving, by an exception too (a refusal that was counted), the last record written
        is made durable (group commit) after the gate is released, so the caller answers
        only once it is on disk.
        """
        journal = self.journal
        if journal is None:

            def ignore(header: dict[str, Any], table: pa.Table | None) -> None:
                return None

            yield ignore
            return
        written: list[int] = []

        def log(header: dict[str, Any], table: pa.Table | None) -> None:
            written.append(journal.log(header, table))

        try:
            with journal.ingest.shared():
                yield log
        finally:
            if written:
                journal.sync(written[-1])

    @property
    def stopped(self) -> bool:
        """Whether the operator was stopped (deleted, or the service is shutting down)."""
        return self._stopped

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (quick, thread-safe) on output changes and when stopped."""
        with self._listeners_lock:
            self._listeners.append(listener)
        self.pipeline.subscribe(listener)

    def unsubscribe(self, listener: Callable[[], None]) -> None:
        """Stop calling ``listener``."""
        self.pipeline.unsubscribe(listener)
        with self._listeners_lock:
            self._listeners.remove(listener)

    def where(self, source: int) -> str:
        """A source's description for messages."""
        return f"source {source} of {self.name!r}"

    def source(self, source: int) -> SourceCounters:
        """The counters of ``source``.

        Raises:
            NotFoundError: no such source.

        """
        if not 0 <= source < len(self.sources):
            msg = f"operator {self.name!r} has sources 0..{len(self.sources) - 1}, not {source}"
            raise NotFoundError(msg)
        return self.sources[source]

    def committed_batch(self, source: int, writer: str) -> int:
        """The last batch staging writer ``writer`` committed to ``source`` (-1: none)."""
        return self.source(source).writers.get(writer, -1)

    def add_batch(
        self,
        source: int,
        batch_id: int | None,
        table: pa.Table,
        late: Literal["fail", "drop"] = "fail",
        writer: tuple[str, int] | None = None,
    ) -> tuple[Admission, bool]:
        """Add a batch (any order) unless its id was seen; return (admission, duplicate).

        ``writer`` is a staging writer's (id, batch): the batch is a duplicate if the
        writer committed it or a later one. With a journal, the admitted rows are logged
        ahead and on disk before this returns; so are the counts of a duplicate
        (``_count_duplicate``) or a batch refused as late (``_count_refused``).

        Raises:
            NotFoundError: no such source.
            ClosedError: the source is closed.
            TooLargeError: the batch is larger than ``max_batch_rows``.
            CapacityError: rows of the source's earlier batches still wait for ESG_in,
                or the output log or the reorder buffer is full (retry later).
            StoppedError: the operator was deleted meanwhile.
            SchemaError, LateTupleError: from the runtime; nothing was added.

        """
        counters = self.source(source)
        with counters.lock, self._change() as log:
            if self._count_duplicate(log, source, batch_id, writer):
                return Admission(0), True
            rows = table.num_rows
            if rows > self.max_batch_rows:
                msg = (
                    f"{self.where(source)}: a batch of {rows} rows can never fit; the largest "
                    f"batch this operator takes is {self.max_batch_rows} rows (its ingest "
                    "capacity); split it"
                )
                raise TooLargeError(msg)
            feeds = self.feeds[source]
            arrival_s = time.time()

            def journal(data: pa.Table) -> None:
                header = {
                    "kind": "batch",
                    "source": source,
                    "batch_id": batch_id,
                    "writer": None if writer is None else list(writer),
                    "dropped": rows - data.num_rows,
                }
                log(header, data)

            try:
                admission = self.pipeline.add(feeds[0], table, late, on_admit=journal)
            except LateTupleError as exc:
                self._count_refused(log, source, late_tuples=exc.rows or rows)
                raise
            for other in feeds[1:]:  # the same rows, so the same lateness: they go in
                self.pipeline.add(other, table, late)
            counters.added(batch_id, writer, admission.accepted, admission.dropped)
            if admission.min_ts is not None:
                self._clock.record(source, admission.min_ts, arrival_s)
            return admission, False

    def acknowledge_duplicate(self, source: int, writer: tuple[str, int]) -> bool:
        """Count a staging writer's batch as a duplicate if it was committed before.

        A commit of such a batch adds nothing (``api.staging``), and counts as a resent
        ``batch_id`` does in ``add_batch``: on disk before this returns, with a journal.

        Returns:
            Whether it was a duplicate (counted); False: a new batch, nothing changed.

        Raises:
            NotFoundError: no such source.

        """
        counters = self.source(source)
        with counters.lock, self._change() as log:
            return self._count_duplicate(log, source, None, writer)

    def _count_duplicate(
        self,
        log: JournalWriter,
        source: int,
        batch_id: int | None,
        writer: tuple[str, int] | None,
    ) -> bool:
        """Count the batch as a duplicate if ``source`` saw it; return whether it did."""
        if not self.sources[source].seen(batch_id, writer):
            return False
        self._count_refused(log, source, duplicate_batches=1)
        return True

    def _count_refused(
        self, log: JournalWriter, source: int, late_tuples: int = 0, duplicate_batches: int = 0
    ) -> None:
        """Count a batch of ``source`` whose rows are not applied: refused late, or a duplicate.

        No batch record holds it, so a ``counted`` record is logged ahead for a restore to
        count it again (the caller holds the source's counters' lock).
        """
        log(
            {
                "kind": "counted",
                "source": source,
                "late_tuples": late_tuples,
                "duplicate_batches": duplicate_batches,
            },
            None,
        )
        self.sources[source].count(late_tuples, duplicate_batches)

    def set_allowed_lateness(self, source: int, allowed_lateness_ms: int) -> None:
        """Let rows of ``source`` arrive this far behind its largest ``ts`` from now on."""
        counters = self.source(source)
        with counters.lock, self._change() as log:
            log({"kind": "lateness", "source": source, "ms": allowed_lateness_ms}, None)
            for fed in self.feeds[source]:
                self.pipeline.set_allowed_lateness(fed, allowed_lateness_ms)

    def watermark(self, source: int, ts: int) -> None:
        """Promise no later tuple of ``source`` before ``ts``."""
        counters = self.source(source)
        with counters.lock, self._change() as log:
            log({"kind": "watermark", "source": source, "ts": ts}, None)
            for fed in self.feeds[source]:
                self.pipeline.watermark(fed, ts)

    def close(self, source: int) -> None:
        """End of input for ``source`` (closing twice is a no-op)."""
        counters = self.source(source)
        with counters.lock, self._change() as log:
            log({"kind": "close", "source": source}, None)
            for fed in self.feeds[source]:
                self.pipeline.close(fed)

    def commit(self, offset: int, cut: Sequence[int] | None = None) -> None:
        """The reader consumed the output before ``offset``; the log may trim it.

        An offset beyond the log's end is kept and applied once the output gets there
        (after a restart the output is produced again, and may be behind what a reader
        read before the crash). A shard's commit may carry the sharded reader's ``cut``,
        every shard's offset of the merged position committed (``offset`` is this
        shard's): the shard keeps the latest (``committed_cut``), so that a new reader
        resumes there even if the commit failed on other shards.

        Raises:
            InputError: a cut for an operator that is not a shard, of the wrong length, or
                whose entry for this shard is not ``offset``.

        """
        if cut is not None:
            cut = self._checked_cut(offset, cut)
        with self._change() as log:
            log({"kind": "commit", "offset": offset, "cut": cut}, None)
            self.pipeline.commit(offset, when_produced=True)
            self.keep_cut(cut)

    def keep_cut(self, cut: Sequence[int] | None) -> None:
        """Keep ``cut`` as ``committed_cut`` if it is later than the one kept."""
        if cut is not None and (self.committed_cut is None or sum(cut) > sum(self.committed_cut)):
            self.committed_cut = tuple(cut)

    def _checked_cut(self, offset: int, cut: Sequence[int]) -> tuple[int, ...]:
        shard = self.pipeline.settings.shard
        if shard is None:
            msg = f"operator {self.name!r} is not a shard: a commit carries no cut"
            raise InputError(msg)
        if len(cut) != shard.count or cut[shard.index] != offset:
            msg = (
                f"operator {self.name!r} is shard {shard.index} of {shard.count}: a commit's "
                f"cut has {shard.count} offsets and offset {offset} at index {shard.index}, "
                f"got {list(cut)}"
            )
            raise InputError(msg)
        return tuple(cut)

    def reconfigure(self, parallelism: int | None, mapping: list[int] | None) -> int:
        """Queue a reconfiguration (``Pipeline.reconfigure``); return its epoch."""
        with self._change() as log:
            epoch = self.pipeline.reconfigure(parallelism, mapping)
            log({"kind": "reconfigure", "parallelism": parallelism, "mapping": mapping}, None)
            return epoch

    def reconfigurations(self) -> tuple[ReconfigurationStatus, ...]:
        """Every reconfiguration requested so far."""
        return self.pipeline.reconfigurations()

    def shutdown(self) -> None:
        """Wake the listeners, then stop the autoscaler, the threads and the latency observer.

        Nothing is journaled: a durable operator comes back as it was.
        """
        with self._listeners_lock:
            self._stopped = True
            listeners = list(self._listeners)
        for listener in listeners:
            listener()
        self.autoscaler.stop()
        self.pipeline.shutdown()
        self._observer.stop()
        if self.journal is not None:
            self.journal.close()
        self.metrics.forget(self.name)
