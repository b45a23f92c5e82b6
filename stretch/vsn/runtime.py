"""The VSN runtime's entry points: ``setup`` (section 7) and the replays of tables.

``setup(op, m, n)`` starts a ``Pipeline``: n O+ instances sharing one state, m of them
connected to ESG_in and ESG_out (Fig. 5). ``setup(upstream, op, m, n)`` chains: the output
of ``upstream`` (a pipeline) becomes input 0 of the new one. ``run_vsn_pieces`` (the CLI's
replay) replays tables through a pipeline, with reconfigurations at given event times, and
gives the output a bounded piece at a time; ``run_vsn`` returns it whole. Either equals
``run_sn``'s row for row (docs/design.md decision 2).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import overload

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from stretch.errors import InputError
from stretch.model.oplus import END_OF_INPUT, OPlus
from stretch.model.schema import TS, Schema, conform
from stretch.vsn.pipeline import Pipeline
from stretch.vsn.settings import RuntimeSettings

__all__ = ["run_vsn", "run_vsn_pieces", "setup"]

CHAIN_WAIT_S = 0.5
"""How long a chain's forwarding thread waits for upstream rows before checking for stop."""


@overload
def setup(
    op: OPlus,
    m: int,
    n: int,
    /,
    *,
    settings: RuntimeSettings | None = None,
    audit: bool | None = None,
    compiled: bool | None = None,
    capacity: int | None = None,
    allowed_lateness_ms: int | None = None,
) -> Pipeline: ...


@overload
def setup(
    upstream: Pipeline,
    op: OPlus,
    m: int,
    n: int,
    /,
    *,
    settings: RuntimeSettings | None = None,
    audit: bool | None = None,
    compiled: bool | None = None,
    capacity: int | None = None,
    allowed_lateness_ms: int | None = None,
) -> Pipeline: ...


def setup(
    *args: object,
    settings: RuntimeSettings | None = None,
    audit: bool | None = None,
    compiled: bool | None = None,
    capacity: int | None = None,
    allowed_lateness_ms: int | None = None,
) -> Pipeline:
    """Start a VSN pipeline: ``setup(O+, m, n)`` or ``setup(ESG_in, O+, m, n)`` (section 7).

    Args:
        *args: ``(op, m, n)``, or ``(upstream, op, m, n)`` where ``upstream`` is the
            pipeline whose output feeds input 0 of the new one.
        settings: The runtime's settings (``RuntimeSettings()`` if None); the keywords
            below override its fields of the same name.
        audit: Check that no key group is touched by two instances in one epoch.
        compiled: Use the operator's Numba kernel when it has one.
        capacity: Nodes each gate holds before adds wait.
        allowed_lateness_ms: How far behind its largest ``ts`` a source's rows may
            arrive; each source's reorder buffer holds rows until then (decision 8).

    Raises:
        TypeError: the arguments match neither form.
        ReconfigurationError: m is outside ``1..n``.
        OperatorError: a setting out of its range.

    """
    upstream: Pipeline | None = None
    if len(args) == 3 and isinstance(args[0], OPlus):
        op, m, n = args
    elif len(args) == 4 and isinstance(args[0], Pipeline) and isinstance(args[1], OPlus):
        upstream, op, m, n = args[0], args[1], args[2], args[3]
    else:
        msg = "setup takes (op, m, n) or (upstream_pipeline, op, m, n)"
        raise TypeError(msg)
    if not isinstance(m, int) or not isinstance(n, int):
        msg = "m and n must be integers"
        raise TypeError(msg)
    assert isinstance(op, OPlus)
    base = settings or RuntimeSettings()
    chosen = replace(
        base,
        audit=base.audit if audit is None else audit,
        compiled=base.compiled if compiled is None else compiled,
        capacity=base.capacity if capacity is None else capacity,
        allowed_lateness_ms=base.allowed_lateness_ms
        if allowed_lateness_ms is None
        else allowed_lateness_ms,
    )
    pipeline = Pipeline(op, m, n, chosen)
    if upstream is not None:
        _chain(upstream, pipeline)
    return pipeline


