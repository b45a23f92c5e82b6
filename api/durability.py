"""Durable operators (docs/api.md, "Durability"): what is on disk and how it is read back.

With ``stretch serve --state-dir DIR`` the service holds an exclusive lock on ``DIR/lock``
(``flock``: the OS drops it when the process dies, kill -9 included) for as long as it
runs, so no second server writes the same files. Each operator keeps, under
``DIR/operators/<name>/`` (made whole in a temporary folder, then renamed: a folder there
is an operator acknowledged, and one without a readable ``operator.json`` is damaged):

* ``operator.json``: how it was created, written and fsync'd before the 201;
* ``journal/``: every request that changed it, written ahead under the source's lock and
  fsync'd before the answer (``stretch.durable.Journal``, group commit): a batch as the
  rows admitted (Arrow IPC, with its batch id or writer batch), watermarks, closes,
  lateness changes, output commits, reconfigurations and autoscale settings, and the
  counts of a batch refused as late or acknowledged as a duplicate (``counted``: its
  rows are not applied, its counts are);
* ``checkpoints/<L>/``: the latest checkpoint, covering every journal record before LSN L:
  the pipeline's snapshot (``stretch.vsn.PipelineSnapshot``: the input that determines
  its state and the uncommitted output) and the service's counters and batch ids.

A checkpoint holds the operator's requests (``IngestGate``) only while the journal
rotates and the snapshot is copied; the files are written after. On start, each operator
is restored from its latest checkpoint plus the journal after it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from stretch.api.errors import ConflictError
from stretch.api.metrics import ServiceMetrics
from stretch.durable import Checkpoint, CheckpointStore, Journal, JournalRecords, read_journal
from stretch.durable.journal import sync_directory
from stretch.errors import CapacityError, DamagedStateError, StretchError
from stretch.vsn import OutputSnapshot, PipelineSnapshot, SourceSnapshot

__all__ = [
    "IngestGate",
    "JournalWriter",
    "OperatorJournal",
    "StateDirectory",
    "StoredOperator",
    "checkpoint_contents",
    "decode_record",
    "encode_record",
    "snapshot_of",
]

SPEC = "operator.json"
LOCK = "lock"
PENDING = (".new-", ".deleted-")
"""Prefixes of an operator folder being created or removed (left by a crash: removed)."""
GATE_TIMEOUT_S = 30.0
"""The longest a request or a checkpoint waits for the operator's ingest gate."""

JournalWriter = Callable[[dict[str, Any], pa.Table | None], None]
"""Appends a journal record (a header and rows, if any) ahead of a change."""


class IngestGate:
    """Requests share it; a checkpoint takes it alone, briefly (a writer-first RW lock)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        """Held by every request that changes the operator.

        Raises:
            CapacityError: a checkpoint held the gate for ``GATE_TIMEOUT_S`` (retry).

        """
        with self._cond:
            if not self._cond.wait_for(
                lambda: not self._writer and not self._writers_waiting, GATE_TIMEOUT_S
            ):
                msg = "a checkpoint holds the operator; retry later"
                raise CapacityError(msg)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Held by a checkpoint while it rotates the journal and copies the snapshot.

        Raises:
            CapacityError: requests held the gate for ``GATE_TIMEOUT_S``.

        """
        with self._cond:
            self._writers_waiting += 1
            try:
                if not self._cond.wait_for(
                    lambda: not self._writer and not self._readers, GATE_TIMEOUT_S
                ):
                    msg = "requests held the operator too long for a checkpoint; retry later"
                    raise CapacityError(msg)
            finally:
                self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


def encode_record(header: dict[str, Any], table: pa.Table | None = None) -> bytes:
    """A journal record: one JSON line, then the rows as an Arrow IPC stream if any."""
    body = json.dumps(header, separators=(",", ":")).encode() + b"\n"
    if table is None:
        return body
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    rows: bytes = sink.getvalue().to_pybytes()
    return body + rows


def decode_record(payload: bytes) -> tuple[dict[str, Any], pa.Table | None]:
    """The header and rows of a journal record (it passed its checksum)."""
    line, _, rest = payload.partition(b"\n")
    header: dict[str, Any] = json.loads(line)
    table = pa.ipc.open_stream(pa.BufferReader(rest)).read_all() if rest else None
    return header, table


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


class OperatorJournal:
    """One operator's journal and checkpoints, and the gate that orders them.

    Args:
        folder: The operator's directory.
        name: The operator's name (for the metrics).
        metrics: The service's metrics.
        next_lsn: The LSN of the first record it appends.

    """

    def __init__(self, folder: Path, name: str, metrics: ServiceMetrics, next_lsn: int) -> None:
        self.folder = folder
        self.name = name
        self.ingest = IngestGate()
        self._metrics = metrics
        self.journal = Journal(folder / "journal", next_lsn, metrics.fsync_seconds.observe)
        self.checkpoints = CheckpointStore(folder / "checkpoints")
        self.checkpointed_lsn = next_lsn  # no record since it: no checkpoint needed
        self._checkpoint_lock = threading.Lock()

    def log(self, header: dict[str, Any], table: pa.Table | None = None) -> int:
        """Append a record (not yet durable); return its LSN."""
        return self.journal.append(encode_record(header, table))

    def sync(self, lsn: int | None) -> None:
        """Return once record ``lsn`` is on disk (None: nothing to wait for)."""
        if lsn is not None:
            self.journal.sync(lsn)

    @property
    def changed(self) -> bool:
        """Whether records were appended since the latest checkpoint."""
        return self.journal.next_lsn > self.checkpointed_lsn

    def write_checkpoint(
        self, lsn: int, meta: dict[str, Any], tables: dict[str, pa.Table], pause_s: float
    ) -> int:
        """Write the checkpoint at ``lsn``, then drop older checkpoints and journal.

        Returns:
            Its bytes on disk (0: not written, since a later checkpoint is on disk).

        """
        with self._checkpoint_lock:
            if any(newer > lsn for newer in self.checkpoints.lsns()):
                # A checkpoint taken later was written first: it covers more, and the
                # journal before it is gone, so this one must not replace it.
                return 0
            size = self.checkpoints.write(lsn, meta, tables)
            self.checkpoints.remove_except(lsn)
            self.journal.remove_before(lsn)
            self.checkpointed_lsn = max(self.checkpointed_lsn, lsn)
        self._metrics.checkpoint_pause_seconds.labels(self.name).observe(pause_s)
        self._metrics.checkpoint_bytes.labels(self.name).set(size)
        self._metrics.journal_bytes.labels(self.name).set(self.journal.size_bytes())
        return size

    def close(self) -> None:
        """Close the journal (fsync what it has)."""
        self.journal.close()


