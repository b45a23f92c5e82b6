"""An append-only journal of records in segment files, fsync'd by group commit.

Each record gets a log sequence number (LSN, consecutive from 1) and is framed as::

    magic "STJ1" | u32 payload length | u64 LSN | u32 CRC-32 of the 16 bytes before
    payload | u32 CRC-32 of the payload

A segment file ``<first LSN, 20 digits>.log`` starts with a header (magic "STJS", its
first LSN as u64, a CRC-32 of both) and holds consecutive records from that LSN; it is
created whole (written under a temporary name, fsync'd, renamed), so a segment without
its header was cut or replaced, never "nothing written yet". ``rotate`` starts the next
segment (a checkpoint at LSN L covers every record before L, so segments before it can
go; the one named L stays: it is where reading after that checkpoint starts). ``append``
only writes into the process's buffer; ``sync(lsn)`` makes every record up to ``lsn``
durable: callers that arrive while an fsync runs wait for it and the next one covers
them all (group commit), so concurrent requests share fsyncs.

Reading back (``read_journal``) starts at the segment named after the first LSN wanted
and checks that each later segment's name follows the records before it, and every frame.
A last record cut short (a crash in the middle of a write: never acknowledged, since
acknowledging waits for the fsync) is dropped and the file truncated before it; zeros at
the end of the last segment count as such a cut. Anything else (a missing segment, a
missing header, a bad checksum, a gap in the LSNs, a short record before the end) is
damage: ``DamagedStateError`` names the file and the offset.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from stretch.errors import DamagedStateError, StretchError

__all__ = ["Journal", "JournalRecords", "read_journal", "sync_directory"]

logger = logging.getLogger(__name__)

MAGIC = b"STJ1"
SEGMENT_MAGIC = b"STJS"
_HEAD = struct.Struct("<4sIQ")  # magic, payload length, LSN
_SEGMENT_HEAD = struct.Struct("<4sQ")  # magic, first LSN
_CRC = struct.Struct("<I")
FRAME_OVERHEAD = _HEAD.size + 2 * _CRC.size

MAX_RECORD_BYTES = 1 << 30
"""The largest payload a record may have (a length beyond it is damage)."""

SYNC_TIMEOUT_S = 60.0
"""The longest ``sync`` waits for another caller's fsync before giving up."""

SUFFIX = ".log"