def _chain(upstream: Pipeline, downstream: Pipeline) -> None:
    """Forward the upstream's output log, in order, to input 0 of ``downstream``."""

    def forward() -> None:
        offset = 0
        while not downstream.stopping:
            table, offset = upstream.output(offset, wait_s=CHAIN_WAIT_S)
            if table.num_rows:
                downstream.add(0, table)
                upstream.commit(offset)
            else:
                done = upstream.output_status()
                if done.finished and offset == done.end_offset:
                    downstream.close(0)
                    return

    thread = threading.Thread(target=forward, name=f"vsn-{downstream.op.name}-chain", daemon=True)
    thread.start()
    downstream.adopt_thread(thread)


def run_vsn(
    op: OPlus,
    tables: Sequence[pa.Table],
    parallelism: int = 1,
    max_parallelism: int | None = None,
    reconfigure: Sequence[tuple[int, int]] = (),
    timeout_s: float | None = None,
    compiled: bool = True,
    on_start: Callable[[Pipeline], None] | None = None,
) -> pa.Table:
    """Run ``op`` over one timestamp-sorted table per input with the VSN runtime.

    ``run_vsn_pieces`` with the whole output in one table: see there for the arguments.
    ``--reconfigure TS:M`` of the CLI becomes ``(TS, M)`` here.

    Returns:
        The output table, ``ts`` first, rows in output order (equal to ``run_sn``'s).

    Raises:
        InputError: wrong number of tables, or the run timed out.
        ReconfigurationError: an invalid parallelism.

    """
    pieces = run_vsn_pieces(
        op, tables, parallelism, max_parallelism, reconfigure, timeout_s, compiled, on_start,
        piece_rows=None,
    )  # fmt: skip
    return pa.concat_tables(pieces)


PIECE_ROWS = 1 << 18
"""Rows ``run_vsn_pieces`` gives at most per piece (and waits for, unless at the end)."""

HELD_ROWS = 1 << 20
"""Output rows ``run_vsn_pieces`` lets the log hold before the instances wait for room."""

OUTPUT_WAIT_S = 1.0
"""How long ``run_vsn_pieces`` waits for output at once before checking its deadline."""


