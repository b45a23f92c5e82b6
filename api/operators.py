"""The operators the service runs: one VSN pipeline per name, and what HTTP adds to it.

HTTP adds three things to a ``stretch`` pipeline: idempotent batches (a ``batch_id`` seen
before on a source is acknowledged and ignored, since Spark's ``foreachBatch`` is
at-least-once), settings that make the runtime's admission refuse rather than queue (a
batch is taken when the rows of the source's earlier batches are all in ESG_in, else
``CapacityError`` -> 429 and the client retries; the runtime decides, under its own lock),
and per-source counters for the status and the metrics. A self-join declared
``one_stream`` in the catalog (hedge) has one REST source whose batches feed both its
pipeline sources.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import pyarrow as pa

from api.batch_ids import BatchIds
from api.errors import ConflictError, LimitError, NotFoundError, TooLargeError
from api.latency import ArrivalClock, LatencyObserver
from api.limits import ServiceLimits
from api.metrics import OperatorSnapshot, ServiceMetrics
from api.schemas import (
    InstanceStatus,
    OperatorCounters,
    OperatorStatus,
    OutputStatus,
    SourceStatus,
)
from controller import Autoscaler, PolicyConfig, autoscale
from stretch.errors import LateTupleError, OperatorError
from stretch.operators.catalog import CATALOG, build
from stretch.vsn import Admission, Pipeline, ReconfigurationStatus, RuntimeSettings, setup

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

    def add_batch(
        self,
        source: int,
        batch_id: int | None,
        table: pa.Table,
        late: Literal["fail", "drop"] = "fail",
    ) -> tuple[Admission, bool]:
        """Add a batch (any order) unless its id was seen; return (admission, duplicate).

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
        with counters.lock:
            if batch_id is not None and batch_id in counters.batch_ids:
                counters.duplicate_batches += 1
                self._metrics.duplicate_batches.labels(self.name, str(source)).inc()
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
            try:
                admission = self.pipeline.add(feeds[0], table, late)
            except LateTupleError as exc:
                self._count_late(source, exc.rows or rows)
                raise
            for other in feeds[1:]:  # the same rows, so the same lateness: they go in
                self.pipeline.add(other, table, late)
            if admission.dropped:
                self._count_late(source, admission.dropped)
            if batch_id is not None:
                counters.batch_ids.add(batch_id)
            counters.batches += 1
            counters.tuples_in += admission.accepted
            self._metrics.tuples_in.labels(self.name, str(source)).inc(admission.accepted)
            if admission.min_ts is not None:
                self._clock.record(source, admission.min_ts, arrival_s)
            return admission, False

    def _count_late(self, source: int, rows: int) -> None:
        """Count late rows of ``source`` (the caller holds its counters' lock)."""
        self.sources[source].late_tuples += rows
        self._metrics.late_tuples.labels(self.name, str(source)).inc(rows)

    def set_allowed_lateness(self, source: int, allowed_lateness_ms: int) -> None:
        """Let rows of ``source`` arrive this far behind its largest ``ts`` from now on."""
        for fed in self._feeds[source]:
            self.pipeline.set_allowed_lateness(fed, allowed_lateness_ms)

    def watermark(self, source: int, ts: int) -> None:
        """Promise no later tuple of ``source`` before ``ts``."""
        counters = self.source(source)
        with counters.lock:
            for fed in self._feeds[source]:
                self.pipeline.watermark(fed, ts)

    def close(self, source: int) -> None:
        """End of input for ``source`` (closing twice is a no-op)."""
        counters = self.source(source)
        with counters.lock:
            for fed in self._feeds[source]:
                self.pipeline.close(fed)

    def reconfigurations(self) -> tuple[ReconfigurationStatus, ...]:
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
        )

    def status(self) -> OperatorStatus:
        """The body of ``GET /v1/operators/{name}``."""
        status = self.pipeline.status()
        output = status.output
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
            mapping=list(status.mapping),
            watermarks=[s.watermark for s in sources],
            sources=sources,
            instances=[InstanceStatus.model_validate(asdict(i)) for i in status.instances],
            output=OutputStatus(
                start_offset=output.start_offset,
                end_offset=output.end_offset,
                finished=output.finished,
            ),
            counters=OperatorCounters(
                tuples_in=sum(c.tuples_in for c in self.sources),
                tuples_out=output.end_offset,
                late_tuples=sum(c.late_tuples for c in self.sources),
                duplicate_batches=sum(c.duplicate_batches for c in self.sources),
                esg_in_occupancy=status.esg_in.occupancy,
            ),
        )

    def shutdown(self) -> None:
        """Stop the autoscaler, the pipeline's threads and the latency observer."""
        self.clear_autoscale()
        self.pipeline.shutdown()
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
            settings = RuntimeSettings(
                capacity=capacity,
                allowed_lateness_ms=allowed_lateness_ms,
                max_held_rows=self.limits.max_held_rows,
                max_uncommitted_rows=self.limits.max_uncommitted_rows,
                refuse_behind_backlog=True,
                max_pending_reconfigurations=MAX_PENDING_RECONFIGURATIONS,
            )
            pipeline = setup(op, parallelism, n, settings=settings)
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