def sync_directory(directory: Path) -> None:
    """fsync a directory, so that files created, renamed or removed in it are durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _segment_header(first_lsn: int) -> bytes:
    head = _SEGMENT_HEAD.pack(SEGMENT_MAGIC, first_lsn)
    return head + _CRC.pack(zlib.crc32(head))


SEGMENT_HEADER_BYTES = _SEGMENT_HEAD.size + _CRC.size


def _frame(lsn: int, payload: bytes) -> bytes:
    head = _HEAD.pack(MAGIC, len(payload), lsn)
    return b"".join((head, _CRC.pack(zlib.crc32(head)), payload, _CRC.pack(zlib.crc32(payload))))


def _segment_name(first_lsn: int) -> str:
    return f"{first_lsn:020d}{SUFFIX}"


def _segments(directory: Path) -> list[tuple[int, Path]]:
    """The segment files of ``directory`` by their first LSN."""
    found = []
    for path in directory.glob(f"*{SUFFIX}"):
        stem = path.name[: -len(SUFFIX)]
        if stem.isdigit():
            found.append((int(stem), path))
    return sorted(found)


class Journal:
    """Appends records to the segment files of one directory, with group commit.

    Args:
        directory: Where the segments are (created if missing).
        next_lsn: The LSN of the first record this journal appends (a new segment).
        on_fsync: Called with each fsync's duration in seconds (for the metrics).

    Raises:
        StretchError: the directory cannot be written.

    """

    def __init__(
        self,
        directory: Path,
        next_lsn: int = 1,
        on_fsync: Callable[[float], None] | None = None,
    ) -> None:
        self.directory = directory
        self._on_fsync = on_fsync
        self._cond = threading.Condition()
        self._next = next_lsn
        self._written = next_lsn - 1  # the last LSN written to the buffer
        self._synced = next_lsn - 1  # the last LSN known durable
        self._syncing = False
        self._closed = False
        try:
            directory.mkdir(parents=True, exist_ok=True)
            for temp in directory.glob(f"*{SUFFIX}.tmp"):  # a segment a crash left unmade
                temp.unlink()
            self._file = self._open_segment(next_lsn)
        except OSError as exc:
            msg = f"journal {directory}: cannot open a segment: {exc}"
            raise StretchError(msg) from exc

    @property
    def next_lsn(self) -> int:
        """The LSN the next appended record gets."""
        with self._cond:
            return self._next

    def size_bytes(self) -> int:
        """Bytes of every segment of the journal on disk. O(segments)."""
        return sum(path.stat().st_size for _, path in _segments(self.directory))

    def append(self, payload: bytes) -> int:
        """Write a record into the buffer (not yet durable); return its LSN. O(len).

        Raises:
            StretchError: the journal is closed or the write failed.

        """
        if len(payload) > MAX_RECORD_BYTES:
            msg = f"journal {self.directory}: a record of {len(payload)} bytes is too large"
            raise StretchError(msg)
        with self._cond:
            if self._closed:
                msg = f"journal {self.directory} is closed"
                raise StretchError(msg)
            lsn = self._next
            try:
                self._file.write(_frame(lsn, payload))
            except OSError as exc:
                msg = f"journal {self.directory}: write failed: {exc}"
                raise StretchError(msg) from exc
            self._next += 1
            self._written = lsn
            return lsn

    def sync(self, lsn: int) -> None:
        """Return once every record up to ``lsn`` is on disk (group commit).

        Raises:
            StretchError: the fsync failed or did not finish within ``SYNC_TIMEOUT_S``.

        """
        deadline = time.monotonic() + SYNC_TIMEOUT_S
        with self._cond:
            while self._synced < lsn:
                if self._syncing:
                    if not self._cond.wait(max(deadline - time.monotonic(), 0.0)):
                        msg = f"journal {self.directory}: fsync took over {SYNC_TIMEOUT_S} s"
                        raise StretchError(msg)
                    continue
                self._syncing = True
                target, file = self._written, self._file
                try:
                    file.flush()
                    self._cond.release()
                    try:
                        started = time.perf_counter()
                        os.fsync(file.fileno())
                        if self._on_fsync is not None:
                            self._on_fsync(time.perf_counter() - started)
                    finally:
                        self._cond.acquire()
                except OSError as exc:
                    msg = f"journal {self.directory}: fsync failed: {exc}"
                    raise StretchError(msg) from exc
                finally:
                    self._syncing = False
                    self._cond.notify_all()
                self._synced = max(self._synced, target)

    def rotate(self) -> int:
        """Make everything durable and start a new segment; return its first LSN.

        Records before the returned LSN are in older segments only.
        """
        with self._cond:
            while self._syncing:
                self._cond.wait(SYNC_TIMEOUT_S)
            self._file.flush()
            os.fsync(self._file.fileno())
            self._synced = self._written
            self._file.close()
            self._file = self._open_segment(self._next)
            return self._next

    def remove_before(self, lsn: int) -> None:
        """Delete the segments whose records all have LSNs below ``lsn``."""
        segments = _segments(self.directory)
        removed = False
        for (_, path), (next_first, _) in zip(segments, segments[1:], strict=False):
            if next_first <= lsn:
                path.unlink(missing_ok=True)
                removed = True
        if removed:
            sync_directory(self.directory)

    def close(self) -> None:
        """Flush, fsync and close the current segment (appends then fail)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            while self._syncing:
                self._cond.wait(SYNC_TIMEOUT_S)
            try:
                self._file.flush()
                os.fsync(self._file.fileno())
            finally:
                self._file.close()

    def _open_segment(self, first_lsn: int) -> BinaryIO:
        """Open segment ``first_lsn`` to append; create it, header and all, if missing.

        It exists when nothing was appended since it was created (a second rotation, or a
        restart after one): the records continue in it.
        """
        path = self.directory / _segment_name(first_lsn)
        if not path.exists():
            temp = path.with_name(f"{path.name}.tmp")
            with temp.open("wb") as file:
                file.write(_segment_header(first_lsn))
                file.flush()
                os.fsync(file.fileno())
            temp.rename(path)
            sync_directory(self.directory)
        return path.open("ab")


@dataclass(frozen=True)
class JournalRecords:
    """What ``read_journal`` found: the records from an LSN on, and where it ends.

    Attributes:
        records: ``(lsn, payload)`` in LSN order.
        next_lsn: The LSN after the last good record (where a new journal continues).
        dropped_tail: Bytes of a cut-short last record that were dropped, if any.

    """

    records: list[tuple[int, bytes]]
    next_lsn: int
    dropped_tail: int


