"""Out-of-order input (decision 8): the reorder buffer and a pipeline fed unsorted batches."""

from __future__ import annotations

import math
import random
from unittest.mock import patch

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stretch.errors import LateTupleError
from stretch.model.order import in_stream_order
from stretch.model.sn import run_sn
from stretch.operators.catalog import build
from stretch.vsn import _reorder, setup
from stretch.vsn._reorder import MAX_RUNS, ReorderBuffer


def table(ts: list[int], v: list[int]) -> pa.Table:
    return pa.table({"ts": pa.array(ts, pa.int64()), "v": pa.array(v, pa.int64())})


def rows(t: pa.Table | None) -> list[tuple[int, int]]:
    return [] if t is None else list(zip(t["ts"].to_pylist(), t["v"].to_pylist(), strict=True))


def test_buffer_releases_below_max_minus_lateness_in_order() -> None:
    buffer = ReorderBuffer(10, "source 0 of 'f'")
    assert rows(buffer.push(table([5, 3, 20], [0, 1, 2]))) == [(3, 1), (5, 0)]
    assert buffer.released == 10 and len(buffer) == 1
    assert rows(buffer.push(table([12, 10, 31], [3, 4, 5]))) == [(10, 4), (12, 3), (20, 2)]
    with pytest.raises(LateTupleError, match="row 2 has ts 9, before the released watermark 21"):
        buffer.push(table([25, 9], [6, 7]))
    assert len(buffer) == 1  # the rejected batch left nothing behind
    assert rows(buffer.advance(40)) == [(31, 5)]
    assert buffer.flush() is None


def test_negative_lateness_is_rejected() -> None:
    with pytest.raises(ValueError, match="allowed lateness"):
        ReorderBuffer(-1, "s")


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.lists(st.tuples(st.integers(-3, 30), st.integers(0, 3)))),
        st.tuples(st.just("advance"), st.integers(-3, 30)),
    ),
    max_size=40,
)


@given(OPERATIONS, st.integers(0, 20), st.integers(1, 4))
def test_buffer_equals_a_sorted_list_model(
    operations: list[tuple[str, object]], lateness: int, max_runs: int
) -> None:
    """Pushes (some late, some far ahead) and heartbeats against a plain list of held rows:
    the same rows freed in the same order, the same rows held, refusals alike, and
    ``held_after`` predicting the push. At most ``max_runs`` runs, so runs merge often."""
    with patch.object(_reorder, "MAX_RUNS", max_runs):
        check_against_the_model(operations, lateness)


def check_against_the_model(operations: list[tuple[str, object]], lateness: int) -> None:
    buffer = ReorderBuffer(lateness, "s")
    held: list[tuple[int, int]] = []
    released = buffer.released
    for kind, arg in operations:
        base = max(released, 0)
        if kind == "push":
            batch = [(base + dt, v) for dt, v in arg]  # type: ignore[union-attr]
            ts = np.array([r[0] for r in batch], dtype=np.int64)
            if any(t < released for t, _ in batch):
                with pytest.raises(LateTupleError):
                    buffer.push(table(*map(list, zip(*batch, strict=True))))
                continue
            predicted = buffer.held_after(ts)
            got = buffer.push(table([r[0] for r in batch], [r[1] for r in batch]))
            held += batch
            if batch:
                released = max(released, max(ts.tolist()) - lateness)
            assert predicted == len([r for r in held if r[0] >= released])
        else:
            got = buffer.advance(base + arg)  # type: ignore[operator]
            released = max(released, base + arg)  # type: ignore[operator]
        freed = sorted(r for r in held if r[0] < released)
        held = [r for r in held if r[0] >= released]
        assert rows(got) == freed
        assert buffer.released == released and len(buffer) == len(held)
        assert sorted(rows(buffer.held(table([], []).schema))) == sorted(held)
    assert rows(buffer.flush()) == sorted(held)


