"""The operators the service runs: one VSN pipeline per name, and what HTTP adds to it.

HTTP adds three things to a ``stretch`` pipeline: idempotent batches (a ``batch_id`` seen
before on a source is acknowledged and ignored, since Spark's ``foreachBatch`` is
at-least-once), settings that make the runtime's admission refuse rather than queue (a
batch is taken when the rows of the source's earlier batches are all in ESG_in, else
``CapacityError`` -> 429 and the client retries; the runtime decides, under its own lock),
and per-source counters for the status and the metrics. A self-join declared
``one_stream`` in the catalog (hedge) has one REST source whose batches feed both its
pipeline sources. A deleted operator wakes its output's listeners (the long-polls) at once,
before its threads are stopped, so that they answer 404 instead of waiting out their time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import pyarrow as pa

from stretch.api.batch_ids import BatchIds
from stretch.api.durability import OperatorJournal, checkpoint_contents
from stretch.api.errors import ConflictError, NotFoundError, TooLargeError
from stretch.api.latency import ArrivalClock, LatencyObserver
from stretch.api.limits import ServiceLimits
from stretch.api.mapping import FullMapping, summarize
from stretch.api.metrics import OperatorSnapshot, ServiceMetrics, SourceSnapshot
from stretch.api.schemas import (
    CheckpointInfo,
    InstanceStatus,
    OperatorCounters,
    OperatorStatus,
    OutputStatus,
    ShardRequest,
    SourceStatus,
)
from stretch.controller import Autoscaler, PolicyConfig, autoscale
from stretch.errors import LateTupleError, OperatorError, StretchError
from stretch.vsn import Admission, Pipeline, ReconfigurationStatus

__all__ = ["ManagedOperator", "SourceCounters"]

logger = logging.getLogger(__name__)

KEPT_CHECKPOINTS = 100
"""Checkpoint records an operator keeps for ``GET .../checkpoints`` (the most recent)."""

_Log = Callable[[dict[str, Any], pa.Table | None], None]
"""Appends a journal record (a header and rows, if any) ahead of a change."""


@dataclass
class SourceCounters:
    """What one source received over HTTP, and the batch ids it has seen."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    batch_ids: BatchIds = field(default_factory=BatchIds)
    tuples_in: int = 0
    batches: int = 0
    duplicate_batches: int = 0
    late_tuples: int = 0
    writers: dict[str, int] = field(default_factory=dict)
    """Each staging writer's last committed batch (its later batches are new)."""


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
        self._feeds = (tuple(inputs),) if one_stream else tuple((i,) for i in inputs)
        # A one-stream batch goes into every pipeline source it feeds, so it takes their room.
        self.max_batch_rows = min(capacity // len(self._feeds[0]), limits.max_held_rows)
        self.limits = limits
        self.threads = pipeline.max_parallelism + 2  # the pool, the drainer, the observer
        self.sources = [SourceCounters() for _ in self._feeds]
        self._metrics = metrics
        self._clock = ArrivalClock(len(self.sources))
        latency = metrics.output_latency.labels(name)
        self._observer = LatencyObserver(
            pipeline, self._clock, latency.observe, name=f"api-{name}-latency"
        )
        self._observer.start()
        self._autoscaler: Autoscaler | None = None
        self._autoscale_lock = threading.Lock()
        self.journal: OperatorJournal | None = None  # set when the service is durable
        self.checkpoints: deque[CheckpointInfo] = deque(maxlen=KEPT_CHECKPOINTS)
        self._listeners: list[Callable[[], None]] = []
        self._listeners_lock = threading.Lock()
        self._stopped = False

    @contextmanager
    def _change(self) -> Iterator[_Log]:
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
        ahead and on disk before this returns; so are the counts of a duplicate or a
        batch refused as late (``_count_refused``).

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
            if (batch_id is not None and batch_id in counters.batch_ids) or (
                writer is not None and writer[1] <= counters.writers.get(writer[0], -1)
            ):
                self._count_refused(log, source, duplicate_batches=1)
                return Admission(0), True
            rows = table.num_rows
            if rows > self.max_batch_rows:
                msg = (
                    f"{self.where(source)}: a batch of {rows} rows can never fit; the largest "
                    f"batch this operator takes is {self.max_batch_rows} rows (its ingest "
                    "capacity); split it"
                )
                raise TooLargeError(msg)
            feeds = self._feeds[source]
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
            if admission.dropped:
                self._count(source, late_tuples=admission.dropped)
            if batch_id is not None:
                counters.batch_ids.add(batch_id)
            if writer is not None:
                counters.writers[writer[0]] = writer[1]
            counters.batches += 1
            counters.tuples_in += admission.accepted
            if admission.min_ts is not None:
                self._clock.record(source, admission.min_ts, arrival_s)
            return admission, False

    def _count(self, source: int, late_tuples: int = 0, duplicate_batches: int = 0) -> None:
        """Count late rows and duplicate batches of ``source`` (its counters' lock held)."""
        counters = self.sources[source]
        counters.late_tuples += late_tuples
        counters.duplicate_batches += duplicate_batches

    def _count_refused(
        self, log: _Log, source: int, late_tuples: int = 0, duplicate_batches: int = 0
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
        self._count(source, late_tuples, duplicate_batches)

    def set_allowed_lateness(self, source: int, allowed_lateness_ms: int) -> None:
        """Let rows of ``source`` arrive this far behind its largest ``ts`` from now on."""
        counters = self.source(source)
        with counters.lock, self._change() as log:
            log({"kind": "lateness", "source": source, "ms": allowed_lateness_ms}, None)
            for fed in self._feeds[source]:
                self.pipeline.set_allowed_lateness(fed, allowed_lateness_ms)

    def watermark(self, source: int, ts: int) -> None:
        """Promise no later tuple of ``source`` before ``ts``."""
        counters = self.source(source)
        with counters.lock, self._change() as log:
            log({"kind": "watermark", "source": source, "ts": ts}, None)
            for fed in self._feeds[source]:
                self.pipeline.watermark(fed, ts)

    def close(self, source: int) -> None:
        """End of input for ``source`` (closing twice is a no-op)."""
        counters = self.source(source)
        with counters.lock, self._change() as log:
            log({"kind": "close", "source": source}, None)
            for fed in self._feeds[source]:
                self.pipeline.close(fed)

    def commit(self, offset: int) -> None:
        """The reader consumed the output before ``offset``; the log may trim it.

        An offset beyond the log's end is kept and applied once the output gets there
        (after a restart the output is produced again, and may be behind what a reader
        read before the crash).
        """
        with self._change() as log:
            log({"kind": "commit", "offset": offset}, None)
            self.pipeline.commit(offset, when_produced=True)

    def reconfigure(self, parallelism: int | None, mapping: list[int] | None) -> int:
        """Queue a reconfiguration (``Pipeline.reconfigure``); return its epoch."""
        with self._change() as log:
            epoch = self.pipeline.reconfigure(parallelism, mapping)
            log({"kind": "reconfigure", "parallelism": parallelism, "mapping": mapping}, None)
            return epoch

    def reconfigurations(self) -> tuple[ReconfigurationStatus, ...]:
        """Every reconfiguration requested so far."""
        return self.pipeline.reconfigurations()

    def set_autoscale(self, config: PolicyConfig) -> dict[str, Any]:
        """Put the operator under ``config``'s controller, replacing one it had.

        Raises:
            OperatorError: ``config`` does not fit the pool (the message names the field).

        """
        with self._autoscale_lock, self._change() as log:
            try:
                scaler = autoscale(self.pipeline, config)
            except ValueError as exc:
                msg = f"autoscale of {self.name!r}: {exc}"
                raise OperatorError(msg) from exc
            log({"kind": "autoscale", "config": asdict(config)}, None)
            old, self._autoscaler = self._autoscaler, scaler
        if old is not None:
            old.stop()
        logger.info("operator %r: autoscale %s", self.name, config.policy)
        return self.autoscale_state()

    def autoscale_state(self) -> dict[str, Any]:
        """The autoscaler's policy, bounds and last decision.

        Raises:
            NotFoundError: the operator is reconfigured manually (no autoscaler).

        """
        scaler = self._autoscaler
        if scaler is None:
            msg = f"operator {self.name!r} has no autoscaler; PUT one to start it"
            raise NotFoundError(msg)
        config = scaler.config
        low, high = config.bounds(self.pipeline.max_parallelism)
        records = list(scaler.records)
        last = records[-1] if records else None
        return {
            "policy": config.policy,
            "upper": config.upper,
            "target": config.target,
            "lower": config.lower,
            "period_ms": config.period_ms,
            "min_parallelism": low,
            "max_parallelism": high,
            "decisions": sum(scaler.decisions.values()),
            "reconfigurations": scaler.reconfigurations,
            "last_decision": None
            if last is None
            else {
                "kind": last.decision.kind,
                "parallelism": last.decision.parallelism,
                "reason": last.decision.reason,
                "load": last.decision.load,
                "applied": last.applied,
                "epoch": last.epoch,
                "error": last.error,
            },
        }

    def clear_autoscale(self) -> None:
        """Stop the autoscaler, if any: back to manual reconfiguration."""
        with self._autoscale_lock, self._change() as log:
            scaler, self._autoscaler = self._autoscaler, None
            if scaler is not None:
                log({"kind": "autoscale", "config": None}, None)
        if scaler is not None:
            scaler.stop()
            logger.info("operator %r: autoscale off", self.name)

    def snapshot(self) -> OperatorSnapshot:
        """The metrics collector's view of this operator."""
        status = self.pipeline.status()
        return OperatorSnapshot(
            name=self.name,
            tuples_out=status.output.end_offset,
            epoch=status.epoch,
            active_instances=status.parallelism,
            esg_in_occupancy=status.esg_in.occupancy,
            esg_out_occupancy=status.esg_out.occupancy,
            comparisons=sum(i.comparisons for i in status.instances),
            instance_busy_s=[i.busy_s for i in status.instances],
            autoscale_decisions=dict(self._autoscaler.decisions) if self._autoscaler else {},
            reconfiguration_s=[
                r.duration_ms / 1e3 for r in status.reconfigurations if r.duration_ms is not None
            ],
            dictionary_bytes=status.dictionary_bytes,
            sources=[
                SourceSnapshot(c.tuples_in, c.late_tuples, c.duplicate_batches)
                for c in self.sources
            ],
        )

    def mapping(self) -> FullMapping:
        """The body of ``GET /v1/operators/{name}/mapping``: f_mu in force, every entry."""
        status = self.pipeline.status()
        return FullMapping(
            epoch=status.epoch, parallelism=status.parallelism, mapping=list(status.mapping)
        )

    def status(self) -> OperatorStatus:
        """The body of ``GET /v1/operators/{name}``."""
        status = self.pipeline.status()
        output = status.output
        shard = self.pipeline.settings.shard
        sources = [
            SourceStatus(
                index=i,
                watermark=status.sources[feeds[0]].watermark,
                closed=status.sources[feeds[0]].closed,
                tuples_in=c.tuples_in,
                batches=c.batches,
                duplicate_batches=c.duplicate_batches,
                late_tuples=c.late_tuples,
            )
            for i, (c, feeds) in enumerate(zip(self.sources, self._feeds, strict=True))
        ]
        return OperatorStatus(
            name=self.name,
            operator=self.operator,
            params=self.params,
            epoch=status.epoch,
            parallelism=status.parallelism,
            max_parallelism=status.max_parallelism,
            max_batch_rows=self.max_batch_rows,
            mapping=summarize(status.mapping, status.parallelism, shard),
            watermarks=[s.watermark for s in sources],
            sources=sources,
            instances=[InstanceStatus.model_validate(asdict(i)) for i in status.instances],
            output=OutputStatus(
                start_offset=output.start_offset,
                end_offset=output.end_offset,
                finished=output.finished,
                watermark=output.watermark,
            ),
            counters=OperatorCounters(
                tuples_in=sum(c.tuples_in for c in self.sources),
                tuples_out=output.end_offset,
                late_tuples=sum(c.late_tuples for c in self.sources),
                duplicate_batches=sum(c.duplicate_batches for c in self.sources),
                esg_in_occupancy=status.esg_in.occupancy,
            ),
            shard=None if shard is None else ShardRequest(index=shard.index, count=shard.count),
        )

    # -- durability (api.durability) ---------------------------------------------------

    def checkpoint(self) -> CheckpointInfo:
        """Checkpoint the operator now: snapshot under the gate, then write the files.

        Raises:
            ConflictError: the service keeps no state (no ``--state-dir``).
            CapacityError: requests held the operator too long (retry).

        """
        journal = self.journal
        if journal is None:
            msg = (
                f"operator {self.name!r} is not durable: start the service with --state-dir "
                "to checkpoint it"
            )
            raise ConflictError(msg)
        started = time.perf_counter()
        with journal.ingest.exclusive():
            lsn = journal.journal.rotate()
            snapshot = self.pipeline.snapshot()
            service = self._service_state()
        pause_s = time.perf_counter() - started
        meta, tables = checkpoint_contents(snapshot, service)
        size = journal.write_checkpoint(lsn, meta, tables, pause_s)
        duration_s = time.perf_counter() - started
        self._metrics.checkpoint_seconds.labels(self.name).observe(duration_s)
        info = CheckpointInfo(
            checkpoint=lsn,
            epoch=snapshot.epoch,
            bytes=size,
            duration_ms=duration_s * 1e3,
            pause_ms=pause_s * 1e3,
            time_s=time.time(),
        )
        self.checkpoints.append(info)
        logger.info(
            "operator %r: checkpoint %d, %d bytes in %.1f ms (paused %.1f ms)",
            self.name,
            lsn,
            size,
            info.duration_ms,
            info.pause_ms,
        )
        return info

    def _service_state(self) -> dict[str, Any]:
        """The service's part of a checkpoint: counters, batch ids, writers, autoscale."""
        scaler = self._autoscaler
        return {
            "sources": [
                {
                    "tuples_in": c.tuples_in,
                    "batches": c.batches,
                    "duplicate_batches": c.duplicate_batches,
                    "late_tuples": c.late_tuples,
                    "batch_ids": c.batch_ids.state(),
                    "writers": dict(c.writers),
                }
                for c in self.sources
            ],
            "autoscale": None if scaler is None else asdict(scaler.config),
        }

    def restore_service_state(self, state: dict[str, Any]) -> None:
        """Take back what ``_service_state`` saved (a restore, before any request)."""
        for counters, saved in zip(self.sources, state["sources"], strict=True):
            counters.tuples_in = int(saved["tuples_in"])
            counters.batches = int(saved["batches"])
            counters.duplicate_batches = int(saved["duplicate_batches"])
            counters.late_tuples = int(saved["late_tuples"])
            counters.batch_ids = BatchIds.from_state(saved["batch_ids"])
            counters.writers = {str(k): int(v) for k, v in saved["writers"].items()}
        if state.get("autoscale") is not None:
            self.set_autoscale(PolicyConfig(**state["autoscale"]))

    def replay(self, header: dict[str, Any], table: pa.Table | None) -> None:
        """Apply a journal record again (a restore, before any request, no journal).

        Raises:
            StretchError: a batch the operator cannot take again (the journal does not
                belong to it); other records that fail now failed then too and are skipped.

        """
        kind = header["kind"]
        source = int(header.get("source", 0))
        feeds = self._feeds[source] if kind != "commit" else ()
        if kind == "counted":
            self._count(source, int(header["late_tuples"]), int(header["duplicate_batches"]))
            return
        if kind == "batch":
            assert table is not None
            counters = self.sources[source]
            for fed in feeds:
                self.pipeline.add(fed, table, bounded=False)
            if header["batch_id"] is not None:
                counters.batch_ids.add(int(header["batch_id"]))
            if header["writer"] is not None:
                writer, batch = header["writer"]
                counters.writers[str(writer)] = int(batch)
            counters.batches += 1
            counters.tuples_in += table.num_rows
            counters.late_tuples += int(header["dropped"])
            return
        try:
            if kind == "watermark":
                for fed in feeds:
                    self.pipeline.watermark(fed, int(header["ts"]))
            elif kind == "close":
                for fed in feeds:
                    self.pipeline.close(fed)
            elif kind == "lateness":
                for fed in feeds:
                    self.pipeline.set_allowed_lateness(fed, int(header["ms"]))
            elif kind == "commit":
                self.pipeline.commit(int(header["offset"]), when_produced=True)
            elif kind == "reconfigure":
                self.pipeline.reconfigure(header["parallelism"], header["mapping"])
            elif kind == "autoscale":
                config = header["config"]
                if config is None:
                    self.clear_autoscale()
                else:
                    self.set_autoscale(PolicyConfig(**config))
        except StretchError as exc:
            logger.debug("operator %r: journal record %s skipped: %s", self.name, kind, exc)

    def shutdown(self) -> None:
        """Wake the listeners, then stop the autoscaler, the threads and the latency observer.

        Nothing is journaled: a durable operator comes back as it was.
        """
        with self._listeners_lock:
            self._stopped = True
            listeners = list(self._listeners)
        for listener in listeners:
            listener()
        with self._autoscale_lock:
            scaler, self._autoscaler = self._autoscaler, None
        if scaler is not None:
            scaler.stop()
        self.pipeline.shutdown()
        self._observer.stop()
        if self.journal is not None:
            self.journal.close()
        self._metrics.forget(self.name)
