"""Checkpoint a running operator, and bring one back from its checkpoint and journal.

A checkpoint (``checkpoint``) holds the operator's requests only while the journal rotates
and the pipeline's snapshot and the service's state (``service_state``: each source's
counters, batch ids and writers, and the autoscaler's config) are copied; the files
(``api.durability``) are written after. A restore (``api.registry``) builds the pipeline
from the checkpoint, takes the service's state back (``restore_service_state``) and then
applies each journal record after it again (``replay``), before any request.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import Any

import pyarrow as pa

from stretch.api.durability import checkpoint_contents
from stretch.api.errors import ConflictError
from stretch.api.operators import ManagedOperator
from stretch.api.schemas import CheckpointInfo
from stretch.controller import PolicyConfig
from stretch.errors import StretchError

__all__ = ["checkpoint", "replay", "restore_service_state", "service_state"]

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
    """The service's part of a checkpoint: counters, batch ids, writers, autoscale."""
    config = managed.autoscaler.config
    return {
        "sources": [counters.state() for counters in managed.sources],
        "autoscale": None if config is None else asdict(config),
    }


def restore_service_state(managed: ManagedOperator, state: dict[str, Any]) -> None:
    """Take back what ``service_state`` saved (a restore, before any request)."""
    for counters, saved in zip(managed.sources, state["sources"], strict=True):
        counters.restore(saved)
    if state.get("autoscale") is not None:
        managed.autoscaler.put(PolicyConfig(**state["autoscale"]))


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