@dataclass(frozen=True)
class StoredOperator:
    """What is on disk for one operator, read and checked.

    Attributes:
        name: The operator's name.
        spec: How it was created (the create request's fields).
        checkpoint: The latest checkpoint, or None.
        records: The journal records after it.

    """

    name: str
    spec: dict[str, Any]
    checkpoint: Checkpoint | None
    records: JournalRecords


class StateDirectory:
    """The operators' state under one ``--state-dir``, locked for this service alone.

    Args:
        root: The directory (created if missing).
        metrics: The service's metrics.

    Raises:
        StretchError: ``root`` cannot be written, or another server holds it.

    """

    def __init__(self, root: Path, metrics: ServiceMetrics) -> None:
        self.root = root
        self.operators = root / "operators"
        self._metrics = metrics
        try:
            self.operators.mkdir(parents=True, exist_ok=True)
            self._lock = (root / LOCK).open("a+")
        except OSError as exc:
            msg = f"state directory {root} cannot be written: {exc}"
            raise StretchError(msg) from exc
        try:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            self._lock.seek(0)
            holder = self._lock.read().strip() or "?"
            self._lock.close()
            msg = (
                f"state directory {root} is held by another server (process {holder}): "
                "stop it, or give this one another --state-dir"
            )
            raise StretchError(msg) from exc
        except OSError as exc:
            self._lock.close()
            msg = f"state directory {root} cannot be locked: {exc}"
            raise StretchError(msg) from exc
        try:
            self._lock.truncate(0)
            self._lock.write(f"{os.getpid()}\n")
            self._lock.flush()
            probe = self.operators / ".write-probe"
            probe.write_bytes(b"")
            probe.unlink()
            for pending in self.operators.iterdir():
                if pending.name.startswith(PENDING):
                    shutil.rmtree(pending, ignore_errors=True)
        except OSError as exc:
            self.close()
            msg = f"state directory {root} cannot be written: {exc}"
            raise StretchError(msg) from exc

    def close(self) -> None:
        """Release the directory (the service stopped)."""
        self._lock.close()

    def names(self) -> list[str]:
        """The operators kept, by name: every folder under ``operators/``."""
        return sorted(
            p.name for p in self.operators.iterdir() if not p.name.startswith(".") and p.is_dir()
        )

    def create(self, name: str, spec: dict[str, Any]) -> OperatorJournal:
        """Keep a new operator: its spec and an empty journal, on disk whole (fsync'd).

        Raises:
            ConflictError: its folder exists (kept operators are known to the registry, so
                one being deleted, or put there by hand): it is left as it is.

        """
        folder = self.operators / name
        if folder.exists():
            msg = (
                f"operator {name!r}: {folder} exists (an operator of that name being "
                "deleted, or a folder put there by hand); retry, or remove it"
            )
            raise ConflictError(msg)
        temp = self.operators / f"{PENDING[0]}{name}-{time.monotonic_ns()}"
        temp.mkdir()
        Journal(temp / "journal").close()
        with (temp / SPEC).open("w") as file:
            json.dump(spec, file)
            file.flush()
            os.fsync(file.fileno())
        sync_directory(temp)
        temp.rename(folder)
        sync_directory(self.operators)
        return OperatorJournal(folder, name, self._metrics, 1)

    def read(self, name: str) -> StoredOperator:
        """Read and check an operator's spec, latest checkpoint and journal after it.

        Raises:
            DamagedStateError: a file is missing or damaged (the message names it).

        """
        folder = self.operators / name
        try:
            spec = json.loads((folder / SPEC).read_text())
        except (OSError, ValueError) as exc:
            msg = f"state file {folder / SPEC} is missing or damaged: {exc}"
            raise DamagedStateError(msg) from exc
        checkpoint = CheckpointStore(folder / "checkpoints").latest()
        records = read_journal(folder / "journal", checkpoint.lsn if checkpoint else 1)
        return StoredOperator(name, spec, checkpoint, records)

    def reopen(self, stored: StoredOperator) -> OperatorJournal:
        """The journal of a restored operator, continuing after its last record."""
        return OperatorJournal(
            self.operators / stored.name, stored.name, self._metrics, stored.records.next_lsn
        )

    def remove(self, name: str) -> None:
        """Forget an operator's state (after it was deleted)."""
        folder = self.operators / name
        if folder.exists():
            trash = self.operators / f"{PENDING[1]}{name}-{time.monotonic_ns()}"
            folder.rename(trash)
            sync_directory(self.operators)
            shutil.rmtree(trash, ignore_errors=True)
