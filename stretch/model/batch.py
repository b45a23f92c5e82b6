"""Columnar batches: how tuples travel inside the service.

At the edges tuples are Arrow record batches (docs/design.md decision 3); inside they are NumPy
columns, and string columns are dictionary-encoded to int32 codes before any compiled
kernel sees them. Every tuple of a source also gets a sequence number, so the total order
``(ts, source, seq)`` of docs/design.md decision 2 is defined on every batch.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from stretch.model.schema import TS, ColumnType, Schema

__all__ = ["Batch", "StringDictionary"]


class StringDictionary:
    """An append-only string <-> int32 code table, safe to share between threads.

    Codes are handed out in order of first appearance, so the encoding of a stream is
    the same whatever the parallelism.
    """

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}
        self._strings: list[str] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._strings)

    def encode(self, values: list[str]) -> NDArray[np.int32]:
        """Codes of ``values``, adding the strings not seen before. O(len(values))."""
        codes = np.empty(len(values), dtype=np.int32)
        with self._lock:
            for i, value in enumerate(values):
                code = self._codes.get(value)
                if code is None:
                    code = len(self._strings)
                    self._codes[value] = code
                    self._strings.append(value)
                codes[i] = code
        return codes

    def decode(self, codes: NDArray[np.int32]) -> list[str]:
        """The strings of ``codes``. O(len(codes))."""
        strings = self._strings
        return [strings[c] for c in codes.tolist()]

    def decode_arrow(self, codes: NDArray[np.int32]) -> pa.Array:
        """The strings of ``codes`` as an Arrow array: one lookup per distinct code. O(n log n)."""
        distinct, index = np.unique(codes, return_inverse=True)
        strings = self._strings
        return pa.array([strings[c] for c in distinct.tolist()], pa.string()).take(index)


@dataclass
class Batch:
    """A batch of one source's tuples as NumPy columns.

    Attributes:
        schema: The payload columns.
        ts: Event times (int64 ms), non-decreasing within a source's stream.
        columns: One array per payload column; string columns hold int32 codes.
        dictionary: The table that decodes string columns.

    """

    schema: Schema
    ts: NDArray[np.int64]
    columns: dict[str, NDArray[Any]]
    dictionary: StringDictionary = field(default_factory=StringDictionary)

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    @classmethod
    def from_arrow(
        cls,
        data: pa.Table | pa.RecordBatch,
        schema: Schema,
        dictionary: StringDictionary | None = None,
    ) -> Batch:
        """Convert a table already conformed to ``schema`` (see ``schema.conform``)."""
        dictionary = dictionary if dictionary is not None else StringDictionary()
        ts = np.asarray(data.column(TS).to_numpy(), dtype=np.int64)
        columns: dict[str, NDArray[Any]] = {}
        for name, kind in schema:
            column = data.column(name)
            if kind is ColumnType.STR:
                columns[name] = dictionary.encode(column.to_pylist())
            else:
                columns[name] = np.asarray(column.to_numpy(zero_copy_only=False))
        return cls(schema, ts, columns, dictionary)

    def to_arrow(self) -> pa.Table:
        """The batch as an Arrow table, ``ts`` first, strings decoded."""
        arrays = [pa.array(self.ts, pa.int64())]
        for name, kind in self.schema:
            values = self.columns[name]
            if kind is ColumnType.STR:
                arrays.append(pa.array(self.dictionary.decode(values), pa.string()))
            else:
                arrays.append(pa.array(values, kind.arrow))
        return pa.Table.from_arrays(arrays, schema=self.schema.arrow())

    def rows(self) -> list[dict[str, Any]]:
        """The payload of each tuple as a dict (strings decoded), for the reference runtime."""
        decoded: dict[str, list[Any]] = {}
        for name, kind in self.schema:
            values = self.columns[name]
            decoded[name] = (
                self.dictionary.decode(values) if kind is ColumnType.STR else values.tolist()
            )
        names = self.schema.names
        return (
            [
                dict(zip(names, values, strict=True))
                for values in zip(*(decoded[n] for n in names), strict=True)
            ]
            if names
            else [{} for _ in range(len(self))]
        )
