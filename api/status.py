"""What a running operator shows: its status body, its full mapping, its metrics snapshot.

``GET /v1/operators/{name}`` answers ``operator_status``, ``GET .../mapping``
``operator_mapping``; the metrics collector reads ``operator_snapshot`` at scrape time.
Each reads the pipeline's status once, so its fields agree with each other.
"""

from __future__ import annotations

from dataclasses import asdict

from stretch.api.mapping import FullMapping, summarize
from stretch.api.metrics import OperatorSnapshot, SourceSnapshot
from stretch.api.operators import ManagedOperator
from stretch.api.schemas import (
    InstanceStatus,
    OperatorCounters,
    OperatorStatus,
    OutputStatus,
    ShardRequest,
    SourceStatus,
)

__all__ = ["operator_mapping", "operator_snapshot", "operator_status"]


def operator_status(managed: ManagedOperator) -> OperatorStatus:
    """The body of ``GET /v1/operators/{name}``."""
    status = managed.pipeline.status()
    output = status.output
    shard = managed.pipeline.settings.shard
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
        for i, (c, feeds) in enumerate(zip(managed.sources, managed.feeds, strict=True))
    ]
    return OperatorStatus(
        name=managed.name,
        operator=managed.operator,
        params=managed.params,
        epoch=status.epoch,
        parallelism=status.parallelism,
        max_parallelism=status.max_parallelism,
        max_batch_rows=managed.max_batch_rows,
        mapping=summarize(status.mapping, status.parallelism, shard),
        watermarks=[s.watermark for s in sources],
        sources=sources,
        instances=[InstanceStatus.model_validate(asdict(i)) for i in status.instances],
        output=OutputStatus(
            start_offset=output.start_offset,
            committed_offset=output.committed_offset,
            end_offset=output.end_offset,
            finished=output.finished,
            watermark=output.watermark,
            committed_cut=None if managed.committed_cut is None else list(managed.committed_cut),
        ),
        counters=OperatorCounters(
            tuples_in=sum(c.tuples_in for c in managed.sources),
            tuples_out=output.end_offset,
            late_tuples=sum(c.late_tuples for c in managed.sources),
            duplicate_batches=sum(c.duplicate_batches for c in managed.sources),
            esg_in_occupancy=status.esg_in.occupancy,
        ),
        state_bytes=status.state_bytes,
        shard=None if shard is None else ShardRequest(index=shard.index, count=shard.count),
    )


def operator_mapping(managed: ManagedOperator) -> FullMapping:
    """The body of ``GET /v1/operators/{name}/mapping``: f_mu in force, every entry."""
    status = managed.pipeline.status()
    return FullMapping(
        epoch=status.epoch, parallelism=status.parallelism, mapping=list(status.mapping)
    )


def operator_snapshot(managed: ManagedOperator) -> OperatorSnapshot:
    """The metrics collector's view of ``managed``."""
    status = managed.pipeline.status()
    return OperatorSnapshot(
        name=managed.name,
        tuples_out=status.output.end_offset,
        epoch=status.epoch,
        active_instances=status.parallelism,
        esg_in_occupancy=status.esg_in.occupancy,
        esg_out_occupancy=status.esg_out.occupancy,
        comparisons=sum(i.comparisons for i in status.instances),
        instance_busy_s=[i.busy_s for i in status.instances],
        autoscale_decisions=managed.autoscaler.decisions(),
        reconfiguration_s=[
            r.duration_ms / 1e3 for r in status.reconfigurations if r.duration_ms is not None
        ],
        dictionary_bytes=status.dictionary_bytes,
        state_bytes=status.state_bytes,
        sources=[
            SourceSnapshot(c.tuples_in, c.late_tuples, c.duplicate_batches) for c in managed.sources
        ],
    )
