"""``run_vsn_pieces`` gives a replay's output in bounded pieces, and holds a bounded log.

The pieces, concatenated, are ``run_sn``'s output row for row at any parallelism and
across reconfigurations; none is larger than ``piece_rows``; and however much output the
run makes, the log never holds more than ``HELD_ROWS`` plus the rows of one ``ts``
(the instances wait for room until the consumer asks for the next piece).
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stretch.errors import InputError, ReconfigurationError, StretchError
from stretch.generate import scalejoin, tweets
from stretch.model.oplus import OPlus, Windows, WindowType
from stretch.model.schema import Schema
from stretch.model.sn import run_sn
from stretch.operators.catalog import build
from stretch.vsn import Pipeline, run_vsn, run_vsn_pieces, runtime
from stretch.vsn._instance import MAX_RUN
from stretch.vsn.settings import DEFAULT_CAPACITY
from tests.vsn.support import no_thread_leak

__all__ = ["no_thread_leak"]  # the fixture, used by every test here: the feeding thread too

HELD = 300
PIECE = 100


def _dense_join() -> tuple[OPlus, list[pa.Table]]:
    """A scalejoin whose 2 x 600 tuples make thousands of matches (narrow value ranges)."""
    left, right = scalejoin(600, 200.0, seed=4)
    left = left.set_column(1, "x", pa.array(np.asarray(left.column("x")) % 30))
    right = right.set_column(1, "a", pa.array(np.asarray(right.column("a")) % 30))
    left = left.set_column(2, "y", pa.array(np.asarray(left.column("y")) % 30.0))
    right = right.set_column(2, "b", pa.array(np.asarray(right.column("b")) % 30.0))
    return build("scalejoin", {"ws": 1000}), [left, right]


def _wordcount() -> tuple[OPlus, list[pa.Table]]:
    (table,) = tweets(600, 100.0, seed=2)
    return build("wordcount", {"wa": 1000, "ws": 5000}), [table]


@pytest.mark.parametrize("case", [_dense_join, _wordcount])
@pytest.mark.parametrize(
    ("m", "schedule"), [(1, []), (2, []), (1, [(1500, 3), (2500, 1), (4000, 2)])]
)
def test_pieces_are_the_reference_output_from_a_bounded_log(
    case: object, m: int, schedule: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "HELD_ROWS", HELD)
    op, tables = case()  # type: ignore[operator]
    expected = run_sn(op, tables)
    most_at_one_ts = max(Counter(expected.column("ts").to_pylist()).values())
    assert expected.num_rows > 5 * HELD  # the bound matters
    watched: list[Pipeline] = []
    pieces, most_held = [], 0
    for piece in run_vsn_pieces(
        op, tables, m, 3, schedule, timeout_s=120, on_start=watched.append, piece_rows=PIECE
    ):
        time.sleep(0.002)  # a slow consumer: the output waits for it
        status = watched[0].output_status()
        most_held = max(most_held, status.end_offset - status.start_offset)
        assert 0 < piece.num_rows <= PIECE
        pieces.append(piece)
    assert most_held <= HELD + most_at_one_ts
    assert pa.concat_tables(pieces).equals(expected)


def test_an_empty_output_is_one_empty_piece() -> None:
    op = build("scalejoin", {"ws": 1000})
    left, right = scalejoin(5, 1.0, seed=1)
    pieces = list(run_vsn_pieces(op, [left, right.slice(0, 0)], 2, piece_rows=PIECE))
    assert [p.num_rows for p in pieces] == [0]
    assert pieces[0].schema.names == run_sn(op, [left, right.slice(0, 0)]).schema.names


def test_closing_the_pieces_early_stops_the_pipeline() -> None:
    op, tables = _dense_join()
    watched: list[Pipeline] = []
    pieces = run_vsn_pieces(op, tables, 2, on_start=watched.append, piece_rows=PIECE)
    assert next(pieces).num_rows == PIECE
    pieces.close()
    assert watched[0].stopping


def test_a_run_past_its_timeout_is_an_input_error() -> None:
    op, tables = _dense_join()
    with pytest.raises(InputError, match="did not finish in 1e-06 s"):
        run_vsn(op, tables, 1, timeout_s=1e-6)


def test_a_failure_of_the_feeding_reaches_the_caller() -> None:
    """The input goes in on a thread of its own; what it raises is raised to the reader."""
    op, tables = _wordcount()
    with pytest.raises(ReconfigurationError, match="parallelism"):
        run_vsn(op, tables, 1, 2, reconfigure=[(2000, 3)], timeout_s=60)


def test_an_instance_failure_reaches_the_caller_as_such() -> None:
    """An instance that raises stops the pipeline; the caller gets the instance's error."""
    readings = Schema.of(value="float")

    def fail(w: Windows) -> list[tuple[object, ...]]:
        if w.key == 3:
            msg = "window 3 is cursed"
            raise ValueError(msg)
        return [(w.key,)]

    op = OPlus(
        "cursed",
        wa_ms=10,
        ws_ms=10,
        inputs=(readings,),
        multi_key=lambda t: [int(t["value"])],
        window_type=WindowType.SINGLE,
        output=Schema.of(key="int"),
        output_fn=fail,
    )
    table = readings.table(list(range(0, 200_000, 10)), [(float(i % 5),) for i in range(20_000)])
    with pytest.raises(StretchError, match="cursed"):
        run_vsn(op, [table], 2, timeout_s=60)


