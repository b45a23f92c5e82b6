"""Checkpoints on disk: named Arrow tables and JSON metadata, written atomically, verified.

A checkpoint at LSN L (it covers every journal record before L) is a directory
``<L, 20 digits>/`` holding one Arrow IPC file per table and ``meta.json``, which lists
each file's size and CRC-32 and the caller's metadata. It is written under a temporary
name, every file fsync'd, then renamed into place: a crash leaves either the whole
checkpoint or none (a leftover temporary directory is removed on the next write). A
checkpoint already at that LSN is kept: nothing was journaled since, so it holds the same
state. Reading checks every file against ``meta.json`` and the directory's name against
the LSN it records; a mismatch raises ``DamagedStateError`` naming the file. The journal
segment named L is where reading after the checkpoint starts (``read_journal``).
"""

from __future__ import annotations

import json
import os
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from stretch.durable.journal import sync_directory
from stretch.errors import DamagedStateError

__all__ = ["Checkpoint", "CheckpointStore"]

META = "meta.json"
TEMP_PREFIX = ".tmp-"


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint read back and verified.

    Attributes:
        lsn: It covers every journal record before this LSN.
        meta: The caller's metadata.
        tables: The caller's tables by name.
        bytes: Bytes of its files on disk.

    """

    lsn: int
    meta: dict[str, Any]
    tables: dict[str, pa.Table]
    bytes: int


class CheckpointStore:
    """The checkpoints of one operator, in one directory.

    Args:
        directory: Where the checkpoints are (created if missing).

    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def lsns(self) -> list[int]:
        """The LSNs of the complete checkpoints, oldest first."""
        return sorted(int(p.name) for p in self.directory.iterdir() if p.name.isdigit())

    def write(self, lsn: int, meta: dict[str, Any], tables: dict[str, pa.Table]) -> int:
        """Write a checkpoint at ``lsn`` atomically; return its bytes on disk.

        O(bytes of the tables); every file is fsync'd before the rename that publishes it.
        A checkpoint already at ``lsn`` covers the same records: it is kept as it is.
        """
        final = self.directory / f"{lsn:020d}"
        if final.exists():
            return sum(path.stat().st_size for path in final.iterdir())
        for stale in self.directory.glob(f"{TEMP_PREFIX}*"):
            shutil.rmtree(stale, ignore_errors=True)
        temp = self.directory / f"{TEMP_PREFIX}{lsn:020d}"
        temp.mkdir()
        files: dict[str, dict[str, int]] = {}
        total = 0
        for name, table in tables.items():
            sink = pa.BufferOutputStream()
            with pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
            data = sink.getvalue().to_pybytes()
            _write_synced(temp / f"{name}.arrow", data)
            files[name] = {"bytes": len(data), "crc32": zlib.crc32(data)}
            total += len(data)
        body = json.dumps({"lsn": lsn, "files": files, "meta": meta}).encode()
        _write_synced(temp / META, body)
        sync_directory(temp)
        temp.rename(final)
        sync_directory(self.directory)
        return total + len(body)

    def latest(self) -> Checkpoint | None:
        """The newest complete checkpoint, verified; None if there is none.

        Raises:
            DamagedStateError: one of its files is missing, or differs from ``meta.json``,
                or ``meta.json`` records another LSN than the directory's name.

        """
        lsns = self.lsns()
        if not lsns:
            return None
        folder = self.directory / f"{lsns[-1]:020d}"
        meta_path = folder / META
        try:
            body = json.loads(meta_path.read_bytes())
            files = body["files"]
            lsn = int(body["lsn"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            msg = f"checkpoint file {meta_path} is damaged or missing: {exc}"
            raise DamagedStateError(msg) from exc
        if lsn != lsns[-1]:
            msg = f"checkpoint file {meta_path} is for LSN {lsn}, not {lsns[-1]} (moved?)"
            raise DamagedStateError(msg)
        tables = {}
        total = meta_path.stat().st_size
        for name, expected in files.items():
            path = folder / f"{name}.arrow"
            try:
                data = path.read_bytes()
            except OSError as exc:
                msg = f"checkpoint file {path} is missing: {exc}"
                raise DamagedStateError(msg) from exc
            if len(data) != expected["bytes"] or zlib.crc32(data) != expected["crc32"]:
                msg = f"checkpoint file {path} is damaged (its checksum differs from {META})"
                raise DamagedStateError(msg)
            tables[name] = pa.ipc.open_file(pa.BufferReader(data)).read_all()
            total += len(data)
        return Checkpoint(lsn, body.get("meta", {}), tables, total)

    def remove_except(self, lsn: int) -> None:
        """Delete every checkpoint but the one at ``lsn``."""
        removed = False
        for old in self.lsns():
            if old != lsn:
                shutil.rmtree(self.directory / f"{old:020d}", ignore_errors=True)
                removed = True
        if removed:
            sync_directory(self.directory)


def _write_synced(path: Path, data: bytes) -> None:
    with path.open("wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
