"""The output log: ESG_out's rows as an append-only sequence with offsets (DESIGN.md 9).

Rows are appended in output order (``(ts, cause)``, the order of ``run_sn``); a reader
polls by offset and commits the offset it has consumed; the log trims the prefix every
registered reader committed. Offsets keep growing across trims.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from stretch.errors import InputError
from stretch.instance import OutputRow

__all__ = ["OutputLog"]


class OutputLog:
    """An append-only, thread-safe log of output rows with monotonically growing offsets.

    Args:
        readers: The reader names whose commits gate trimming (one default reader).

    """

    def __init__(self, readers: Iterable[str] = ("default",)) -> None:
        self._rows: list[OutputRow] = []
        self._base = 0  # the offset of self._rows[0]
        self._commits = dict.fromkeys(readers, 0)
        self._finished = False
        self._changed = threading.Condition()

    @property
    def end_offset(self) -> int:
        """The offset the next appended row will get."""
        with self._changed:
            return self._base + len(self._rows)

    @property
    def start_offset(self) -> int:
        """The offset of the oldest row still held (earlier ones were trimmed)."""
        with self._changed:
            return self._base

    @property
    def finished(self) -> bool:
        """Whether every row has been appended (the end of input went through)."""
        with self._changed:
            return self._finished

    def append(self, rows: Iterable[OutputRow]) -> None:
        """Append rows at the end. O(len(rows))."""
        with self._changed:
            self._rows.extend(rows)
            self._changed.notify_all()

    def finish(self) -> None:
        """Mark the log complete: no row will be appended any more."""
        with self._changed:
            self._finished = True
            self._changed.notify_all()

    def read(
        self, offset: int = 0, max_rows: int | None = None, wait_s: float = 0.0
    ) -> tuple[list[OutputRow], int]:
        """Rows from ``offset`` on, at most ``max_rows``, and the offset after them.

        Args:
            offset: The first offset wanted.
            max_rows: The most rows returned (all available if None).
            wait_s: How long to wait for a row at ``offset`` if none is there yet.

        Raises:
            InputError: ``offset`` was trimmed already or is negative.

        """
        with self._changed:
            if offset < self._base or offset < 0:
                msg = f"output offset {offset} was trimmed; the log starts at {self._base}"
                raise InputError(msg)
            if wait_s > 0:
                self._changed.wait_for(
                    lambda: self._finished or self._base + len(self._rows) > offset, wait_s
                )
            start = offset - self._base
            stop = len(self._rows) if max_rows is None else min(len(self._rows), start + max_rows)
            rows = self._rows[start:stop] if start < stop else []
            return rows, offset + len(rows)

    def wait_finished(self, timeout_s: float | None) -> bool:
        """Block until the log is finished; return whether it is."""
        with self._changed:
            return self._changed.wait_for(lambda: self._finished, timeout_s)

    def commit(self, offset: int, reader: str = "default") -> None:
        """Record that ``reader`` consumed everything before ``offset``; trim if all did.

        Raises:
            InputError: ``offset`` is beyond the end of the log or ``reader`` is unknown.

        """
        with self._changed:
            end = self._base + len(self._rows)
            if reader not in self._commits:
                msg = f"unknown output reader {reader!r}"
                raise InputError(msg)
            if not 0 <= offset <= end:
                msg = f"commit offset {offset} is outside the log [0, {end}]"
                raise InputError(msg)
            self._commits[reader] = max(self._commits[reader], offset)
            trim_to = min(self._commits.values())
            if trim_to > self._base:
                del self._rows[: trim_to - self._base]
                self._base = trim_to
