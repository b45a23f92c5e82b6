"""A full output log pauses the output: the drainer waits for commits, the instances for room.

With ``max_uncommitted_rows`` the log holds at most the limit plus the rest of one ``ts``
however much output the admitted input makes, and the rows read while it pauses and
resumes are the unbounded run's, row for row. An aggregate's expiry goes out in pieces
of ``OUTPUT_PIECE_ROWS`` (the instance releases each, waiting for room, before the next):
with pieces of a few rows the output is still ``run_sn``'s. A join, whose output comes
as it processes a run, gets the run in pieces that make about that many rows each.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace
from functools import cache

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stretch.generate import tweets
from stretch.model.sn import run_sn
from stretch.operators.catalog import SCALEJOIN_L, SCALEJOIN_R, build
from stretch.vsn import RuntimeSettings, _instance, run_vsn, setup
from stretch.vsn._compiled import band_join as compiled_band_join
from stretch.vsn.pipeline import Pipeline
from tests import streams
from tests.vsn.support import no_thread_leak, run_schedule
from tests.vsn.test_panes import AGGREGATES, MAX_PARALLELISM, schedules, windows

__all__ = ["no_thread_leak"]  # the fixture, used by every test here

DEADLINE_S = 60.0
LIMIT = 500
PARAMS = {"wa": 1000, "ws": 20_000}  # every tweet's words go out in 20 windows
GATES = 1024
"""Nodes each gate holds: ESG_out fills soon after the log, and the instances wait."""


def _tweets() -> pa.Table:
    (table,) = tweets(1500, 100.0, seed=3)
    return table


def _reference(m: int) -> pa.Table:
    """The whole output, with no limit."""
    pipeline = setup(build("wordcount", PARAMS), m, m, compiled=True)
    try:
        pipeline.add(0, _tweets())
        pipeline.close()
        assert pipeline.join(DEADLINE_S)
        return pipeline.output()[0]
    finally:
        pipeline.shutdown()


def _paused(m: int, settings: RuntimeSettings) -> Pipeline:
    """A pipeline given all the input at once (the log is empty), once its log is full."""
    pipeline = setup(build("wordcount", PARAMS), m, m, settings=settings, compiled=True)
    pipeline.add(0, _tweets())
    pipeline.close()
    deadline = time.monotonic() + DEADLINE_S
    while pipeline.output_status().end_offset < LIMIT and time.monotonic() < deadline:
        time.sleep(0.01)
    return pipeline


def _read_from(pipeline: Pipeline, offset: int, end: int) -> tuple[pa.Table, int]:
    """Read and commit 200 rows at a time to ``end``: the rows, and the most held."""
    deadline = time.monotonic() + DEADLINE_S
    parts, most = [], 0
    while not pipeline.output_status().finished or offset < end:
        assert time.monotonic() < deadline, "the output did not go on"
        part, offset = pipeline.output(
            max(offset, pipeline.output_status().start_offset), max_rows=200, wait_s=0.05
        )
        parts.append(part)
        pipeline.commit(offset)
        status = pipeline.output_status()
        most = max(most, status.end_offset - status.start_offset)
    return pa.concat_tables(parts), most


@pytest.mark.parametrize("m", [1, 2])
def test_full_log_pauses_output_until_commits(m: int) -> None:
    expected = _reference(m)
    one_ts = max(Counter(expected.column("ts").to_pylist()).values())
    assert expected.num_rows > 10 * (LIMIT + one_ts)  # the input makes far more than fits
    pipeline = _paused(m, RuntimeSettings(capacity=GATES, max_uncommitted_rows=LIMIT))
    try:
        time.sleep(0.3)  # unread, the output stops at the limit
        status = pipeline.output_status()
        assert LIMIT <= status.end_offset <= LIMIT + one_ts
        assert not status.finished
        assert not pipeline._pool.output_room.is_set()  # the instances park, no retry loop
        time.sleep(0.3)
        parked = sum(instance.parked_ns for instance in pipeline._pool.instances)
        assert parked >= 0.25e9  # counted apart from busy: a slow reader is no load
        rows, most = _read_from(pipeline, 0, expected.num_rows)  # it resumes, holding no more
        assert most <= LIMIT + one_ts
        assert pipeline._pool.output_room.is_set()
        assert rows.equals(expected)
        assert pipeline.join(DEADLINE_S)
    finally:
        pipeline.shutdown()


def test_a_commit_beyond_a_full_log_lets_the_output_go_on() -> None:
    """A restore re-applies a reader's commit before the output reaches it (a full log
    from the checkpoint, the reader further on): the output goes on to it, not paused."""
    expected = _reference(1)
    pipeline = _paused(1, RuntimeSettings(max_uncommitted_rows=LIMIT))
    try:
        further = 3 * expected.num_rows // 4
        assert pipeline.output_status().end_offset < further
        pipeline.commit(further, when_produced=True)
        rows, _ = _read_from(pipeline, further, expected.num_rows)
        assert rows.equals(expected.slice(further))
    finally:
        pipeline.shutdown()


def test_a_pipeline_restored_with_a_full_log_reports_its_watermark() -> None:
    """The snapshot's D at once: a sharded reader cuts at the shards' common watermark,
    and a full log takes nothing until it reads, so -inf there would wait for ever."""
    expected = _reference(1)
    settings = RuntimeSettings(capacity=GATES, max_uncommitted_rows=LIMIT)
    pipeline = _paused(1, settings)
    try:
        time.sleep(0.1)
        snapshot = pipeline.snapshot()
    finally:
        pipeline.shutdown()
    watermark = snapshot.output.complete_before
    assert watermark > -(2**63 - 1)
    restored = Pipeline.restore(build("wordcount", PARAMS), snapshot, settings)
    try:
        status = restored.output_status()
        assert (status.watermark, status.end_offset) == (watermark, snapshot.output.rows.num_rows)
        assert restored.output_cut(watermark) > 0  # what a sharded reader may read now
        rows, _ = _read_from(restored, 0, expected.num_rows)
        assert rows.equals(expected)
    finally:
        restored.shutdown()


def test_stopping_a_paused_pipeline_ends_its_threads() -> None:
    pipeline = _paused(2, RuntimeSettings(max_uncommitted_rows=LIMIT))
    assert not pipeline.output_status().finished
    started = time.monotonic()
    pipeline.shutdown()
    assert time.monotonic() - started < 5.0  # no_thread_leak checks that they ended


@pytest.mark.parametrize("per_window", [False, True])
@pytest.mark.parametrize(("name", "params"), AGGREGATES)
@settings(max_examples=8, deadline=None)
@given(table=streams.tweets(max_rows=30), window=windows(), piece=st.integers(1, 8), data=st.data())
def test_expiry_in_small_pieces_equals_sn(
    name: str,
    params: dict[str, str],
    per_window: bool,
    table: pa.Table,
    window: dict[str, int],
    piece: int,
    data: st.DataObject,
) -> None:
    """Panes and the per-window path, pieces of 1-8 rows, reconfigured: == run_sn."""
    op = build(name, {**params, **window})
    if per_window:
        op = replace(op, kernel=replace(op.kernel, combine=None))
    expected = run_sn(op, [table])
    schedule = data.draw(schedules(op, table))
    m = data.draw(st.integers(1, MAX_PARALLELISM))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_instance, "OUTPUT_PIECE_ROWS", piece)
        out, _ = run_schedule(op, [table], m, MAX_PARALLELISM, schedule)
    assert out.equals(expected)


DENSE = {"ws": 100, "keys": 4}


@cache
def _dense_join() -> list[pa.Table]:
    """ScaleJoin streams where every pair within the window matches (one value everywhere):
    2 x 2,000 tuples, 4 per ms and side, about 800 matches a tuple once the window is full."""
    n = 2000
    ts = [i // 4 for i in range(n)]
    left = SCALEJOIN_L.table(ts, [(7, 1.5)] * n)
    right = SCALEJOIN_R.table(ts, [(7, 1.5, 0.0, True)] * n)
    return [left, right]


@cache
def _dense_reference() -> pa.Table:
    """The dense join's rows by the sequential reference (the index changes none)."""
    return run_sn(build("scalejoin", DENSE), _dense_join())