def run_vsn_pieces(
    op: OPlus,
    tables: Sequence[pa.Table | Iterable[pa.Table]],
    parallelism: int = 1,
    max_parallelism: int | None = None,
    reconfigure: Sequence[tuple[int, int]] = (),
    timeout_s: float | None = None,
    compiled: bool = True,
    on_start: Callable[[Pipeline], None] | None = None,
    *,
    piece_rows: int | None = PIECE_ROWS,
) -> Generator[pa.Table, None, None]:
    """Run ``op`` over timestamp-sorted input; give its output piece by piece.

    The CLI's ``stretch replay --runtime vsn``. Each input is a table, or its rows as an
    iterable of tables (e.g. a file's batches), taken only as the feeding reaches them, so
    the input need not fit in memory either. ``(TS, M)`` in ``reconfigure`` means
    "switch to M instances once the watermark passes TS". Each source's rows up to TS are
    added before the request, so the switch happens after every tuple up to TS (at the
    first of the request's control tuples, whose ts is at most TS). A request at or after
    the end of every input is skipped: it could not change anything.

    Each piece is committed once the next one is asked for, and the output log holds at
    most ``HELD_ROWS`` rows not committed (plus the rest of one ``ts``): beyond that the
    instances wait for room, so a consumer that writes the pieces out keeps the output's
    memory bounded however large it grows. The generator stops the pipeline when closed.

    Args:
        op: The operator.
        tables: One table, or iterable of tables, per input stream, each sorted by
            ``ts`` (an iterable's tables one after another).
        parallelism: m at the start.
        max_parallelism: n (default: the largest parallelism used).
        reconfigure: ``(ts, m)`` pairs, applied in ts order.
        timeout_s: Give up after this long (None: wait for the end).
        compiled: Use the operator's Numba kernel when it has one.
        on_start: Called with the pipeline once it runs, before any input (to watch it).
        piece_rows: The most rows of a piece (None: one piece, the whole output, with the
            log unbounded).

    Yields:
        Tables, ``ts`` first, whose concatenation is the output in output order (equal to
        ``run_sn``'s); at least one, empty if the output is.

    Raises:
        InputError: wrong number of tables, or the run timed out.
        ReconfigurationError: an invalid parallelism.

    """
    if len(tables) != op.n_inputs:
        msg = f"operator {op.name!r} takes {op.n_inputs} input streams, got {len(tables)}"
        raise InputError(msg)
    schedule = sorted(reconfigure)
    n = max_parallelism or max([parallelism, *(m for _, m in schedule)])
    streams = [
        _Stream(t, schema, f"source {i} of {op.name!r}")
        for i, (t, schema) in enumerate(zip(tables, op.inputs, strict=True))
    ]
    held = None if piece_rows is None else max(HELD_ROWS, piece_rows)
    settings = RuntimeSettings(compiled=compiled, max_uncommitted_rows=held)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pipeline = setup(op, parallelism, n, settings=settings)
    try:
        if on_start is not None:
            on_start(pipeline)
        # The input goes in on a thread of its own: at parallelism 1 adding it to ESG_in is
        # the critical path, which the consumer's writing would otherwise hold up.
        feeding = _Feeding(pipeline, streams, schedule)
        offset, given = 0, False
        while True:
            wait_s = OUTPUT_WAIT_S if deadline is None else deadline - time.monotonic()
            if wait_s <= 0:
                msg = f"operator {op.name!r}: the VSN run did not finish in {timeout_s} s"
                raise InputError(msg)
            # An instance's failure first (``output`` raises it): it also stops the feeding.
            piece, after = pipeline.output(
                offset, piece_rows, min(wait_s, OUTPUT_WAIT_S), piece_rows or sys.maxsize
            )
            feeding.check()
            status = pipeline.output_status()
            end = status.finished and after == status.end_offset
            if piece.num_rows or (end and not given):
                yield piece
                given = True
            pipeline.commit(after)
            offset = after
            if end:
                break
        feeding.check()
        pipeline.join(0)  # raises an instance's failure
    finally:
        pipeline.shutdown()  # joins the feeding thread too


class _Feeding:
    """``_feed`` on a thread of its own (adopted by the pipeline); ``check`` raises its failure."""

    def __init__(
        self, pipeline: Pipeline, streams: Sequence[_Stream], schedule: Sequence[tuple[int, int]]
    ) -> None:
        self._error: BaseException | None = None
        thread = threading.Thread(
            target=self._run,
            args=(pipeline, streams, schedule),
            name=f"vsn-{pipeline.op.name}-feed",
            daemon=True,
        )
        pipeline.adopt_thread(thread)
        thread.start()

    def _run(
        self, pipeline: Pipeline, streams: Sequence[_Stream], schedule: Sequence[tuple[int, int]]
    ) -> None:
        try:
            _feed(pipeline, streams, schedule)
        except BaseException as exc:  # raised on the reader's thread by check()
            self._error = exc

    def check(self) -> None:
        """Raise what the feeding raised, if it failed."""
        if self._error is not None:
            raise self._error


FEED_ROWS = 16384
"""Rows a source adds at most per step of ``run_vsn_pieces``'s feeding."""

FEED_BACKLOG_ROWS = 1 << 19
"""Rows the sources may leave waiting for room in ESG_in before the feeding waits."""

FEED_WAIT_S = 0.005
"""How long the feeding sleeps while the backlog is full."""