def read_journal(directory: Path, from_lsn: int = 1) -> JournalRecords:
    """Read and check every record from LSN ``from_lsn`` on (1, or a checkpoint's LSN).

    They start in the segment named ``from_lsn`` (segments before it are not read: a
    checkpoint covers them); each later segment must be named after the LSN that follows
    the records before it. A cut-short record at the end of the last segment is dropped
    and the file truncated. O(bytes of the segments read).

    Raises:
        DamagedStateError: any other damage, naming the file and the offset.

    """
    segments = _segments(directory)
    firsts = [first for first, _ in segments]
    if from_lsn not in firsts:
        msg = (
            f"journal file {directory / _segment_name(from_lsn)} is missing: the records "
            f"from {from_lsn} on are needed"
        )
        if firsts:
            msg += (
                f", and the journal starts at {_segment_name(firsts[0])}, so either this file "
                f"or a checkpoint at {firsts[0]} (covering the records before it) was lost"
            )
        raise DamagedStateError(msg)
    start = firsts.index(from_lsn)
    records: list[tuple[int, bytes]] = []
    expected = from_lsn
    dropped = 0
    for index in range(start, len(segments)):
        first, path = segments[index]
        if first != expected:
            msg = (
                f"journal file {path} starts at record {first}, but record {expected} comes "
                "next: a segment before it is missing or was cut short"
            )
            raise DamagedStateError(msg)
        last = index == len(segments) - 1
        data = path.read_bytes()
        pos = _check_header(data, path, first)
        while pos < len(data):
            frame = _parse(data, pos, path, last)
            if frame is None:  # a cut-short last record
                dropped = len(data) - pos
                logger.warning(
                    "journal %s: dropped a cut-short last record (%d bytes at offset %d)",
                    path,
                    dropped,
                    pos,
                )
                with path.open("r+b") as file:
                    file.truncate(pos)
                    os.fsync(file.fileno())
                break
            lsn, payload, pos = frame
            if lsn != expected:
                msg = f"journal file {path}: record {lsn} follows record {expected - 1}"
                raise DamagedStateError(msg)
            expected += 1
            records.append((lsn, payload))
    return JournalRecords(records, expected, dropped)


def _check_header(data: bytes, path: Path, first_lsn: int) -> int:
    """The offset of the first record of a segment, after its header.

    Raises:
        DamagedStateError: the header is missing (the file was cut or replaced) or damaged.

    """
    header = data[:SEGMENT_HEADER_BYTES]
    if header != _segment_header(first_lsn):
        problem = "is missing" if len(header) < SEGMENT_HEADER_BYTES else "is damaged"
        msg = (
            f"journal file {path}: its header {problem} (the file was cut short, emptied "
            "or replaced)"
        )
        raise DamagedStateError(msg)
    return SEGMENT_HEADER_BYTES


def _parse(data: bytes, pos: int, path: Path, last: bool) -> tuple[int, bytes, int] | None:
    """The record at ``pos``: (LSN, payload, next position), or None if cut short.

    Raises:
        DamagedStateError: the frame is damaged.

    """
    rest = len(data) - pos
    tail_is_cut = last and (rest < _HEAD.size + _CRC.size or not data[pos:].strip(b"\0"))
    if rest < _HEAD.size + _CRC.size or not data[pos:].strip(b"\0"):
        if tail_is_cut:
            return None
        msg = f"journal file {path}: a record at offset {pos} is cut short"
        raise DamagedStateError(msg)
    head = data[pos : pos + _HEAD.size]
    (head_crc,) = _CRC.unpack_from(data, pos + _HEAD.size)
    magic, length, lsn = _HEAD.unpack(head)
    if magic != MAGIC or zlib.crc32(head) != head_crc or length > MAX_RECORD_BYTES:
        msg = f"journal file {path}: a damaged record header at offset {pos}"
        raise DamagedStateError(msg)
    start = pos + _HEAD.size + _CRC.size
    end = start + length
    if end + _CRC.size > len(data):
        if last:
            return None
        msg = f"journal file {path}: record {lsn} at offset {pos} is cut short"
        raise DamagedStateError(msg)
    payload = data[start:end]
    (crc,) = _CRC.unpack_from(data, end)
    if zlib.crc32(payload) != crc:
        msg = f"journal file {path}: record {lsn} at offset {pos} fails its checksum"
        raise DamagedStateError(msg)
    return lsn, payload, end + _CRC.size
