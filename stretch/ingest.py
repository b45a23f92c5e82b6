"""Per-source ingest: check a source's batches, number their rows, keep them for readers.

Each input source of a pipeline appends timestamp-sorted batches. A ``SourceStore`` checks
the order (DESIGN.md decision 8: a tuple older than what the source already released is
rejected, never merged out of order), gives each row its per-source sequence number (the
``seq`` of the total order, decision 2) and keeps the rows so that the ESG's opaque int64
payload can name a row by that number. Columns are kept as NumPy arrays for the compiled
kernels; ``StreamTuple``s are built on demand for the generic (Python O+) path.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from stretch.batch import Batch, StringDictionary
from stretch.errors import LateTupleError
from stretch.oplus import StreamTuple
from stretch.reorder import ReorderBuffer
from stretch.schema import ColumnType, Schema

__all__ = ["SourceStore"]


class SourceStore:
    """The rows one source has added, by sequence number, and its released watermark.

    Args:
        source: The source index (the stream index of the operator's inputs).
        schema: The payload columns of the stream.
        where: A description for messages, e.g. "source 1 of 'scalejoin'".
        dictionary: The pipeline's string dictionary (shared by all sources).
        allowed_lateness_ms: The lateness its reorder buffer allows.

    """

    def __init__(
        self,
        source: int,
        schema: Schema,
        where: str,
        dictionary: StringDictionary,
        allowed_lateness_ms: int = 0,
    ) -> None:
        self.source = source
        self.reorder = ReorderBuffer(allowed_lateness_ms, where)
        self.schema = schema
        self.where = where
        self.dictionary = dictionary
        self.lock = threading.Lock()  # one producer at a time (add, control, watermark)
        self.last_ts: int | None = None
        self.watermark: int | None = None
        self.closed = False
        self._length = 0
        self._ts = np.empty(0, dtype=np.int64)
        self._columns: dict[str, NDArray[Any]] = {
            name: np.empty(
                0, dtype=np.int32 if kind is ColumnType.STR else kind.arrow.to_pandas_dtype()
            )
            for name, kind in schema
        }
        self._tuples: list[StreamTuple] = []
        self._tuple_lock = threading.Lock()

    def __len__(self) -> int:
        return self._length

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
        if stop > self._ts.shape[0]:
            self._grow(stop)
        self._ts[start:stop] = ts
        for name in self.schema.names:
            self._columns[name][start:stop] = batch.columns[name]
        self._length = stop
        self.last_ts = int(ts[-1])
        return ts, np.arange(start, stop, dtype=np.int64)

    def _grow(self, needed: int) -> None:
        """Reallocate the columns with doubled capacity (amortised O(1) per row).

        Readers holding the old arrays still see every row they were told about.
        """
        capacity = max(needed, 2 * self._ts.shape[0], 1024)
        ts = np.empty(capacity, dtype=np.int64)
        ts[: self._length] = self._ts[: self._length]
        for name in self.schema.names:
            old = self._columns[name]
            new = np.empty(capacity, dtype=old.dtype)
            new[: self._length] = old[: self._length]
            self._columns[name] = new
        self._ts = ts

    def column(self, name: str) -> NDArray[Any]:
        """A payload column by sequence number (strings as codes); valid up to len(self)."""
        return self._columns[name]

    @property
    def ts(self) -> NDArray[np.int64]:
        """Event times by sequence number; valid up to len(self)."""
        return self._ts

    def tuple_at(self, seq: int) -> StreamTuple:
        """The ``StreamTuple`` of row ``seq`` (built once, shared by every instance)."""
        tuples = self._tuples
        if seq < len(tuples):
            return tuples[seq]
        with self._tuple_lock:
            count = len(self._tuples)
            if seq >= count:
                stop = len(self)
                decoded: dict[str, list[Any]] = {}
                for name, kind in self.schema:
                    values = self._columns[name][count:stop]
                    decoded[name] = (
                        self.dictionary.decode(values)
                        if kind is ColumnType.STR
                        else values.tolist()
                    )
                names = self.schema.names
                ts = self._ts[count:stop].tolist()
                self._tuples.extend(
                    StreamTuple(
                        int(ts[i]), self.source, count + i, {n: decoded[n][i] for n in names}
                    )
                    for i in range(stop - count)
                )
            return self._tuples[seq]
