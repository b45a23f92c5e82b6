"""Out-of-order input (docs/design.md decision 8): a per-source reorder buffer.

Spark micro-batches are not sorted. A source's rows wait here until its released watermark
passes them, then leave in stream order (``ts``, then equal ``ts`` by content:
``stretch.model.order``), so the stream the ESG sees is sorted and its sequence numbers
depend on the rows the source sent, not on how they were split into batches. Every row of
one ``ts`` leaves in the same release: a later row with that ``ts`` would be late.
The released watermark is the largest ``ts`` seen minus the allowed lateness, or an
explicit watermark (a heartbeat), whichever is later.

The rows held are kept as runs, each in stream order. A release sorts only what it frees
(the freed prefixes of the runs with the new batch) and leaves the rest where it is, so a
batch costs O((freed + batch) log) however many rows the lateness holds back; the rows of
the batch that are not freed form a new run. Past ``MAX_RUNS`` runs the two neighbouring
runs with the fewest rows between them are merged (``_merge_smallest_pair``): of
``MAX_RUNS + 1`` runs some neighbouring pair holds at most 1/32 of the rows held, so no
batch pays for a merge of everything.

Late policy: a batch holding a row older than the released watermark is rejected whole
(``LateTupleError`` naming the row); nothing of it is kept. The caller counts it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from stretch.errors import LateTupleError
from stretch.model.oplus import END_OF_INPUT
from stretch.model.order import in_stream_order
from stretch.model.schema import TS

__all__ = ["MAX_RUNS", "ReorderBuffer"]

MAX_RUNS = 64
"""Runs held at most: one more makes two neighbouring runs merge."""


@dataclass(frozen=True, slots=True)
class _Run:
    """Rows in stream order, and their ``ts``."""

    rows: pa.Table
    ts: NDArray[np.int64]

    @classmethod
    def of(cls, rows: pa.Table) -> _Run:
        return cls(rows, np.ascontiguousarray(rows.column(TS).to_numpy(), dtype=np.int64))

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    def cut(self, watermark: int) -> int:
        """How many rows lie before ``watermark``."""
        return int(np.searchsorted(self.ts, watermark, "left"))


class ReorderBuffer:
    """Holds one source's rows until they are complete.

    Args:
        allowed_lateness_ms: How far behind the largest ``ts`` seen a row may arrive.
        where: The source, for messages.

    Attributes:
        released: The released watermark: every row released has ``ts`` below it and
            every later row must have ``ts`` at or above it.

    """

    def __init__(self, allowed_lateness_ms: int, where: str) -> None:
        if allowed_lateness_ms < 0:
            msg = f"{where}: allowed lateness must be >= 0 ms, got {allowed_lateness_ms}"
            raise ValueError(msg)
        self.allowed_lateness_ms = allowed_lateness_ms
        self.where = where
        self.released = -END_OF_INPUT
        self._runs: list[_Run] = []
        self._held_rows = 0

    def __len__(self) -> int:
        """Rows held back."""
        return self._held_rows

    def held(self, schema: pa.Schema) -> pa.Table:
        """The rows held back, run by run (an empty table in ``schema`` if none)."""
        if not self._runs:
            return schema.empty_table()
        return pa.concat_tables([r.rows for r in self._runs])

    def held_after(self, ts: NDArray[np.int64], watermark: int | None = None) -> int:
        """Rows held back after a ``push`` of rows with these ``ts`` (and ``watermark``).

        O(runs log + len(ts)).
        """
        released = self._released_by(ts, watermark)
        held = int((ts >= released).sum())
        if released == self.released:  # nothing held is freed
            return self._held_rows + held
        return held + sum(len(r) - r.cut(released) for r in self._runs)

    def _released_by(self, ts: NDArray[np.int64], watermark: int | None) -> int:
        """The released watermark once rows with these ``ts`` (and ``watermark``) are pushed."""
        released = self.released if watermark is None else max(self.released, watermark)
        return released if len(ts) == 0 else max(released, int(ts.max()) - self.allowed_lateness_ms)

    def check(self, ts: NDArray[np.int64]) -> None:
        """Refuse rows older than the released watermark. O(len(ts)).

        Raises:
            LateTupleError: a row is late (its ``rows`` counts them); nothing is kept.

        """
        late = np.flatnonzero(ts < self.released)
        if len(late):
            row = int(late[0])
            msg = (
                f"{self.where}: row {row + 1} has ts {int(ts[row])}, before the released "
                f"watermark {self.released} ({len(late)} late row(s); the batch was rejected)"
            )
            raise LateTupleError(msg, rows=len(late))

    def push(self, table: pa.Table, watermark: int | None = None) -> pa.Table | None:
        """Take a batch (a conformed table, any order); return the rows now complete.

        ``watermark``, if given, is then advanced to as by ``advance``, in the same release
        (one sort of what is freed instead of two).

        Raises:
            LateTupleError: a row is older than the released watermark; nothing is kept.

        """
        ts = table.column(TS).to_numpy()
        if len(ts) == 0:
            return None if watermark is None else self.advance(watermark)
        self.check(ts)
        return self._release(self._released_by(ts, watermark), table)

    def advance(self, watermark: int) -> pa.Table | None:
        """Raise the released watermark (a lower one is ignored); return the rows it frees."""
        return self._release(watermark, None)

    def flush(self) -> pa.Table | None:
        """End of input: every row held, in order."""
        return self.advance(END_OF_INPUT)

    def _release(self, watermark: int, batch: pa.Table | None) -> pa.Table | None:
        """Free the rows before ``watermark`` (and ``batch``'s later rows become a run).

        Only the runs that start before the watermark are cut; their freed prefixes and the
        batch are put in stream order together, once.
        """
        self.released = max(self.released, watermark)
        parts, kept = [], []
        for run in self._runs:
            cut = 0 if run.ts[0] >= self.released else run.cut(self.released)
            if cut:
                parts.append(run.rows.slice(0, cut))
            if cut == 0:
                kept.append(run)
            elif cut < len(run):
                kept.append(_Run(run.rows.slice(cut), run.ts[cut:]))
        if batch is None and not parts:
            return None
        if batch is not None:
            parts.append(batch)
        ordered = _Run.of(in_stream_order(pa.concat_tables(parts)))
        cut = ordered.cut(self.released)
        if cut < len(ordered):  # the batch's rows still held
            kept.append(_Run(ordered.rows.slice(cut), ordered.ts[cut:]))
        if len(kept) > MAX_RUNS:  # one release adds at most one run
            _merge_smallest_pair(kept)
        self._runs = kept
        self._held_rows = sum(len(r) for r in kept)
        return ordered.rows.slice(0, cut) if cut else None


def _merge_smallest_pair(runs: list[_Run]) -> None:
    """Merge, in place, the two neighbouring runs that hold the fewest rows together."""
    sizes = np.array([len(r) for r in runs])
    i = int(np.argmin(sizes[:-1] + sizes[1:]))
    both = pa.concat_tables([runs[i].rows, runs[i + 1].rows])
    runs[i : i + 2] = [_Run.of(in_stream_order(both).combine_chunks())]
