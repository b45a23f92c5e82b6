"""The operators the service runs: one VSN pipeline per name, and what HTTP adds to it.

HTTP adds three things to a ``stretch`` pipeline: idempotent batches (a ``batch_id`` seen
before on a source is acknowledged and ignored, since Spark's ``foreachBatch`` is
at-least-once), non-blocking admission (a batch that does not fit in ESG_in's free room
is refused with ``CapacityError`` -> 429 instead of blocking a server thread; nothing is
dropped, the client retries; a source that every other open source waits for is
admitted and waits for room instead, since only its rows can free the gate), and
per-source counters for the status and the metrics.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from api.errors import ConflictError, NotFoundError, TooLargeError
from api.latency import ArrivalClock, LatencyObserver
from api.metrics import OperatorSnapshot, ServiceMetrics
from controller import Autoscaler, PolicyConfig, autoscale
from stretch.errors import CapacityError, LateTupleError, OperatorError
from stretch.model.schema import TS, conform
from stretch.operators.catalog import build
from stretch.vsn import setup
from stretch.vsn.pipeline import Pipeline
from stretch.vsn.reconfiguration import ReconfigurationRecord

__all__ = ["ManagedOperator", "OperatorRegistry", "SourceCounters"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_PARALLELISM = 4


@dataclass
class SourceCounters:
    """What one source received over HTTP, and the batch ids it has seen."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    batch_ids: set[int] = field(default_factory=set)
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

    """

    def __init__(
        self,
        name: str,
        operator: str,
        params: Mapping[str, Any],
        pipeline: Pipeline,
        capacity: int,
        metrics: ServiceMetrics,
    ) -> None:
        self.name = name
        self.operator = operator
        self.params = dict(params)
        self.pipeline = pipeline
        self.capacity = capacity
        self.sources = [SourceCounters() for _ in pipeline.sources]
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
        if self.pipeline.sources[source].closed:
            msg = f"{self.where(source)} is closed; it takes no more input"
            raise ConflictError(msg)

    def add_batch(self, source: int, batch_id: int | None, table: pa.Table) -> tuple[int, bool]:
        """Add a ts-sorted batch unless its id was seen; return (rows added, duplicate).

        Raises:
            NotFoundError: no such source.
            ConflictError: the source is closed.
            TooLargeError: the batch is larger than the whole ingest buffer.
            CapacityError: ESG_in has no room for the batch now (retry later).
            SchemaError, LateTupleError: from the runtime; nothing was added.

        """
        counters = self.source(source)
        with counters.lock:
            if batch_id is not None and batch_id in counters.batch_ids:
                counters.duplicate_batches += 1
                self._metrics.duplicate_batches.labels(self.name, str(source)).inc()
                return 0, True
            self._check_open(source)
            rows = table.num_rows
            if rows > self.capacity:
                msg = (
                    f"{self.where(source)}: a batch of {rows} rows can never fit the "
                    f"ingest buffer of {self.capacity}; split it"
                )
                raise TooLargeError(msg)
            table = conform(table, self.pipeline.sources[source].schema, self.where(source))
            ts = table.column(TS).to_numpy()
            if not self.pipeline.esg_in.fits(source, ts) and not self._holds_back_merge(source):
                free = self.capacity - self.pipeline.esg_in.occupancy()
                msg = (
                    f"{self.where(source)}: the ingest buffer cannot take the batch's {rows} "
                    f"rows now ({free} rows free, part held for sources behind); retry later"
                )
                raise CapacityError(msg)
            arrival_s = time.time()
            try:
                added = self.pipeline.add(source, table)
            except LateTupleError:
                late = self._late_rows(source, table)
                counters.late_tuples += late
                self._metrics.late_tuples.labels(self.name, str(source)).inc(late)
                raise
            if batch_id is not None:
                counters.batch_ids.add(batch_id)
            counters.batches += 1
            counters.tuples_in += added
            self._metrics.tuples_in.labels(self.name, str(source)).inc(added)
            if added:
                self._clock.record(source, int(table.column(TS)[0].as_py()), arrival_s)
            return added, False

    def _frontier(self, source: int) -> float:
        store = self.pipeline.sources[source]
        known = [x for x in (store.last_ts, store.watermark) if x is not None]
        return max(known) if known else -math.inf

    def _holds_back_merge(self, source: int) -> bool:
        """Whether ``source`` is strictly behind every other open source.

        Then the tuples filling ESG_in wait for this source's rows to become ready, so
        refusing it would deadlock: its batch is admitted and ``add`` waits for room,
        which its own rows free.
        """
        others = [
            self._frontier(i)
            for i, store in enumerate(self.pipeline.sources)
            if i != source and not store.closed
        ]
        return bool(others) and self._frontier(source) < min(others)

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
            self.pipeline.watermark(source, ts)

    def close(self, source: int) -> None:
        """End of input for ``source`` (closing twice is a no-op)."""
        counters = self.source(source)
        with counters.lock:
            self.pipeline.close(source)

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
                "watermark": stats["watermarks"][i],
                "closed": self.pipeline.sources[i].closed,
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
            "mapping": list(self.pipeline.pool.current.mapping),
            "watermarks": stats["watermarks"],
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

    """

    def __init__(self, metrics: ServiceMetrics) -> None:
        self._metrics = metrics
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
            pipeline = setup(
                op, parallelism, n, capacity=capacity, allowed_lateness_ms=allowed_lateness_ms
            )
            managed = ManagedOperator(name, operator, params, pipeline, capacity, self._metrics)
            if policy is not None:
                try:
                    managed.set_autoscale(policy)
                except OperatorError:
                    managed.shutdown()
                    raise
            self._operators[name] = managed
        logger.info("started operator %r (%s, m=%d, n=%d)", name, operator, parallelism, n)
        return managed

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
