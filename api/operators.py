"""The operators the service runs: one VSN pipeline per name, and what HTTP adds to it.

HTTP adds three things to a ``stretch`` pipeline: idempotent batches (a ``batch_id`` seen
before on a source is acknowledged and ignored, since Spark's ``foreachBatch`` is
at-least-once), admission that never blocks a server thread (a batch is taken when the
rows of the source's earlier batches are all in ESG_in; rows that do not fit at once wait
in the source and go in as readers free room; otherwise ``CapacityError`` -> 429, nothing
is dropped and the client retries), and per-source counters for the status and the
metrics. A self-join declared ``one_stream``
in the catalog (hedge) has one REST source whose batches feed both its pipeline sources.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from api.batch_ids import BatchIds
from api.errors import ConflictError, LimitError, NotFoundError, TooLargeError
from api.latency import ArrivalClock, LatencyObserver
from api.limits import ServiceLimits
from api.metrics import OperatorSnapshot, ServiceMetrics
from controller import Autoscaler, PolicyConfig, autoscale
from stretch.errors import CapacityError, LateTupleError, OperatorError
from stretch.model.schema import TS, conform
from stretch.operators.catalog import CATALOG, build
from stretch.vsn import setup
from stretch.vsn.pipeline import Pipeline
from stretch.vsn.reconfiguration import ReconfigurationRecord

__all__ = ["ManagedOperator", "OperatorRegistry", "SourceCounters"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_PARALLELISM = 4

MAX_PENDING_RECONFIGURATIONS = 100
"""Reconfigurations of one operator that may wait for their barrier; more get 429."""


@dataclass
class SourceCounters:
    """What one source received over HTTP, and the batch ids it has seen."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    batch_ids: BatchIds = field(default_factory=BatchIds)
    tuples_in: int = 0
    batches: int = 0
    duplicate_batches: int = 0
    late_tuples: int = 0


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
        pipeline.max_pending_reconfigurations = MAX_PENDING_RECONFIGURATIONS
        self.capacity = capacity
        inputs = range(len(pipeline.sources))
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
            pipeline.log, self._clock, latency.observe, name=f"api-{name}-latency"
        )
        self._observer.start()
        self._autoscaler: Autoscaler | None = None
        self._autoscale_lock = threading.Lock()

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

    def _check_open(self, source: int) -> None:
        if self.pipeline.sources[self._feeds[source][0]].input_closed:
            msg = f"{self.where(source)} is closed; it takes no more input"
            raise ConflictError(msg)

    def add_batch(self, source: int, batch_id: int | None, table: pa.Table) -> tuple[int, bool]:
        """Add a ts-sorted batch unless its id was seen; return (rows added, duplicate).

        Raises:
            NotFoundError: no such source.
            ConflictError: the source is closed.
            TooLargeError: the batch is larger than ``max_batch_rows``.
            CapacityError: rows of the source's earlier batches still wait for ESG_in,
                or the output log or the reorder buffer is full (retry later).
            StoppedError: the operator was deleted meanwhile.
            SchemaError, LateTupleError: from the runtime; nothing was added.

        """
        counters = self.source(source)
        with counters.lock:
            if batch_id is not None and batch_id in counters.batch_ids:
                counters.duplicate_batches += 1
                self._metrics.duplicate_batches.labels(self.name, str(source)).inc()
                return 0, True
            self._check_open(source)
            feeds = self._feeds[source]
            first = feeds[0]
            rows = table.num_rows
            if rows > self.max_batch_rows:
                msg = (
                    f"{self.where(source)}: a batch of {rows} rows can never fit; the largest "
                    f"batch this operator takes is {self.max_batch_rows} rows (its ingest "
                    "capacity); split it"
                )
                raise TooLargeError(msg)
            waiting = max(self.pipeline.backlog(fed) for fed in feeds)
            if waiting:
                msg = (
                    f"{self.where(source)}: {waiting} rows of earlier batches still wait for "
                    "room in the ingest gate (for readers, or for the other sources to catch "
                    "up); retry later"
                )
                raise CapacityError(msg)
            table = conform(table, self.pipeline.sources[first].schema, self.where(source))
            self._check_buffers(first, table)
            arrival_s = time.time()
            try:
                added = self.pipeline.add(first, table)
            except LateTupleError:
                late = self._late_rows(first, table)
                counters.late_tuples += late
                self._metrics.late_tuples.labels(self.name, str(source)).inc(late)
                raise
            for other in feeds[1:]:  # the same rows, so the same lateness: they go in
                self.pipeline.add(other, table)
            if batch_id is not None:
                counters.batch_ids.add(batch_id)
            counters.batches += 1
            counters.tuples_in += added
            self._metrics.tuples_in.labels(self.name, str(source)).inc(added)
            if added:
                self._clock.record(source, int(table.column(TS)[0].as_py()), arrival_s)
            return added, False

    def _check_buffers(self, source: int, table: pa.Table) -> None:
        """Refuse a batch while the output log or the source's reorder buffer is full.

        Raises:
            CapacityError: the log holds ``max_uncommitted_rows`` uncommitted rows, or the
                reorder buffer would hold more than ``max_held_rows`` after the batch.

        """
        log = self.pipeline.log
        uncommitted = log.end_offset - log.start_offset
        if uncommitted >= self.limits.max_uncommitted_rows:
            msg = (
                f"{self.where(source)}: the output log holds {uncommitted} rows not committed "
                f"(limit {self.limits.max_uncommitted_rows}); read the output and commit it "
                "(POST .../output/commit), then retry"
            )
            raise CapacityError(msg)
        reorder = self.pipeline.sources[source].reorder
        held = reorder.held_after(table.column(TS).to_numpy())
        if held > self.limits.max_held_rows:
            msg = (
                f"{self.where(source)}: its reorder buffer would hold {held} rows (limit "
                f"{self.limits.max_held_rows}) waiting for the released watermark "
                f"(largest ts - allowed lateness {reorder.allowed_lateness_ms} ms); send a "
                "watermark (POST .../watermark) to release them, then retry"
            )
            raise CapacityError(msg)

    def _late_rows(self, source: int, table: pa.Table) -> int:
        """Rows of a rejected batch older than the source's released watermark."""
        released = self.pipeline.sources[source].reorder.released
        ts = table.column(TS).to_numpy()
        return int((ts < released).sum()) or int(table.num_rows)

    def watermark(self, source: int, ts: int) -> None:
        """Promise no later tuple of ``source`` before ``ts``."""
        counters = self.source(source)
        with counters.lock:
            self._check_open(source)
            for fed in self._feeds[source]:
                self.pipeline.watermark(fed, ts)

    def close(self, source: int) -> None:
        """End of input for ``source`` (closing twice is a no-op)."""
        counters = self.source(source)
        with counters.lock:
            for fed in self._feeds[source]:
                self.pipeline.close(fed)

    def reconfigurations(self) -> list[ReconfigurationRecord]:
        """Every reconfiguration requested so far."""
        return self.pipeline.reconfigurations()

    def set_autoscale(self, config: PolicyConfig) -> dict[str, Any]:
        """Put the operator under ``config``'s controller, replacing one it had.

        Raises:
            OperatorError: ``config`` does not fit the pool (the message names the field).

        """
        with self._autoscale_lock:
            try:
                scaler = autoscale(self.pipeline, config)
            except ValueError as exc:
                msg = f"autoscale of {self.name!r}: {exc}"
                raise OperatorError(msg) from exc
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
        with self._autoscale_lock:
            scaler, self._autoscaler = self._autoscaler, None
        if scaler is not None:
            scaler.stop()
            logger.info("operator %r: autoscale off", self.name)

    def snapshot(self) -> OperatorSnapshot:
        """The metrics collector's view of this operator."""
        stats = self.pipeline.stats()
        return OperatorSnapshot(
            name=self.name,
            tuples_out=stats["output"]["end_offset"],
            epoch=stats["epoch"],
            active_instances=stats["parallelism"],
            esg_in_occupancy=stats["esg_in"]["occupancy"],
            esg_out_occupancy=stats["esg_out"]["occupancy"],
            comparisons=sum(i["comparisons"] for i in stats["instances"]),
            instance_busy_s=[i["busy_s"] for i in stats["instances"]],
            autoscale_decisions=dict(self._autoscaler.decisions) if self._autoscaler else {},
            reconfiguration_s=[
                r["duration_ms"] / 1e3
                for r in stats["reconfigurations"]
                if r["duration_ms"] is not None
            ],
        )

    def status(self) -> dict[str, Any]:
        """The body of ``GET /v1/operators/{name}``."""
        stats = self.pipeline.stats()
        log = self.pipeline.log
        sources = [
            {
                "index": i,
                "watermark": stats["watermarks"][self._feeds[i][0]],
                "closed": self.pipeline.sources[self._feeds[i][0]].input_closed,
                "tuples_in": c.tuples_in,
                "batches": c.batches,
                "duplicate_batches": c.duplicate_batches,
                "late_tuples": c.late_tuples,
            }
            for i, c in enumerate(self.sources)
        ]
        return {
            "name": self.name,
            "operator": self.operator,
            "params": self.params,
            "epoch": stats["epoch"],
            "parallelism": stats["parallelism"],
            "max_parallelism": stats["max_parallelism"],
            "max_batch_rows": self.max_batch_rows,
            "mapping": list(self.pipeline.pool.current.mapping),
            "watermarks": [stats["watermarks"][feeds[0]] for feeds in self._feeds],
            "sources": sources,
            "instances": stats["instances"],
            "output": {
                "start_offset": log.start_offset,
                "end_offset": log.end_offset,
                "finished": log.finished,
            },
            "counters": {
                "tuples_in": sum(c.tuples_in for c in self.sources),
                "tuples_out": log.end_offset,
                "late_tuples": sum(c.late_tuples for c in self.sources),
                "duplicate_batches": sum(c.duplicate_batches for c in self.sources),
                "esg_in_occupancy": stats["esg_in"]["occupancy"],
            },
        }

    def shutdown(self) -> None:
        """Stop the autoscaler, the pipeline's threads and the latency observer."""
        self.clear_autoscale()
        self.pipeline.shutdown()
        self.pipeline.log.finish()
        self._observer.stop()
        self._metrics.forget(self.name, len(self.sources))


