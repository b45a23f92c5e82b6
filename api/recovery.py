"""Checkpoint a running operator, and bring one back from its checkpoint and journal.

A checkpoint (``checkpoint``) holds the operator's requests only while the journal rotates
and the pipeline's snapshot and the service's state (``service_state``: each source's
counters, batch ids and writers, and the autoscaler's config) are copied; the files
(``api.durability``, ``api.operator_journal``) are written after, the snapshot and the
service's state as metadata and tables (``checkpoint_contents``). A restore (``restore``,
run by ``api.registry`` at start) builds the pipeline from the checkpoint
(``snapshot_of``), takes the service's state back (``restore_service_state``) and then
applies each journal record after it again (``replay``), before any request.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import Any

import pyarrow as pa

from stretch.api.durability import StateDirectory
from stretch.api.errors import ConflictError
from stretch.api.limits import ServiceLimits
from stretch.api.metrics import ServiceMetrics
from stretch.api.operator_journal import decode_record
from stretch.api.operator_spec import build_instance, managed_operator, runtime_settings
from stretch.api.operators import ManagedOperator
from stretch.api.schemas import CheckpointInfo
from stretch.controller import PolicyConfig
from stretch.durable import Checkpoint
from stretch.errors import DamagedStateError, StretchError
from stretch.vsn import OutputSnapshot, Pipeline, PipelineSnapshot, Shard, SourceSnapshot, setup

__all__ = [
    "checkpoint",
    "checkpoint_contents",
    "replay",
    "restore",
    "restore_service_state",
    "service_state",
    "snapshot_of",
]

logger = logging.getLogger(__name__)


def checkpoint(managed: ManagedOperator) -> CheckpointInfo:
    """Checkpoint ``managed`` now: snapshot under the gate, then write the files.

    Raises:
        ConflictError: the service keeps no state (no ``--state-dir``).
        CapacityError: requests held the operator too long (retry).

    """
    journal = managed.journal
    if journal is None:
        msg = (
            f"operator {managed.name!r} is not durable: start the service with --state-dir "
            "to checkpoint it"
        )
        raise ConflictError(msg)
    started = time.perf_counter()
    with journal.ingest.exclusive():
        lsn = journal.journal.rotate()
        snapshot = managed.pipeline.snapshot()
        service = service_state(managed)
    pause_s = time.perf_counter() - started
    meta, tables = checkpoint_contents(snapshot, service)
    size = journal.write_checkpoint(lsn, meta, tables, pause_s)
    duration_s = time.perf_counter() - started
    managed.metrics.checkpoint_seconds.labels(managed.name).observe(duration_s)
    info = CheckpointInfo(
        checkpoint=lsn,
        epoch=snapshot.epoch,
        bytes=size,
        duration_ms=duration_s * 1e3,
        pause_ms=pause_s * 1e3,
        time_s=time.time(),
    )
    managed.checkpoints.append(info)
    logger.info(
        "operator %r: checkpoint %d, %d bytes in %.1f ms (paused %.1f ms)",
        managed.name,
        lsn,
        size,
        info.duration_ms,
        info.pause_ms,
    )
    return info


def service_state(managed: ManagedOperator) -> dict[str, Any]:
    """The service's part of a checkpoint: counters, batch ids, writers, autoscale, cut."""
    config = managed.autoscaler.config
    return {
        "sources": [counters.state() for counters in managed.sources],
        "autoscale": None if config is None else asdict(config),
        "committed_cut": None if managed.committed_cut is None else list(managed.committed_cut),
    }


def checkpoint_contents(
    snapshot: PipelineSnapshot, service: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, pa.Table]]:
    """A pipeline snapshot and the service's state as checkpoint metadata and tables."""
    tables = {"output": snapshot.output.rows}
    for i, source in enumerate(snapshot.sources):
        tables[f"source-{i}-rows"] = source.rows
        tables[f"source-{i}-held"] = source.held
    meta = {
        "pipeline": {
            "epoch": snapshot.epoch,
            "parallelism": snapshot.parallelism,
            "max_parallelism": snapshot.max_parallelism,
            "mapping": list(snapshot.mapping),
            "horizon_ts": snapshot.horizon_ts,
            "sources": [
                {
                    "first_seq": s.first_seq,
                    "released": s.released,
                    "closed": s.closed,
                    "allowed_lateness_ms": s.allowed_lateness_ms,
                }
                for s in snapshot.sources
            ],
            "output": {
                "start_offset": snapshot.output.start_offset,
                "complete_before": snapshot.output.complete_before,
                "commits": snapshot.output.commits,
                "finished": snapshot.output.finished,
            },
        },
        "service": service,
    }
    return meta, tables


