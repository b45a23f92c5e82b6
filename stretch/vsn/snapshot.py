"""A pipeline's restorable state: what ``Pipeline.snapshot`` copies and ``restore`` rebuilds.

The state sigma of an O+ operator is a function of the tuples in its open windows: every
window instance ``[l*WA, l*WA + WS)`` still open at output watermark D holds only tuples
with ``ts >= D - WS``, and an output row with ``ts >= D`` (a window's end, or a join
pair's later tuple) depends only on such tuples. So a snapshot keeps, instead of each key
group's state, the input that determines it: per source, the rows it released with
``ts >= D - WS - WA - 1`` (in sequence order) and the rows its reorder buffer still holds
(put in stream order when released), with the released watermark; plus the output log's
rows not yet committed, which are exactly the output rows with ``ts < D``. Restoring re-runs the
operator over the kept rows, drops the output rows before D (they are in the log
already) and continues the offsets: the output is identical to an uninterrupted run's,
offset for offset, because the operator is deterministic (docs/design.md decision 2) and
the kept rows keep their order (a source's sequence order is the stable ``ts`` order of
its arrivals, whatever the release steps were). This works for every operator, custom
Python ones included, with nothing to serialise but rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

__all__ = ["OutputSnapshot", "PipelineSnapshot", "SourceSnapshot"]


@dataclass(frozen=True)
class SourceSnapshot:
    """One input source.

    Attributes:
        first_seq: The sequence number of the first row of ``rows`` (a restored source
            continues the numbering, so the total order's ties break the same way).
        rows: Released rows with ``ts`` at or after the snapshot's horizon, in sequence
            order (the source's schema, ``ts`` first, strings as strings).
        held: Rows its reorder buffer holds back (run by run, each in stream order).
        released: The released watermark.
        closed: Whether the source's input ended.
        allowed_lateness_ms: The lateness its reorder buffer allows.

    """

    first_seq: int
    rows: pa.Table
    held: pa.Table
    released: int
    closed: bool
    allowed_lateness_ms: int


@dataclass(frozen=True)
class OutputSnapshot:
    """The output log.

    Attributes:
        start_offset: The offset of ``rows``' first row (earlier ones were committed).
        rows: The rows not yet trimmed, every output row with ``ts < complete_before``
            from ``start_offset`` on.
        complete_before: D: every output row with a smaller ``ts`` is in the log.
        commits: Each reader's committed offset (possibly beyond ``rows``: a commit that
            waits for the output to be produced again after a restart).
        finished: Every row is in.

    """

    start_offset: int
    rows: pa.Table
    complete_before: int
    commits: dict[str, int]
    finished: bool


@dataclass(frozen=True)
class PipelineSnapshot:
    """A consistent copy of a pipeline's restorable state.

    Attributes:
        epoch: The epoch of the latest requested plan (it is in force after restore).
        parallelism: m of that plan.
        max_parallelism: n.
        mapping: f_mu of that plan.
        sources: Every input source.
        output: The output log.
        horizon_ts: The ``ts`` from which sources kept their rows (None: all of them).

    """

    epoch: int
    parallelism: int
    max_parallelism: int
    mapping: tuple[int, ...]
    sources: tuple[SourceSnapshot, ...]
    output: OutputSnapshot
    horizon_ts: int | None

    @property
    def nbytes(self) -> int:
        """Bytes of the rows it holds (input and output)."""
        kept = sum(s.rows.nbytes + s.held.nbytes for s in self.sources)
        return int(self.output.rows.nbytes + kept)
