"""Columnar batches: how tuples travel inside the service.

At the edges tuples are Arrow record batches (docs/design.md decision 3); inside they are NumPy
columns, and string columns are dictionary-encoded to int32 codes before any compiled
kernel sees them. Every tuple of a source also gets a sequence number, so the total order
``(ts, source, seq)`` of docs/design.md decision 2 is defined on every batch.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from stretch.model._byte_table import ByteTable
from stretch.model.schema import TS, ColumnType, Schema

__all__ = ["Batch", "StringDictionary", "compaction_due"]


def compaction_due(held: int, kept: int, limit: int) -> bool:
    """Whether a table is due a compaction: it holds ``limit`` bytes and twice ``kept``.

    ``held``: what its entries take now; ``kept``: what those its last compaction kept
    took. Twice: the entries still in use after a compaction are paid for again only once
    as many came after them, so compacting costs O(1) per entry added.
    """
    return held >= max(limit, 2 * kept)


class StringDictionary:
    """A string <-> int32 code table, safe to share between threads.

    Codes are handed out in order of first appearance, and equal strings get equal codes.
    The strings live as UTF-8 bytes in one arena (``ByteTable``): encoding a column and
    decoding codes are compiled loops over Arrow buffers, and each distinct string costs
    its bytes plus about 40. ``compact`` drops the strings no code in use names any more
    (their codes go to later new strings), so a long stream of distinct strings keeps
    only those of the rows still held.
    """

    def __init__(self) -> None:
        self._table = ByteTable()
        self._lock = threading.Lock()
        self._compacted_bytes = 0  # held_bytes right after the last compaction
        self.compactions = 0

    def __len__(self) -> int:
        return len(self._table)

    @property
    def nbytes(self) -> int:
        """Bytes the table holds."""
        return self._table.nbytes

    def encode(self, values: pa.Array | pa.ChunkedArray | list[str]) -> NDArray[np.int32]:
        """Codes of ``values`` (no nulls), adding the strings not seen before. O(bytes)."""
        if isinstance(values, list):
            values = pa.array(values, pa.string())
        chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
        with self._lock:
            codes = [self._table.number_texts(chunk) for chunk in chunks]
        if not codes:
            return np.empty(0, dtype=np.int32)
        return np.concatenate(codes).astype(np.int32)

    def due(self, limit: int) -> bool:
        """``compaction_due`` for its strings (their bytes plus about 40 each)."""
        return compaction_due(self._table.held_bytes, self._compacted_bytes, limit)

    def compact(self, in_use: Iterable[NDArray[np.integer[Any]]]) -> int:
        """Drop every string whose code is in none of ``in_use``; return how many went.

        ``in_use`` must hold every code anyone may still decode or compare: the caller
        stops every encoder and decoder meanwhile (a pipeline does it at an epoch barrier,
        holding its sources' locks). Codes in use keep their strings. O(codes + bytes kept).
        """
        with self._lock:
            keep = np.zeros(self._table.numbers, dtype=np.bool_)
            for codes in in_use:
                keep[codes] = True
            gone = self._table.retain(keep)
            self._compacted_bytes = self._table.held_bytes
            self.compactions += 1
        return gone

    def decode(self, codes: NDArray[np.int32]) -> list[str]:
        """The strings of ``codes``. O(len(codes))."""
        return self.decode_arrow(codes).to_pylist()  # type: ignore[no-any-return]

    def decode_arrow(self, codes: NDArray[np.int32]) -> pa.Array:
        """The strings of ``codes`` as an Arrow array. O(their bytes)."""
        return self._table.strings(np.asarray(codes, dtype=np.int64))


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
                columns[name] = dictionary.encode(column)
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