class OperatorRegistry:
    """The named operators of one app.

    Args:
        metrics: The service's metrics.
        limits: What the service holds at most.

    """

    def __init__(self, metrics: ServiceMetrics, limits: ServiceLimits) -> None:
        self._metrics = metrics
        self.limits = limits
        self._operators: dict[str, ManagedOperator] = {}
        self._lock = threading.Lock()

    def create(
        self,
        name: str,
        operator: str,
        params: Mapping[str, Any],
        parallelism: int,
        max_parallelism: int | None,
        capacity: int,
        allowed_lateness_ms: int = 0,
        policy: PolicyConfig | None = None,
    ) -> ManagedOperator:
        """Build catalog operator ``operator`` and start it under ``name``.

        With ``policy`` it starts autoscaled (as ``set_autoscale``).

        Raises:
            ConflictError: ``name`` is taken.
            LimitError: the operator would pass the service's operators or threads limit.
            OperatorError: unknown operator or parameter, or forward without ``columns``.
            ReconfigurationError: parallelism outside ``1..max_parallelism``.
            OperatorError: an autoscale policy that does not fit the pool.

        """
        if operator == "forward" and "columns" not in params:
            msg = (
                "operator 'forward' needs the parameter 'columns' naming the payload "
                "columns, e.g. {'columns': 'v:int,w:float'}"
            )
            raise OperatorError(msg)
        with self._lock:
            if name in self._operators:
                msg = f"an operator named {name!r} already exists; delete it first"
                raise ConflictError(msg)
            op = build(operator, params)
            n = max_parallelism or max(parallelism, DEFAULT_MAX_PARALLELISM)
            self._check_limits(name, n)
            pipeline = setup(
                op, parallelism, n, capacity=capacity, allowed_lateness_ms=allowed_lateness_ms
            )
            managed = ManagedOperator(
                name,
                operator,
                params,
                pipeline,
                capacity,
                self._metrics,
                self.limits,
                one_stream=CATALOG[operator].one_stream,
            )
            if policy is not None:
                try:
                    managed.set_autoscale(policy)
                except OperatorError:
                    managed.shutdown()
                    raise
            self._operators[name] = managed
        logger.info("started operator %r (%s, m=%d, n=%d)", name, operator, parallelism, n)
        return managed

    def _check_limits(self, name: str, n: int) -> None:
        """Raise ``LimitError`` if operator ``name`` of pool size n passes a limit."""
        limits = self.limits
        if len(self._operators) >= limits.max_operators:
            msg = (
                f"operator {name!r}: the service runs {len(self._operators)} operators, its "
                f"limit (--max-operators {limits.max_operators}); delete one first"
            )
            raise LimitError(msg)
        threads = sum(op.threads for op in self._operators.values())
        if threads + n + 2 > limits.max_pool_threads:
            msg = (
                f"operator {name!r}: a pool of {n} costs {n + 2} threads and the operators "
                f"use {threads} of the service's {limits.max_pool_threads} "
                "(--max-pool-threads); lower max_parallelism or delete an operator"
            )
            raise LimitError(msg)

    def get(self, name: str) -> ManagedOperator:
        """The operator named ``name``.

        Raises:
            NotFoundError: no such operator.

        """
        with self._lock:
            managed = self._operators.get(name)
        if managed is None:
            msg = f"no operator named {name!r}"
            raise NotFoundError(msg)
        return managed

    def all(self) -> list[ManagedOperator]:
        """Every operator, by name."""
        with self._lock:
            return [self._operators[k] for k in sorted(self._operators)]

    def snapshots(self) -> list[OperatorSnapshot]:
        """Every operator's metrics snapshot."""
        return [op.snapshot() for op in self.all()]

    def delete(self, name: str) -> None:
        """Stop and forget the operator named ``name``.

        Raises:
            NotFoundError: no such operator.

        """
        with self._lock:
            managed = self._operators.pop(name, None)
        if managed is None:
            msg = f"no operator named {name!r}"
            raise NotFoundError(msg)
        managed.shutdown()
        logger.info("deleted operator %r", name)

    def shutdown(self) -> None:
        """Stop every operator."""
        with self._lock:
            operators = list(self._operators.values())
            self._operators.clear()
        for managed in operators:
            managed.shutdown()