def snapshot_of(checkpoint: Checkpoint) -> PipelineSnapshot:
    """The pipeline snapshot a checkpoint holds.

    Raises:
        DamagedStateError: its metadata does not describe a snapshot.

    """
    try:
        meta = checkpoint.meta["pipeline"]
        output = meta["output"]
        return PipelineSnapshot(
            epoch=int(meta["epoch"]),
            parallelism=int(meta["parallelism"]),
            max_parallelism=int(meta["max_parallelism"]),
            mapping=tuple(int(g) for g in meta["mapping"]),
            sources=tuple(
                SourceSnapshot(
                    first_seq=int(s["first_seq"]),
                    rows=checkpoint.tables[f"source-{i}-rows"],
                    held=checkpoint.tables[f"source-{i}-held"],
                    released=int(s["released"]),
                    closed=bool(s["closed"]),
                    allowed_lateness_ms=int(s["allowed_lateness_ms"]),
                )
                for i, s in enumerate(meta["sources"])
            ),
            output=OutputSnapshot(
                start_offset=int(output["start_offset"]),
                rows=checkpoint.tables["output"],
                complete_before=int(output["complete_before"]),
                commits={str(k): int(v) for k, v in output["commits"].items()},
                finished=bool(output["finished"]),
            ),
            horizon_ts=meta["horizon_ts"],
        )
    except (KeyError, TypeError, ValueError) as exc:
        msg = f"checkpoint {checkpoint.lsn}: its metadata is not a pipeline snapshot ({exc!r})"
        raise DamagedStateError(msg) from exc


def restore(
    state: StateDirectory, name: str, metrics: ServiceMetrics, limits: ServiceLimits
) -> ManagedOperator:
    """An operator as its files leave it: latest checkpoint, then the journal after.

    Raises:
        DamagedStateError: a file is damaged (named in the message).
        StretchError: the operator cannot be built (e.g. a custom operator that is
            not registered in this process) or does not take its journal.

    """
    stored = state.read(name)
    spec = stored.spec
    op = build_instance(name, spec["operator"], spec["params"])
    shard = spec.get("shard")
    settings = runtime_settings(
        limits,
        spec["capacity"],
        spec["allowed_lateness_ms"],
        None if shard is None else Shard(*shard),
    )
    if stored.checkpoint is not None:
        pipeline = Pipeline.restore(op, snapshot_of(stored.checkpoint), settings)
    else:
        pipeline = setup(op, spec["parallelism"], spec["max_parallelism"], settings=settings)
    managed = managed_operator(name, spec, pipeline, metrics, limits)
    try:
        if stored.checkpoint is not None:
            restore_service_state(managed, stored.checkpoint.meta["service"])
        for _, payload in stored.records.records:
            replay(managed, *decode_record(payload))
        managed.journal = state.reopen(stored)
    except BaseException:
        managed.shutdown()
        raise
    return managed


def restore_service_state(managed: ManagedOperator, state: dict[str, Any]) -> None:
    """Take back what ``service_state`` saved (a restore, before any request)."""
    for counters, saved in zip(managed.sources, state["sources"], strict=True):
        counters.restore(saved)
    if state.get("autoscale") is not None:
        managed.autoscaler.put(PolicyConfig(**state["autoscale"]))
    managed.keep_cut(state.get("committed_cut"))  # none in checkpoints of before


def replay(managed: ManagedOperator, header: dict[str, Any], table: pa.Table | None) -> None:
    """Apply a journal record to ``managed`` again (a restore, before any request, no journal).

    Raises:
        StretchError: a batch the operator cannot take again (the journal does not
            belong to it); other records that fail now failed then too and are skipped.

    """
    kind = header["kind"]
    source = int(header.get("source", 0))
    pipeline = managed.pipeline
    feeds = managed.feeds[source] if kind != "commit" else ()
    if kind == "counted":
        managed.sources[source].count(int(header["late_tuples"]), int(header["duplicate_batches"]))
        return
    if kind == "batch":
        assert table is not None
        for fed in feeds:
            pipeline.add(fed, table, bounded=False)
        writer = header["writer"]
        managed.sources[source].added(
            None if header["batch_id"] is None else int(header["batch_id"]),
            None if writer is None else (str(writer[0]), int(writer[1])),
            table.num_rows,
            int(header["dropped"]),
        )
        return
    try:
        if kind == "watermark":
            for fed in feeds:
                pipeline.watermark(fed, int(header["ts"]))
        elif kind == "close":
            for fed in feeds:
                pipeline.close(fed)
        elif kind == "lateness":
            for fed in feeds:
                pipeline.set_allowed_lateness(fed, int(header["ms"]))
        elif kind == "commit":
            pipeline.commit(int(header["offset"]), when_produced=True)
            managed.keep_cut(header.get("cut"))
        elif kind == "reconfigure":
            pipeline.reconfigure(header["parallelism"], header["mapping"])
        elif kind == "autoscale":
            config = header["config"]
            if config is None:
                managed.autoscaler.clear()
            else:
                managed.autoscaler.put(PolicyConfig(**config))
    except StretchError as exc:
        logger.debug("operator %r: journal record %s skipped: %s", managed.name, kind, exc)
