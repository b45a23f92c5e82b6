"""Per-source ingest: check a source's batches, number their rows, keep them for readers.

Each input source of a pipeline appends timestamp-sorted batches. A ``SourceStore`` checks
the order (docs/design.md decision 8: a tuple older than what the source already released is
rejected, never merged out of order), gives each row its per-source sequence number (the
``seq`` of the total order, decision 2) and keeps the rows so that the ESG's opaque int64
payload can name a row by that number. Columns are kept as NumPy arrays for the compiled
kernels; ``StreamTuple``s are built on demand for the generic (Python O+) path.

Rows no instance can read any more are dropped (``trim``), so a long-running source holds
only about a window of rows. Readers take a ``SourceRows`` snapshot (``rows()``) after
they got the sequence numbers they look up; row ``seq`` is at ``seq - base`` in it.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from scalegate import ElasticScaleGate
from stretch.errors import LateTupleError, StretchError
from stretch.model.batch import Batch, StringDictionary
from stretch.model.oplus import END_OF_INPUT, StreamTuple
from stretch.model.schema import TS, ColumnType, Schema
from stretch.vsn._reorder import ReorderBuffer
from stretch.vsn.snapshot import SourceSnapshot

__all__ = ["SourceRows", "SourceStore", "column_dtype"]

ADD_CHUNK = 4096
"""Rows per ESG_in offer, so a big table goes in as room frees rather than all at once."""


def column_dtype(kind: ColumnType) -> np.dtype[Any]:
    """The NumPy type a source holds a column of ``kind`` in (strings as int32 codes)."""
    return np.dtype(np.int32 if kind is ColumnType.STR else kind.arrow.to_pandas_dtype())


VIEW_TRIM = 4
"""A trim keeps its rows in place (views) when they are more than this many times the rows
it drops (``SourceStore.trim``)."""


@dataclass(frozen=True)
class SourceRows:
    """The rows a source holds, from sequence number ``base``: row seq is at ``seq - base``.

    A snapshot: a trim or a reallocation publishes a new one, and appends write past the
    rows it was taken with, so it stays valid for every row it held or was told about.
    """

    base: int
    ts: NDArray[np.int64]
    columns: dict[str, NDArray[Any]]

    def column(self, name: str) -> NDArray[Any]:
        """A payload column (strings as codes), row seq at ``seq - base``."""
        return self.columns[name]


class SourceStore:
    """The rows one source has added, by sequence number, and its released watermark.

    Args:
        source: The source index (the stream index of the operator's inputs).
        schema: The payload columns of the stream.
        where: A description for messages, e.g. "source 1 of 'scalejoin'".
        dictionary: The pipeline's string dictionary (shared by all sources).
        allowed_lateness_ms: The lateness its reorder buffer allows.
        first_seq: The sequence number of its first row (a restored source continues
            the numbering of the one it was snapshotted from).

    """

    def __init__(
        self,
        source: int,
        schema: Schema,
        where: str,
        dictionary: StringDictionary,
        allowed_lateness_ms: int = 0,
        first_seq: int = 0,
    ) -> None:
        self.source = source
        self.reorder = ReorderBuffer(allowed_lateness_ms, where)
        self.schema = schema
        self.where = where
        self.dictionary = dictionary
        self.lock = threading.Lock()  # one producer at a time (add, control, watermark)
        self.last_ts: int | None = None
        self.watermark: int | None = None  # the latest watermark added to ESG_in
        self.closed = False  # ESG_in got the end of input
        self._first_seq = first_seq
        self.fed = first_seq  # rows (by seq) already in ESG_in; the rest wait for room
        self.controls: deque[int] = deque()  # epochs whose control tuple waits for room
        self._length = first_seq
        self._rows = self._allocate(first_seq, 0)
        self._tuples: tuple[int, list[StreamTuple]] = (first_seq, [])  # (base, StreamTuples)
        self._tuple_lock = threading.Lock()

    def __len__(self) -> int:
        return self._length

    @property
    def input_closed(self) -> bool:
        """Whether the source's input ended (its rows may still wait to enter ESG_in)."""
        return self.reorder.released == END_OF_INPUT

    @property
    def unfed(self) -> int:
        """Rows stored but not yet in ESG_in (waiting for room)."""
        return self._length - self.fed

    def has_backlog(self) -> bool:
        """Whether control tuples, rows or the released watermark still wait for ESG_in.

        Read without the lock: a producer records what waits before it offers it to the
        gate, so a reader that freed room and then sees no backlog freed it in time.
        """
        gate_watermark = self.watermark if self.watermark is not None else -END_OF_INPUT
        return (
            self.fed < self._length
            or bool(self.controls)
            or (self.reorder.released > gate_watermark and not self.closed)
        )

    def append(self, data: pa.Table) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Store a batch already conformed to the schema; return its ``ts`` and seqs.

        The caller holds ``self.lock`` (the pipeline conforms batches when they arrive,
        before the reorder buffer). O(len(data)).

        Raises:
            LateTupleError: the batch is not sorted by ``ts``, or starts before the
                source's last ``ts`` or released watermark.

        """
        batch = Batch.from_arrow(data, self.schema, self.dictionary)
        ts = batch.ts
        if len(ts) == 0:
            return ts, np.empty(0, dtype=np.int64)
        steps = np.diff(ts)
        if steps.size and int(steps.min()) < 0:
            row = int(np.argmax(steps < 0)) + 2
            msg = (
                f"{self.where}: ts {int(ts[row - 1])} at row {row} is before the ts "
                f"{int(ts[row - 2])} of the row above; each batch must be sorted by ts"
            )
            raise LateTupleError(msg)
        floor = max(x for x in (self.last_ts, self.watermark, -(2**63)) if x is not None)
        if int(ts[0]) < floor:
            msg = (
                f"{self.where}: ts {int(ts[0])} is before the source's last ts or watermark {floor}"
            )
            raise LateTupleError(msg)
        start = self._length
        stop = start + len(ts)
        rows = self._rows
        if stop - rows.base > rows.ts.shape[0]:
            rows = self._moved(rows.base, 2 * (stop - rows.base))
        rows.ts[start - rows.base : stop - rows.base] = ts
        for name in self.schema.names:
            rows.columns[name][start - rows.base : stop - rows.base] = batch.columns[name]
        self._length = stop
        self.last_ts = int(ts[-1])
        return ts, np.arange(start, stop, dtype=np.int64)

    def feed(self, gate: ElasticScaleGate, horizon: int | None, trim_rows: int) -> bool:
        """Offer this source's backlog to ESG_in as far as there is room now (Alg. 5).

        In order: pending control tuples (at the source's last ts in the gate), rows not
        yet in the gate, then the released watermark; never waits for room. Then drops
        the rows before ``horizon`` (no instance reads them any more) once ``trim_rows``
        can go. The caller holds ``self.lock``. Returns whether anything went in.
        O(rows moved log d).
        """
        before = (self.fed, len(self.controls), self.watermark)
        if self._offer(gate):
            if horizon is not None:
                self.trim(horizon, trim_rows)
            released = self.reorder.released
            in_gate = self.watermark if self.watermark is not None else -END_OF_INPUT
            if released > in_gate and gate.offer_watermark(self.source, released):
                self.watermark = released
                self.closed = released == END_OF_INPUT
        return before != (self.fed, len(self.controls), self.watermark)

    def _offer(self, gate: ElasticScaleGate) -> bool:
        """Offer control tuples, then rows; return whether all of them went in."""
        while True:
            while self.controls:
                if not gate.offer_control(self.source, self.controls[0]):
                    return False
                self.controls.popleft()
            if not self.unfed:
                return True
            rows = self._rows
            start = self.fed - rows.base
            ts = rows.ts[start : start + min(self.unfed, ADD_CHUNK)]
            added = gate.offer_batch(
                self.source, ts, np.arange(self.fed, self.fed + len(ts), dtype=np.int64)
            )
            if not added:
                return False
            self.fed += added

    def window_rows(self, window_ms: int) -> int:
        """Rows held within ``window_ms`` of the last ``ts`` (read without the lock)."""
        held = self._rows
        ts = held.ts[: max(self._length - held.base, 0)]
        if ts.shape[0] == 0:
            return 0
        return int(ts.shape[0]) - int(np.searchsorted(ts, int(ts[-1]) - window_ms, side="left"))

    def snapshot(self, horizon_ts: int | None) -> SourceSnapshot:
        """The source's rows from ``horizon_ts`` on and its reorder buffer, as a copy.

        The caller holds ``self.lock``. O(rows kept).

        Raises:
            StretchError: rows at or after ``horizon_ts`` were trimmed already.

        """
        held = self._rows
        ts = held.ts[: self._length - held.base]
        first = 0 if horizon_ts is None else int(np.searchsorted(ts, horizon_ts, side="left"))
        if horizon_ts is None and held.base > self._first_seq:
            msg = f"{self.where}: rows before seq {held.base} were trimmed; no snapshot"
            raise StretchError(msg)
        columns: dict[str, pa.Array] = {TS: pa.array(ts[first:].copy(), pa.int64())}
        for name, kind in self.schema:
            values = held.columns[name][first : self._length - held.base]
            columns[name] = (
                self.dictionary.decode_arrow(values)
                if kind is ColumnType.STR
                else pa.array(values.copy(), kind.arrow)
            )
        return SourceSnapshot(
            first_seq=held.base + first,
            rows=pa.table(columns, schema=self.schema.arrow()),
            held=self.reorder.held(self.schema.arrow()),
            released=self.reorder.released,
            closed=self.input_closed,
            allowed_lateness_ms=self.reorder.allowed_lateness_ms,
        )

    def codes_in_use(self) -> list[NDArray[np.int32]]:
        """The string codes of the rows held, a column each (the caller holds the lock)."""
        held = self._rows
        stop = self._length - held.base
        return [held.columns[name][:stop] for name, kind in self.schema if kind is ColumnType.STR]

    def rows(self) -> SourceRows:
        """The rows held now (valid for every sequence number added so far from ``base``)."""
        return self._rows

    def trim(self, before_ts: int, min_rows: int) -> int:
        """Drop the rows with ``ts < before_ts`` if there are at least ``min_rows``.

        The caller holds ``self.lock`` and guarantees that no reader looks those rows up
        any more. Returns the new ``base``. The rows kept move to new arrays (which frees
        the old ones once no reader holds them) unless they are more than ``VIEW_TRIM``
        times the rows dropped: then the arrays stay, seen from the first row kept, until
        the next growth. So a row is copied O(1) times, whatever the window.
        """
        rows = self._rows
        held = rows.ts[: self._length - rows.base]
        drop = int(np.searchsorted(held, before_ts, side="left"))
        if drop >= max(min_rows, 1):
            kept = held.shape[0] - drop
            if kept > VIEW_TRIM * drop:
                # Copying a long window at every trim would cost it again and again: the
                # rows kept stay where they are (views past the dropped ones), and the
                # next growth (``append``) copies only them.
                columns = {name: column[drop:] for name, column in rows.columns.items()}
                self._rows = SourceRows(rows.base + drop, rows.ts[drop:], columns)
            else:
                self._moved(rows.base + drop, 2 * kept)
            with self._tuple_lock:
                base, tuples = self._tuples
                self._tuples = (rows.base + drop, tuples[rows.base + drop - base :])
        return self._rows.base

    def _moved(self, base: int, capacity: int) -> SourceRows:
        """Publish new arrays holding rows ``base..`` with room for ``capacity`` rows."""
        old = self._rows
        new = self._allocate(base, max(capacity, 1024))
        kept = slice(base - old.base, self._length - old.base)
        new.ts[: self._length - base] = old.ts[kept]
        for name in self.schema.names:
            new.columns[name][: self._length - base] = old.columns[name][kept]
        self._rows = new
        return new

    def _allocate(self, base: int, capacity: int) -> SourceRows:
        return SourceRows(
            base,
            np.empty(capacity, dtype=np.int64),
            {name: np.empty(capacity, dtype=column_dtype(kind)) for name, kind in self.schema},
        )

    def tuple_at(self, seq: int) -> StreamTuple:
        """The ``StreamTuple`` of row ``seq`` (built once, shared by every instance)."""
        base, tuples = self._tuples
        if 0 <= seq - base < len(tuples):
            return tuples[seq - base]
        with self._tuple_lock:
            base, tuples = self._tuples
            if seq < base:
                msg = f"{self.where}: row {seq} was trimmed (rows from {base} are held)"
                raise LookupError(msg)
            count = base + len(tuples)
            if seq >= count:
                rows, stop = self._rows, len(self)
                held = slice(count - rows.base, stop - rows.base)
                decoded: dict[str, list[Any]] = {}
                for name, kind in self.schema:
                    values = rows.columns[name][held]
                    decoded[name] = (
                        self.dictionary.decode(values)
                        if kind is ColumnType.STR
                        else values.tolist()
                    )
                names = self.schema.names
                ts = rows.ts[held].tolist()
                tuples.extend(
                    StreamTuple(
                        int(ts[i]), self.source, count + i, {n: decoded[n][i] for n in names}
                    )
                    for i in range(stop - count)
                )
            return tuples[seq - base]