def test_many_batches_far_ahead_stay_in_runs_and_come_out_in_order() -> None:
    """A lateness longer than many batches: each batch a run, neighbours merged past MAX_RUNS."""
    buffer = ReorderBuffer(10_000, "s")
    rng = np.random.default_rng(3)
    everything = []
    for b in range(3 * MAX_RUNS):
        ts = (b * 10 + rng.integers(0, 15, 50)).tolist()
        v = rng.integers(0, 5, 50).tolist()
        everything += list(zip(ts, v, strict=True))
        assert buffer.push(table(ts, v)) is None  # nothing is 10 s old yet
        assert len(buffer._runs) == min(b + 1, MAX_RUNS)
        assert max(len(r) for r in buffer._runs) <= max(50, len(buffer) // 16)  # balanced
        assert all(np.all(np.diff(r.ts) >= 0) for r in buffer._runs)  # each in order
    assert len(buffer) == len(everything)
    assert rows(buffer.advance(1_000)) == sorted(r for r in everything if r[0] < 1_000)
    assert rows(buffer.flush()) == sorted(r for r in everything if r[0] >= 1_000)


@given(
    st.lists(
        st.tuples(
            st.lists(st.tuples(st.integers(-3, 30), st.integers(0, 3)), max_size=8),
            st.none() | st.integers(-5, 40),
        ),
        max_size=12,
    ),
    st.integers(0, 20),
)
def test_a_push_with_a_watermark_is_a_push_then_an_advance(
    steps: list[tuple[list[tuple[int, int]], int | None]], lateness: int
) -> None:
    """``push(batch, w)`` frees the rows that ``push(batch)`` and ``advance(w)`` free, in
    order, and leaves the same watermark and rows held, as ``held_after(ts, w)`` predicts;
    a late batch is refused alike."""
    one, two = ReorderBuffer(lateness, "s"), ReorderBuffer(lateness, "s")
    for batch, watermark in steps:
        base = max(one.released, 0)
        data = table([base + dt for dt, _ in batch], [v for _, v in batch])
        late = any(base + dt < one.released for dt, _ in batch)
        predicted = None if late else one.held_after(data["ts"].to_numpy(), watermark)
        if late:
            with pytest.raises(LateTupleError):
                one.push(data, watermark)
            with pytest.raises(LateTupleError):
                two.push(data)
            continue
        freed = rows(one.push(data, watermark))
        assert predicted == len(one)
        expected = rows(two.push(data))
        if watermark is not None:
            expected += rows(two.advance(watermark))
        assert freed == expected
        assert one.released == two.released and len(one) == len(two)
    assert rows(one.flush()) == rows(two.flush())


def test_an_add_with_a_watermark_frees_what_it_promises() -> None:
    """``Pipeline.add(..., watermark=w)``: the rows before w go in at once, even when every
    row of the batch was dropped as late."""
    op = build("forward", {"columns": "v:int", "inputs": "1"})
    with setup(op, 1, 1, allowed_lateness_ms=100) as pipeline:
        pipeline.add(0, table([5, 1, 300], [0, 1, 2]), watermark=250)
        assert len(pipeline._sources[0].reorder) == 1  # only ts 300 is held
        admitted = pipeline.add(0, table([10], [3]), late="drop", watermark=400)
        assert admitted.dropped == 1 and len(pipeline._sources[0].reorder) == 0
        pipeline.close()
        assert pipeline.join(timeout_s=60)
        out, _ = pipeline.output()
    assert rows(out) == [(1, 1), (5, 0), (300, 2)]


@given(st.lists(st.integers(0, 200), max_size=60), st.integers(1, 6), st.integers(1, 3))
def test_pipeline_of_shuffled_batches_equals_sn_of_sorted_input(
    ts: list[int], batches: int, parallelism: int
) -> None:
    """Rows shuffled within the lateness bound give the output of the sorted stream."""
    lateness = 50
    stream = table(sorted(ts), list(range(len(ts))))
    rng = np.random.default_rng(len(ts))
    jitter = stream["ts"].to_numpy() + rng.integers(0, lateness, len(ts))
    # arrival order: by ts + jitter, so a row arrives at most `lateness` after later ones
    arrival = stream.take(pa.array(np.argsort(jitter, kind="stable")))
    op = build("forward", {"columns": "v:int", "inputs": "1"})
    with setup(op, parallelism, 3, allowed_lateness_ms=lateness) as pipeline:
        for chunk in np.array_split(np.arange(len(ts)), batches):
            if len(chunk):
                pipeline.add(0, arrival.take(pa.array(chunk)))
        pipeline.close()
        assert pipeline.join(timeout_s=60)
        out, _ = pipeline.output()
    assert out.equals(run_sn(op, [stream]))


@given(
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3), st.integers(0, 3)), max_size=50),
    st.randoms(use_true_random=False),
    st.integers(1, 5),
    st.integers(1, 3),
)
def test_ties_count_in_content_order_whatever_the_split(
    rows_: list[tuple[int, int, int]], rnd: random.Random, batches: int, parallelism: int
) -> None:
    """Heavy ts ties, shuffled and split at random: output equals run_sn row for row."""
    lateness = 10
    order = list(range(len(rows_)))
    rnd.shuffle(order)
    arrival = [rows_[i] for i in order]
    left = pa.table(
        {
            "ts": pa.array([r[0] for r in arrival], pa.int64()),
            "x": pa.array([r[1] for r in arrival], pa.int64()),
            "y": pa.array([float(r[2]) for r in arrival], pa.float64()),
        }
    )
    right = pa.table(  # the same values, sorted by ts: another order of ties
        {
            "ts": left["ts"],
            "a": left["x"],
            "b": left["y"],
            "c": left["y"],
            "d": pa.array([r[1] % 2 == 0 for r in arrival]),
        }
    ).sort_by("ts")
    op = build("scalejoin", {"ws": 3})
    with setup(op, parallelism, 3, allowed_lateness_ms=lateness) as pipeline:
        for chunk in np.array_split(np.arange(len(arrival)), batches):
            if len(chunk):
                pipeline.add(0, left.take(pa.array(chunk)))
                pipeline.add(1, right.take(pa.array(chunk)))
        pipeline.close()
        assert pipeline.join(timeout_s=60)
        out, _ = pipeline.output()
    assert out.equals(run_sn(op, [left, right]))