class _Stream:
    """One input's rows, conformed, held ``FEED_ROWS`` ahead of the feeding.

    Attributes:
        table: The rows held, not yet added.
        ts: Their ``ts`` column.
        ended: Whether every row of the input is held or added.

    """

    def __init__(self, rows: pa.Table | Iterable[pa.Table], schema: Schema, where: str) -> None:
        self._schema, self._where = schema, where
        if isinstance(rows, pa.Table):  # checked now, on the caller's thread
            rows = [conform(rows, schema, where)]
        self._batches: Iterator[pa.Table] = iter(rows)
        self.table: pa.Table = schema.arrow().empty_table()
        self.ts: NDArray[np.int64] = np.empty(0, np.int64)
        self.ended = False

    def hold(self, rows: int) -> None:
        """Read batches until at least ``rows`` rows are held, or the input ends."""
        tables, columns = [self.table], [self.ts]
        held = len(self.ts)
        while held < rows and not self.ended:
            batch = next(self._batches, None)
            if batch is None:
                self.ended = True
                break
            table = conform(batch, self._schema, self._where)
            tables.append(table)
            columns.append(table.column(TS).to_numpy())
            held += table.num_rows
        if len(tables) > 1:
            if not len(self.ts):  # nothing held before: no copy of a single new table
                tables, columns = tables[1:], columns[1:]
            self.table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
            self.ts = columns[0] if len(columns) == 1 else np.concatenate(columns)

    def step(self) -> int | None:
        """The ``ts`` of the ``FEED_ROWS``-th row held, if that many are."""
        self.hold(FEED_ROWS)
        return int(self.ts[FEED_ROWS - 1]) if len(self.ts) >= FEED_ROWS else None

    def take(self, ts: int) -> pa.Table:
        """Remove the rows up to ``ts`` from those held and return them."""
        stop = int(np.searchsorted(self.ts, ts, "right"))
        rows = self.table.slice(0, stop)
        self.table, self.ts = self.table.slice(stop), self.ts[stop:]
        self.hold(1)
        return rows


def _feed(
    pipeline: Pipeline, streams: Sequence[_Stream], schedule: Sequence[tuple[int, int]]
) -> None:
    """Add every source's rows, with the reconfigurations between them, then close.

    In steps: add every source's rows up to a ``ts``, then reconfigure if a request is due
    there. All sources advance together, at most about ``FEED_ROWS`` rows each per step
    (the step's ``ts`` is the least of the sources' ``FEED_ROWS``-th held rows'), so no
    source runs far ahead of another: ESG_in's flow control holds a source that is ahead
    to half its capacity, and a whole file added at once would wait forever for the
    others. The feeding waits while more than ``FEED_BACKLOG_ROWS`` rows wait for room in
    ESG_in, so it reads its input only as fast as the instances take it.
    """
    requests = list(schedule)
    closed = [False] * len(streams)
    while True:
        steps = [ts for ts in (stream.step() for stream in streams) if ts is not None]
        ts, m = min(steps, default=END_OF_INPUT), None
        if requests and requests[0][0] < ts:  # at an equal ts, the rows first
            ts, m = requests.pop(0)
        for i, stream in enumerate(streams):
            rows = stream.take(ts)
            # Tell the gate where the source resumes, so the others' tuples get ready.
            resume = int(stream.ts[0]) if len(stream.ts) else None
            if rows.num_rows:
                # Unbounded: the output's bound pauses the instances, never the input.
                pipeline.add(i, rows, bounded=False, watermark=resume)
            elif resume is not None:
                pipeline.watermark(i, resume)
            if resume is None and not closed[i]:
                pipeline.close(i)
                closed[i] = True
        if m is not None and not all(closed):
            pipeline.reconfigure(parallelism=m)
        if ts == END_OF_INPUT:
            break
        _wait_for_room(pipeline, len(streams))
    pipeline.close()


def _wait_for_room(pipeline: Pipeline, sources: int) -> None:
    """Wait while the sources' rows waiting for room in ESG_in are over ``FEED_BACKLOG_ROWS``."""
    while not pipeline.stopping:
        if sum(pipeline.backlog(i) for i in range(sources)) <= FEED_BACKLOG_ROWS:
            return
        time.sleep(FEED_WAIT_S)
