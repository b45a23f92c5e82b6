"""One operator's journal (docs/api.md, "Durability"): its records, gate and checkpoints.

Every request that changes a durable operator is written ahead to its journal
(``stretch.durable.Journal``, group commit) under the source's lock, and fsync'd before
the answer (the kinds of record: ``api.durability``). A record is one JSON line, then the
rows as an Arrow IPC stream if any (``encode_record``, ``decode_record``).

A checkpoint holds the operator's requests (``IngestGate``, a writer-first RW lock) only
while the journal rotates and the snapshot is copied; the files are written after
(``OperatorJournal.write_checkpoint``), then the older checkpoints and journal dropped.
Where the files lie and how they are read back at start is ``api.durability``; what a
checkpoint holds is ``api.recovery``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from stretch.api.metrics import ServiceMetrics
from stretch.durable import CheckpointStore, Journal
from stretch.errors import CapacityError

__all__ = ["IngestGate", "JournalWriter", "OperatorJournal", "decode_record", "encode_record"]

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
