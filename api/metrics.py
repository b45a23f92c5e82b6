"""Prometheus metrics of the service, in a registry of the app's own.

Rejected requests, the output latency histogram and the durability instruments are
updated as things happen. Everything an operator counts itself (tuples in, late tuples and
duplicate batches per source, which a restore brings back; output and comparison totals),
its gauges (epoch, active instances, gate occupancy) and its reconfiguration durations are
read from the operator at scrape time by a collector, so a restored operator's counters
continue from their restored values.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

__all__ = ["OperatorSnapshot", "ServiceMetrics", "SourceSnapshot"]

LATENCY_BUCKETS_S = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
RECONFIGURATION_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.1, 0.25, 1.0, 5.0)
FSYNC_BUCKETS_S = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0)
CHECKPOINT_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0)


@dataclass(frozen=True)
class SourceSnapshot:
    """What one input source of an operator counted, at scrape time."""

    tuples_in: int
    late_tuples: int
    duplicate_batches: int


@dataclass(frozen=True)
class OperatorSnapshot:
    """What the collector reads from one running operator at scrape time."""

    name: str
    tuples_out: int
    epoch: int
    active_instances: int
    esg_in_occupancy: int
    esg_out_occupancy: int
    comparisons: int
    reconfiguration_s: Sequence[float] = field(default_factory=tuple)
    instance_busy_s: Sequence[float] = field(default_factory=tuple)
    autoscale_decisions: Mapping[str, int] = field(default_factory=dict)
    dictionary_bytes: int = 0
    state_bytes: int | None = None
    sources: Sequence[SourceSnapshot] = field(default_factory=tuple)


class _RuntimeCollector(Collector):
    def __init__(self, snapshots: Callable[[], Iterable[OperatorSnapshot]]) -> None:
        self._snapshots = snapshots

    def collect(self) -> Iterator[Metric]:
        source_labels = ["operator", "source"]
        tuples_in = CounterMetricFamily(
            "stretch_tuples_in", "Input tuples accepted", labels=source_labels
        )
        late = CounterMetricFamily(
            "stretch_late_tuples",
            "Input tuples rejected as late (before the watermark)",
            labels=source_labels,
        )
        duplicates = CounterMetricFamily(
            "stretch_duplicate_batches",
            "Repeated batch ids acknowledged and ignored",
            labels=source_labels,
        )
        out = CounterMetricFamily(
            "stretch_tuples_out", "Output tuples appended to the log", labels=["operator"]
        )
        comparisons = CounterMetricFamily(
            "stretch_comparisons",
            "Join predicate comparisons (rate() gives comparisons/s)",
            labels=["operator"],
        )
        epoch = GaugeMetricFamily("stretch_epoch", "Epoch in force", labels=["operator"])
        active = GaugeMetricFamily(
            "stretch_active_instances", "Connected instances m", labels=["operator"]
        )
        occupancy = GaugeMetricFamily(
            "stretch_esg_occupancy", "Nodes held by a gate", labels=["operator", "gate"]
        )
        dictionary = GaugeMetricFamily(
            "stretch_string_dictionary_bytes",
            "Bytes of the string dictionary (compacted at barriers when due)",
            labels=["operator"],
        )
        state = GaugeMetricFamily(
            "stretch_state_bytes",
            "Bytes of the arrays holding the operator's windows (compiled kernels only)",
            labels=["operator"],
        )
        durations = HistogramMetricFamily(
            "stretch_reconfiguration_duration_seconds",
            "Reconfiguration time from the call to completion",
            labels=["operator"],
        )
        busy = CounterMetricFamily(
            "stretch_instance_busy_seconds",
            "Time a pool thread spent processing (rate() gives its load, 0..1)",
            labels=["operator", "instance"],
        )
        decisions = CounterMetricFamily(
            "stretch_autoscale_decisions",
            "Autoscale decisions by kind (one per period)",
            labels=["operator", "kind"],
        )
        for snap in self._snapshots():
            for i, source in enumerate(snap.sources):
                tuples_in.add_metric([snap.name, str(i)], source.tuples_in)
                late.add_metric([snap.name, str(i)], source.late_tuples)
                duplicates.add_metric([snap.name, str(i)], source.duplicate_batches)
            for j, seconds in enumerate(snap.instance_busy_s):
                busy.add_metric([snap.name, str(j)], seconds)
            for kind, count in snap.autoscale_decisions.items():
                decisions.add_metric([snap.name, kind], count)
            out.add_metric([snap.name], snap.tuples_out)
            comparisons.add_metric([snap.name], snap.comparisons)
            epoch.add_metric([snap.name], snap.epoch)
            active.add_metric([snap.name], snap.active_instances)
            occupancy.add_metric([snap.name, "in"], snap.esg_in_occupancy)
            occupancy.add_metric([snap.name, "out"], snap.esg_out_occupancy)
            dictionary.add_metric([snap.name], snap.dictionary_bytes)
            if snap.state_bytes is not None:
                state.add_metric([snap.name], snap.state_bytes)
            durations.add_metric(
                [snap.name], _buckets(snap.reconfiguration_s), sum(snap.reconfiguration_s)
            )
        yield from (
            tuples_in,
            late,
            duplicates,
            out,
            comparisons,
            epoch,
            active,
            occupancy,
            dictionary,
            state,
            durations,
            busy,
            decisions,
        )


def _buckets(values: Sequence[float]) -> list[tuple[str, float]]:
    ordered = sorted(values)
    cumulative = [
        (str(b), float(bisect.bisect_right(ordered, b))) for b in RECONFIGURATION_BUCKETS_S
    ]
    return [*cumulative, ("+Inf", float(len(ordered)))]


class ServiceMetrics:
    """The app's metrics registry and the instruments the routes update.

    Args:
        snapshots: Returns a snapshot of every running operator (called at scrape time).

    """

    def __init__(self, snapshots: Callable[[], Iterable[OperatorSnapshot]]) -> None:
        self.registry = CollectorRegistry()
        self.rejected_requests = Counter(
            "stretch_rejected_requests",
            "Requests answered with a 4xx or 5xx",
            ["route", "status"],
            registry=self.registry,
        )
        self.output_latency = Histogram(
            "stretch_output_latency_seconds",
            "Output visible in the log minus arrival of the newest contributing input",
            ["operator"],
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.fsync_seconds = Histogram(
            "stretch_journal_fsync_seconds",
            "Duration of one journal fsync (a group commit)",
            buckets=FSYNC_BUCKETS_S,
            registry=self.registry,
        )
        self.checkpoint_seconds = Histogram(
            "stretch_checkpoint_seconds",
            "Duration of a checkpoint, from the snapshot to the files on disk",
            ["operator"],
            buckets=CHECKPOINT_BUCKETS_S,
            registry=self.registry,
        )
        self.checkpoint_pause_seconds = Histogram(
            "stretch_checkpoint_pause_seconds",
            "How long a checkpoint held the operator's requests (the snapshot)",
            ["operator"],
            buckets=CHECKPOINT_BUCKETS_S,
            registry=self.registry,
        )
        self.checkpoint_bytes = Gauge(
            "stretch_checkpoint_bytes",
            "Bytes of the latest checkpoint",
            ["operator"],
            registry=self.registry,
        )
        self.journal_bytes = Gauge(
            "stretch_journal_bytes",
            "Bytes of the journal after the latest checkpoint",
            ["operator"],
            registry=self.registry,
        )
        self.restore_seconds = Gauge(
            "stretch_restore_seconds",
            "How long the operator's restore took at start",
            ["operator"],
            registry=self.registry,
        )
        self.registry.register(_RuntimeCollector(snapshots))

    def rejected(self, route: str, status: int) -> None:
        """Count a rejected request."""
        self.rejected_requests.labels(route, str(status)).inc()

    def forget(self, operator: str) -> None:
        """Drop the series of a deleted operator (the collector's go with it)."""
        for labelled in (
            self.output_latency,
            self.checkpoint_seconds,
            self.checkpoint_pause_seconds,
            self.checkpoint_bytes,
            self.journal_bytes,
            self.restore_seconds,
        ):
            try:
                labelled.remove(operator)
            except KeyError:
                continue

    def exposition(self) -> bytes:
        """The Prometheus text format of every metric."""
        return bytes(generate_latest(self.registry))
