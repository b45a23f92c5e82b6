"""Out-of-order input (docs/design.md decision 8): a per-source reorder buffer.

Spark micro-batches are not sorted. A source's rows wait here until its released watermark
passes them, then leave in stream order (``ts``, then equal ``ts`` by content:
``stretch.model.order``), so the stream the ESG sees is sorted and its sequence numbers
depend on the rows the source sent, not on how they were split into batches. Every row of
one ``ts`` leaves in the same release: a later row with that ``ts`` would be late.
The released watermark is the largest ``ts`` seen minus the allowed lateness, or an
explicit watermark (a heartbeat), whichever is later.

Late policy: a batch holding a row older than the released watermark is rejected whole
(``LateTupleError`` naming the row); nothing of it is kept. The caller counts it.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from stretch.errors import LateTupleError
from stretch.model.oplus import END_OF_INPUT
from stretch.model.order import in_stream_order
from stretch.model.schema import TS

__all__ = ["ReorderBuffer"]


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
        self._pending: list[pa.Table] = []
        self._pending_rows = 0

    def __len__(self) -> int:
        """Rows held back."""
        return self._pending_rows

    def held(self, schema: pa.Schema) -> pa.Table:
        """The rows held back, in arrival order (an empty table in ``schema`` if none)."""
        return pa.concat_tables(self._pending) if self._pending else schema.empty_table()

    def held_after(self, ts: NDArray[np.int64]) -> int:
        """Rows held back after a ``push`` of rows with these ``ts``. O(held + len(ts))."""
        if len(ts) == 0:
            return self._pending_rows
        released = max(self.released, int(ts.max()) - self.allowed_lateness_ms)
        held = int((ts >= released).sum())
        for table in self._pending:
            held += int((table.column(TS).to_numpy() >= released).sum())
        return held

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

    def push(self, table: pa.Table) -> pa.Table | None:
        """Take a batch (a conformed table, any order); return the rows now complete.

        Raises:
            LateTupleError: a row is older than the released watermark; nothing is kept.

        """
        ts = table.column(TS).to_numpy()
        if len(ts) == 0:
            return None
        self.check(ts)
        self._pending.append(table)
        self._pending_rows += len(ts)
        return self.advance(int(ts.max()) - self.allowed_lateness_ms)

    def advance(self, watermark: int) -> pa.Table | None:
        """Raise the released watermark (a lower one is ignored); return the rows it frees."""
        if watermark <= self.released or not self._pending:
            self.released = max(self.released, watermark)
            return None
        self.released = watermark
        held = in_stream_order(pa.concat_tables(self._pending))
        ts = held.column(TS).to_numpy()
        cut = int(np.searchsorted(ts, watermark, "left"))
        rest = held.slice(cut)
        self._pending = [rest] if rest.num_rows else []
        self._pending_rows = rest.num_rows
        return held.slice(0, cut) if cut else None

    def flush(self) -> pa.Table | None:
        """End of input: every row held, in order."""
        return self.advance(END_OF_INPUT)