def test_stream_order_sorts_ties_by_content_with_a_total_float_order() -> None:
    t = pa.table(
        {
            "ts": pa.array([2, 1, 1, 1, 1, 1], pa.int64()),
            "f": pa.array([0.0, float("nan"), 0.0, -0.0, float("inf"), -1.5], pa.float64()),
            "s": pa.array(["b", "a", "a", "a", "a", "a"]),
        }
    )
    ordered = in_stream_order(t)
    assert ordered["ts"].to_pylist() == [1, 1, 1, 1, 1, 2]
    floats = ordered["f"].to_pylist()
    assert floats[0] == -1.5 and math.copysign(1, floats[1]) == -1 and floats[2] == 0.0
    assert floats[3] == math.inf and math.isnan(floats[4])
    strings = pa.table({"ts": pa.array([1, 1, 1], pa.int64()), "s": pa.array(["é", "b", "ab"])})
    assert in_stream_order(strings)["s"].to_pylist() == ["ab", "b", "é"]
    again = in_stream_order(ordered.slice(1).take(pa.array([3, 0, 2, 1, 4])))
    assert str(again.to_pylist()) == str(ordered.slice(1).to_pylist())


def _float_key(value: float) -> tuple[int, ...]:
    """IEEE 754 total order: -0.0 before 0.0, NaN after +inf."""
    bits = int(np.array([value], dtype=np.float64).view(np.int64)[0])
    return (bits ^ 0x7FFF_FFFF_FFFF_FFFF,) if bits < 0 else (bits,)


@given(
    rows=st.lists(
        st.tuples(
            st.integers(0, 3),
            st.text(st.characters(codec="utf-8"), max_size=4),
            st.sampled_from(["", "a", "ab", "b", "é", "\x00", "a\x00"]),
            st.floats(allow_nan=True),
            st.integers(-(2**63), 2**63 - 1),
        ),
        max_size=40,
    ),
    split=st.integers(1, 3),
)
def test_stream_order_equals_a_sort_by_ts_then_utf8_bytes_and_values(
    rows: list[tuple[int, str, str, float, int]], split: int
) -> None:
    """Strings compare by their UTF-8 bytes (a compiled comparison over the Arrow buffers),
    in schema order with the other columns, whatever the chunks or the arrival order."""
    names = ["ts", "s", "t", "f", "i"]
    table = pa.table(
        [pa.array(list(c), type=k) for c, k in zip(zip(*rows, strict=True), [pa.int64(),
         pa.string(), pa.string(), pa.float64(), pa.int64()], strict=True)]
        if rows else [pa.array([], k) for k in [pa.int64(), pa.string(), pa.string(),
         pa.float64(), pa.int64()]],
        names=names,
    )  # fmt: skip
    chunked = pa.concat_tables(
        [table.slice(start, split) for start in range(0, table.num_rows, split)] or [table]
    )
    expected = sorted(
        rows,
        key=lambda r: (r[0], r[1].encode(), r[2].encode(), _float_key(r[3]), r[4]),
    )
    got = in_stream_order(chunked).to_pylist()
    assert [str(tuple(r.values())) for r in got] == [str(r) for r in expected]
