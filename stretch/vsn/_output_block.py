"""Output rows as columns: the blocks that travel from the instances to the output log.

An ``OutputBlock`` holds output rows as an Arrow record batch (``ts`` first, then the
payload in output-schema order) and their sort key as an int64 matrix: ``ts``, then the
cause of each row (``stretch.model.instance.OutputRow``) padded to ``CAUSE_WIDTH`` ints.

Padding keeps the order of causes. A cause of f_O, ``(0, *created, j)``, has 6 ints and
one of f_U, ``(1, ts, source, seq, key_index, window, j)``, has 7. Two causes of one kind
have the same length, so appending the same 0 to both changes nothing between them; two
causes of different kinds differ in their first int, which decides between them before
the padding is reached. So the lexicographic order of the padded rows is the order of
the tuples, and sorting a block by its key sorts its rows by ``(ts, cause)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from stretch.model._order_kernels import keys_in_order, merge_runs, order_ties, spans_of
from stretch.model.instance import OutputRow
from stretch.model.schema import Schema

__all__ = ["CAUSE_WIDTH", "OutputBlock"]

CAUSE_WIDTH = 7
"""Ints in a padded cause: the length of an f_U cause."""


@dataclass(frozen=True)
class OutputBlock:
    """Output rows in columns, with their ``(ts, cause)`` sort key.

    Attributes:
        key: ``(1 + CAUSE_WIDTH, n)`` int64: row 0 is ``ts``, rows 1.. the padded cause.
        rows: The rows, ``ts`` first, in the operator's output schema.

    """

    key: NDArray[np.int64]
    rows: pa.RecordBatch

    def __len__(self) -> int:
        return int(self.rows.num_rows)

    @property
    def ts(self) -> NDArray[np.int64]:
        """The rows' event times."""
        ts: NDArray[np.int64] = self.key[0]
        return ts

    @classmethod
    def of_columns(
        cls,
        schema: pa.Schema,
        ts: NDArray[np.int64],
        cause: Sequence[NDArray[np.int64] | int],
        payload: Sequence[Any],
    ) -> OutputBlock:
        """A block of columns (a kernel's output). O(n).

        Args:
            schema: The output schema, ``ts`` first.
            ts: The rows' event times.
            cause: ``CAUSE_WIDTH`` cause columns; an int stands for a constant column.
            payload: One array per payload column of ``schema``.

        """
        key = np.empty((1 + CAUSE_WIDTH, len(ts)), dtype=np.int64)
        key[0] = ts
        for row, column in enumerate(cause, start=1):
            key[row] = column
        arrays = [pa.array(ts, pa.int64())]
        arrays += [pa.array(c, f.type) for c, f in zip(payload, list(schema)[1:], strict=True)]
        return cls(key, pa.RecordBatch.from_arrays(arrays, schema=schema))

    @classmethod
    def of_rows(cls, schema: Schema, rows: Sequence[OutputRow]) -> OutputBlock:
        """A block of ``OutputRow``s (the generic path's output), in their order. O(n)."""
        key = np.array(
            [(r.ts, *r.cause, *(0,) * (CAUSE_WIDTH - len(r.cause))) for r in rows],
            dtype=np.int64,
        ).reshape(len(rows), 1 + CAUSE_WIDTH)
        batch = schema.record_batch([r.ts for r in rows], [r.payload for r in rows])
        return cls(np.ascontiguousarray(key.T), batch)

    @classmethod
    def concat(cls, blocks: Sequence[OutputBlock]) -> OutputBlock:
        """The rows of ``blocks`` (at least one) one after the other. O(total rows)."""
        full = [block for block in blocks if len(block)]
        if len(full) <= 1:
            return full[0] if full else blocks[0]
        return cls(
            np.concatenate([block.key for block in full], axis=1),
            pa.concat_batches([block.rows for block in full]),
        )

    @classmethod
    def merge(cls, blocks: Sequence[OutputBlock]) -> OutputBlock:
        """The rows of ``blocks`` (at least one, each sorted) in ``(ts, cause)`` order.

        Joined as they are when each block starts at or after the end of the one before
        (O(n)), else merged (O(n log b) for b blocks; equal keys keep their blocks' order).
        """
        full = [block for block in blocks if len(block)]
        joined = cls.concat(blocks)
        if len(full) <= 1:
            return joined
        starts = np.cumsum([0, *(len(block) for block in full)], dtype=np.int64)
        order = merge_runs(joined.key, starts)
        return joined.take(order) if len(order) else joined

    @staticmethod
    def follow_on(blocks: Sequence[OutputBlock]) -> bool:
        """Whether sorted ``blocks`` are in ``(ts, cause)`` order one after the other.

        Only where they meet is compared: O(number of blocks).
        """
        full = [block for block in blocks if len(block)]
        return all(a.key[:, -1].tolist() <= b.key[:, 0].tolist() for a, b in pairwise(full))

    @classmethod
    def ordered(cls, blocks: Sequence[OutputBlock]) -> list[OutputBlock]:
        """Sorted ``blocks`` in ``(ts, cause)`` order, one after the other.

        As they are if they follow on (no row copied), else merged into one (``merge``).
        """
        return list(blocks) if cls.follow_on(blocks) else [cls.merge(blocks)]

    @staticmethod
    def split(
        blocks: Sequence[OutputBlock], ts: int
    ) -> tuple[list[OutputBlock], list[OutputBlock]]:
        """The rows of ``blocks`` (in order one after the other) before ``ts``, and the rest.

        Each as a list of non-empty blocks, without copying: the block holding the
        boundary is cut into two slices.
        """
        before: list[OutputBlock] = []
        for i, block in enumerate(blocks):
            if not len(block):
                continue
            cut = int(np.searchsorted(block.ts, ts, "left"))
            if cut < len(block):
                if cut:
                    before.append(block.slice(0, cut))
                rest = [block.slice(cut, len(block)), *blocks[i + 1 :]]
                return before, [block for block in rest if len(block)]
            before.append(block)
        return before, []

    @staticmethod
    def in_order(blocks: Sequence[OutputBlock]) -> bool:
        """Whether the rows of ``blocks``, one after the other, are in ``(ts, cause)`` order.

        O(n), in a compiled loop.
        """
        full = [block for block in blocks if len(block)]
        return all(keys_in_order(block.key) for block in full) and OutputBlock.follow_on(full)

    def take(self, indices: NDArray[np.int64]) -> OutputBlock:
        """The rows at ``indices``, in that order. O(len(indices))."""
        return OutputBlock(np.take(self.key, indices, axis=1), self.rows.take(indices))

    def slice(self, start: int, stop: int) -> OutputBlock:
        """Rows ``start..stop-1`` (no copy)."""
        return OutputBlock(self.key[:, start:stop], self.rows.slice(start, stop - start))

    @classmethod
    def gather(
        cls, blocks: Sequence[OutputBlock], block_of: NDArray[np.int64], at: NDArray[np.int64]
    ) -> OutputBlock:
        """Row ``at[i]`` of ``blocks[block_of[i]]`` for each i, equal ``ts`` by cause.

        The rows come in ``ts`` order, at least one from each block. Only the rows taken
        are copied, from the span of each block they lie in: the keys are gathered and
        ordered first, then the rows taken once, in the final order, from the spans as the
        chunks of one table. O(rows taken + the spans' rows).
        """
        low, high, indices = spans_of(block_of, at, len(blocks))
        bounds = zip(blocks, low.tolist(), high.tolist(), strict=True)
        spans = [block.slice(lo, hi) for block, lo, hi in bounds]
        key = np.take(np.concatenate([span.key for span in spans], axis=1), indices, axis=1)
        order = order_ties(key[0], key[1:])
        if len(order):
            key, indices = np.take(key, order, axis=1), indices[order]
        taken = pa.Table.from_batches([span.rows for span in spans]).take(indices)
        return cls(key, taken.combine_chunks().to_batches()[0])

    def ties_sorted(self) -> OutputBlock:
        """The rows, in ``ts`` order already, with each run of equal ``ts`` by cause.

        O(n) when they are in order, O(n log g) for runs of at most g rows otherwise.
        """
        order = order_ties(self.key[0], self.key[1:])
        return self.take(order) if len(order) else self

    def sorted(self) -> OutputBlock:
        """The rows in ``(ts, cause)`` order (stable). O(n log n)."""
        return self.take(np.lexsort(self.key[::-1]))
