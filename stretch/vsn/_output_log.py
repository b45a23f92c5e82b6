"""The output log: ESG_out's rows as an append-only sequence with offsets (decision 9).

Rows are appended in output order (``(ts, cause)``, the order of ``run_sn``) as Arrow
record batches; a reader polls by offset and gets the rows from there as one table, and
commits the offset it has consumed; the log trims the prefix every registered reader
committed (whole batches, and the part of the first one kept). Offsets keep growing
across trims.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable, Iterable

import numpy as np
import pyarrow as pa

from stretch.errors import InputError
from stretch.model.oplus import END_OF_INPUT
from stretch.vsn.snapshot import OutputSnapshot

__all__ = ["OutputLog"]

logger = logging.getLogger(__name__)


class OutputLog:
    """An append-only, thread-safe log of output rows with monotonically growing offsets.

    Args:
        schema: The rows' Arrow schema (``ts`` first).
        readers: The reader names whose commits gate trimming (one default reader).

    """

    def __init__(self, schema: pa.Schema, readers: Iterable[str] = ("default",)) -> None:
        self.schema = schema
        self._batches: list[pa.RecordBatch] = []  # the rows held, oldest first
        self._ends: list[int] = []  # the offset after each held batch
        self._base = 0  # the offset of the first row held
        self._end = 0  # the offset the next appended row gets
        self._commits = dict.fromkeys(readers, 0)
        self._deferred: dict[str, int] = {}  # commits beyond the end, applied as rows come
        self._finished = False
        self._complete_before = -END_OF_INPUT  # D: every row with a smaller ts is in
        self._changed = threading.Condition()
        self._listeners: list[Callable[[], None]] = []

    @property
    def end_offset(self) -> int:
        """The offset the next appended row will get."""
        with self._changed:
            return self._end

    @property
    def start_offset(self) -> int:
        """The offset of the oldest row still held (earlier ones were trimmed)."""
        with self._changed:
            return self._base

    @property
    def committed_offset(self) -> int:
        """The offset every reader committed up to, commits beyond the end included.

        ``start_offset`` once the rows are there: a commit re-applied from a journal
        while a restarted operator produces its output again is ahead of it until then.
        """
        with self._changed:
            return min(self._committed().values())

    def _committed(self) -> dict[str, int]:
        """Each reader's committed offset, one waiting for rows included."""
        return {r: max(c, self._deferred.get(r, 0)) for r, c in self._commits.items()}

    @property
    def complete_before(self) -> int:
        """D: every output row with a smaller ``ts`` is in the log (restored with it)."""
        with self._changed:
            return self._complete_before

    @property
    def finished(self) -> bool:
        """Whether every row has been appended (the end of input went through)."""
        with self._changed:
            return self._finished

    def append(self, batches: Iterable[pa.RecordBatch], complete_before: int | None = None) -> None:
        """Append rows (record batches in the log's schema) at the end. O(len(batches)).

        ``complete_before``: after these rows, every output row with a smaller ``ts`` is
        in the log (the drainer's watermark; None leaves it as it is).
        """
        with self._changed:
            if complete_before is not None:
                self._complete_before = max(self._complete_before, complete_before)
            for batch in batches:
                if batch.num_rows:
                    self._batches.append(batch)
                    self._end += batch.num_rows
                    self._ends.append(self._end)
            if self._deferred:
                self._apply_deferred()
            self._changed.notify_all()
            self._notify()

    def _apply_deferred(self) -> None:
        """Apply the commits waiting for rows as far as the rows go; trim what all passed."""
        for reader, offset in list(self._deferred.items()):
            self._commits[reader] = max(self._commits[reader], min(offset, self._end))
            if offset <= self._end:
                del self._deferred[reader]
        if min(self._commits.values()) > self._base:
            self._trim(min(self._commits.values()))

    def finish(self) -> None:
        """Mark the log complete: no row will be appended any more."""
        with self._changed:
            self._finished = True
            self._complete_before = END_OF_INPUT
            self._changed.notify_all()
            self._notify()

    def snapshot(self) -> OutputSnapshot:
        """The rows held, their first offset, D, the commits and the end, at one moment."""
        with self._changed:
            return OutputSnapshot(
                start_offset=self._base,
                rows=pa.Table.from_batches(list(self._batches), schema=self.schema),
                complete_before=self._complete_before,
                commits=self._committed(),
                finished=self._finished,
            )

    def restore(self, snapshot: OutputSnapshot) -> None:
        """Start from a snapshot's rows and offsets (an empty log only)."""
        with self._changed:
            if self._end:
                msg = "only an empty output log can be restored"
                raise InputError(msg)
            self._base = self._end = snapshot.start_offset
            self._complete_before = snapshot.complete_before
            for batch in snapshot.rows.to_batches():
                if batch.num_rows:
                    self._batches.append(batch)
                    self._end += batch.num_rows
                    self._ends.append(self._end)
            for reader, offset in snapshot.commits.items():  # beyond the rows: when they come
                self._commits.setdefault(reader, 0)
                self._deferred[reader] = offset
            self._apply_deferred()

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (quick, thread-safe, e.g. an event loop's wake-up) on changes.

        It is called after every append and at the end, from the appending thread.
        """
        with self._changed:
            self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[], None]) -> None:
        """Stop calling ``listener``."""
        with self._changed:
            self._listeners.remove(listener)

    def _notify(self) -> None:
        for listener in self._listeners:
            try:
                listener()
            except Exception:  # a listener never stops the appender
                logger.exception("an output log listener failed")

    def read(
        self,
        offset: int = 0,
        max_rows: int | None = None,
        wait_s: float = 0.0,
        min_rows: int = 1,
    ) -> tuple[pa.Table, int]:
        """Rows from ``offset`` on, at most ``max_rows``, and the offset after them.

        O(log B + batches returned) for B batches held; the rows are not copied.

        Args:
            offset: The first offset wanted.
            max_rows: The most rows returned (all available if None).
            wait_s: How long to wait for ``min_rows`` rows from ``offset`` on (or the
                log's end) if fewer are there yet.
            min_rows: The rows worth waiting for.

        Raises:
            InputError: ``offset`` was trimmed already or is negative.

        """
        with self._changed:
            if wait_s > 0:
                self._changed.wait_for(
                    lambda: self._finished or self._end - offset >= min_rows, wait_s
                )
            if offset < self._base or offset < 0:
                msg = f"output offset {offset} was trimmed; the log starts at {self._base}"
                raise InputError(msg)
            stop = self._end if max_rows is None else min(self._end, offset + max_rows)
            pieces = []
            position = offset
            index = bisect.bisect_right(self._ends, offset)
            while position < stop:
                batch, end = self._batches[index], self._ends[index]
                begin = end - batch.num_rows
                take = min(end, stop) - position
                pieces.append(batch.slice(position - begin, take))
                position += take
                index += 1
            return pa.Table.from_batches(pieces, schema=self.schema), position

    def cut(self, ts: int) -> int:
        """The offset of the first row with ``ts`` or later (the end if none is held).

        Below the oldest row held the answer is the log's start. O(B + log rows) for B
        batches held.
        """
        with self._changed:
            for batch, end in zip(self._batches, self._ends, strict=True):
                column = batch.column(0)
                if column[len(column) - 1].as_py() >= ts:
                    inside = int(np.searchsorted(column.to_numpy(), ts, side="left"))
                    return int(end - batch.num_rows + inside)
            return self._end

    @property
    def uncommitted(self) -> int:
        """Rows held that some reader has not committed (the log's end minus its start)."""
        with self._changed:
            return self._uncommitted()

    def _uncommitted(self) -> int:
        return self._end - self._base

    def wait_room(self, limit: int, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` until fewer than ``limit`` rows are ``uncommitted``.

        Returns how many more rows fit under ``limit`` (0: none yet).
        """
        with self._changed:
            self._changed.wait_for(lambda: self._uncommitted() < limit, timeout_s)
            return max(0, limit - self._uncommitted())

    def wait_finished(self, timeout_s: float | None) -> bool:
        """Block until the log is finished; return whether it is."""
        with self._changed:
            return self._changed.wait_for(lambda: self._finished, timeout_s)

    def commit(self, offset: int, reader: str = "default", *, when_produced: bool = False) -> None:
        """Record that ``reader`` consumed everything before ``offset``; trim if all did.

        With ``when_produced`` an offset beyond the end waits until rows reach it.

        Raises:
            InputError: ``offset`` is beyond the end of the log or ``reader`` is unknown.

        """
        with self._changed:
            if reader not in self._commits:
                msg = f"unknown output reader {reader!r}"
                raise InputError(msg)
            if when_produced and offset > self._end:
                self._deferred[reader] = max(self._deferred.get(reader, 0), offset)
                offset = self._end
            if not 0 <= offset <= self._end:
                msg = f"commit offset {offset} is outside the log [0, {self._end}]"
                raise InputError(msg)
            self._commits[reader] = max(self._commits[reader], offset)
            trim_to = min(self._commits.values())
            if trim_to > self._base:
                self._trim(trim_to)
                self._changed.notify_all()  # room for the drainer (``wait_room``)

    def _trim(self, offset: int) -> None:
        """Drop the rows before ``offset``: whole batches, then the head of the next."""
        whole = bisect.bisect_right(self._ends, offset)
        del self._batches[:whole], self._ends[:whole]
        if self._batches:
            first = self._batches[0]
            self._batches[0] = first.slice(first.num_rows - (self._ends[0] - offset))
        self._base = offset