def _recorded(
    monkeypatch: pytest.MonkeyPatch, piece: int
) -> tuple[list[tuple[int, int]], list[int]]:
    """Pieces of ``piece`` rows; the kernel calls' (nodes, rows) and the rows each release
    found buffered, as the run goes."""
    calls: list[tuple[int, int]] = []
    held: list[int] = []
    next_piece = _instance._next_piece
    release = _instance.VSNInstance._release

    def recorded(last: int, nodes: int, rows: int) -> int:
        calls.append((nodes, rows))
        return next_piece(last, nodes, rows)

    def recorded_release(self: _instance.VSNInstance, watermark: int | None = None) -> None:
        held.append(self._buffered_rows())
        release(self, watermark)

    monkeypatch.setattr(_instance, "OUTPUT_PIECE_ROWS", piece)
    monkeypatch.setattr(_instance, "_next_piece", recorded)
    monkeypatch.setattr(_instance.VSNInstance, "_release", recorded_release)
    return calls, held


@pytest.mark.parametrize(("index", "m"), [("on", 1), ("off", 1), ("on", 2), ("off", 2)])
def test_a_dense_join_makes_its_output_in_pieces(
    monkeypatch: pytest.MonkeyPatch, index: str, m: int
) -> None:
    """A join where every pair matches gets runs cut to about a piece of output each.

    The instance releases its rows once it holds a piece, so it never holds much more
    than that (a few pieces: the rows at its watermark stay, and a call may pass the
    piece while the window fills).
    """
    op = build("scalejoin", {**DENSE, "index": index})
    tables = _dense_join()
    expected = _dense_reference()
    piece = 20_000  # the first call (64 nodes, at most 400 matches each) fits in one
    calls, held = _recorded(monkeypatch, piece)
    assert run_vsn(op, tables, m).equals(expected)
    assert max(held) <= 3 * piece
    assert sum(rows for _, rows in calls) == expected.num_rows
    assert max(rows for _, rows in calls) <= 3 * piece
    # all input is ready at once: runs take MIN_RUN nodes or more, the kernel calls far fewer
    assert max(nodes for nodes, _ in calls[len(calls) // 2 :]) < _instance.MIN_RUN // 8


@cache
def _rising_join() -> list[pa.Table]:
    """ScaleJoin streams whose matches rise all at once: 6,000 tuples a side with x spread
    over a million values (next to no match), then 1,000 whose x alternate between two
    values, each pair matching about half the window (the grid keeps both cells)."""
    sparse, dense = 6000, 1000
    ts = [i // 4 for i in range(sparse + dense)]
    x = [(i * 7919) % 1_000_000 for i in range(sparse)] + [7 + 500 * (i % 2) for i in range(dense)]
    left = SCALEJOIN_L.table(ts, [(v, 1.5) for v in x])
    right = SCALEJOIN_R.table(ts, [(v, 1.5, 0.0, True) for v in x])
    return [left, right]


@pytest.mark.parametrize(("index", "m"), [("on", 1), ("off", 1), ("on", 2), ("off", 2)])
def test_a_sudden_rise_in_matches_goes_out_in_pieces_within_a_call(
    monkeypatch: pytest.MonkeyPatch, index: str, m: int
) -> None:
    """The calls grew while nothing matched; the call that meets the rise releases its
    matches a piece at a time instead of holding them all to its end: the indexed kernel
    between groups of the run's tuples, the nested one between chunks of them (here of
    about 6 tuples: 5,000 pairs over windows of about 800)."""
    op = build("scalejoin", {**DENSE, "index": index})
    tables = _rising_join()
    expected = run_sn(op, tables)
    piece = 5000
    assert expected.num_rows > 40 * piece
    calls, held = _recorded(monkeypatch, piece)
    monkeypatch.setattr(compiled_band_join, "OUTPUT_PIECE_ROWS", piece)
    monkeypatch.setattr(compiled_band_join, "CHUNK_PAIRS", piece)
    assert run_vsn(op, tables, m).equals(expected)
    assert max(nodes for nodes, _ in calls) * 100 > expected.num_rows  # could make most rows
    assert max(held) <= 3 * piece
