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

This module holds the state directory: its lock and layout, and each operator's folder
made, read back and removed (``StateDirectory``, ``StoredOperator``). One operator's
journal, the records in it and the ingest gate are ``api.operator_journal``; what a
checkpoint holds, and the restore from it, are ``api.recovery``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stretch.api.errors import ConflictError
from stretch.api.metrics import ServiceMetrics
from stretch.api.operator_journal import OperatorJournal
from stretch.durable import Checkpoint, CheckpointStore, Journal, JournalRecords, read_journal
from stretch.durable.journal import sync_directory
from stretch.errors import DamagedStateError, StretchError

__all__ = ["StateDirectory", "StoredOperator"]

SPEC = "operator.json"
LOCK = "lock"
PENDING = (".new-", ".deleted-")
"""Prefixes of an operator folder being created or removed (left by a crash: removed)."""


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