def _in_batches(table: pa.Table, sizes: list[int]) -> Iterator[pa.Table]:
    """``table`` as batches of the given sizes, in turn (empty ones too), to its end."""
    start, turn = 0, 0
    while start < table.num_rows:
        size = sizes[turn % len(sizes)]
        yield table.slice(start, size)
        start, turn = start + size, turn + 1


@pytest.mark.parametrize("case", [_dense_join, _wordcount])
@pytest.mark.parametrize(("m", "schedule"), [(2, []), (1, [(1500, 3), (2500, 1), (4000, 2)])])
def test_inputs_as_batches_give_the_reference_output(
    case: object, m: int, schedule: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each input as an iterable of tables; steps of 50 rows, so many batches per step."""
    monkeypatch.setattr(runtime, "FEED_ROWS", 50)
    op, tables = case()  # type: ignore[operator]
    expected = run_sn(op, tables)
    inputs = [_in_batches(t, [1, 0, 37, 120, 5]) for t in tables]
    pieces = run_vsn_pieces(op, inputs, m, 3, schedule, timeout_s=120, piece_rows=PIECE)
    assert pa.concat_tables(list(pieces)).equals(expected)


def test_the_feeding_reads_its_input_only_as_the_instances_take_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A consumer that stops reading stops the input being read, not only the output."""
    monkeypatch.setattr(runtime, "HELD_ROWS", HELD)
    monkeypatch.setattr(runtime, "FEED_BACKLOG_ROWS", 2000)
    rows, taken = 400_000, [0, 0]
    op = build("forward", {"columns": "x:int", "inputs": "2"})

    def source(i: int) -> Iterator[pa.Table]:
        for start in range(0, rows, 1000):
            ts = np.arange(start, start + 1000, dtype=np.int64)
            taken[i] += len(ts)
            yield pa.table({"ts": ts, "x": ts * 2 + i})

    pieces = run_vsn_pieces(op, [source(0), source(1)], 1, timeout_s=60, piece_rows=PIECE)
    first = next(pieces)
    time.sleep(0.5)  # the consumer stalls: the output log fills, the instance waits
    drawn = sum(taken)
    pieces.close()
    assert first.num_rows == PIECE
    # What the pipeline holds (ESG_in's and ESG_out's nodes, the instance's run), the
    # backlog the feeding allows and each source's step and batch: a fraction of the input
    # (all 800,000 rows were drawn when the feeding never waited).
    held = 2 * DEFAULT_CAPACITY + MAX_RUN + runtime.FEED_BACKLOG_ROWS
    assert drawn <= held + 2 * (runtime.FEED_ROWS + 1000) < 2 * rows


@functools.cache
def _dense_reference() -> pa.Table:
    return run_sn(*_dense_join())


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(
        st.lists(st.integers(0, 150), min_size=1, max_size=5).filter(any), min_size=2, max_size=2
    ),
    feed_rows=st.integers(1, 300),
    backlog=st.integers(0, 500),
    m=st.integers(1, 3),
    schedule=st.lists(st.tuples(st.integers(0, 7000), st.integers(1, 3)), max_size=3),
)
def test_any_batches_and_steps_give_the_reference_output(
    sizes: list[list[int]],
    feed_rows: int,
    backlog: int,
    m: int,
    schedule: list[tuple[int, int]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Batches of any sizes (empty ones too), steps of any depth, a feeding that waits for
    any backlog (0: until every row it added is in ESG_in), any reconfigurations."""
    monkeypatch.setattr(runtime, "FEED_ROWS", feed_rows)
    monkeypatch.setattr(runtime, "FEED_BACKLOG_ROWS", backlog)
    op, tables = _dense_join()
    inputs = [_in_batches(t, s) for t, s in zip(tables, sizes, strict=True)]
    pieces = run_vsn_pieces(op, inputs, m, 3, schedule, timeout_s=120, piece_rows=PIECE)
    assert pa.concat_tables(list(pieces)).equals(_dense_reference())
