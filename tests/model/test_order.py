"""Stream order: ``in_stream_order`` against Python's ``sorted`` with the documented key."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stretch.model import order as order_module
from stretch.model._order_kernels import merge_runs, order_ties
from stretch.model.order import in_stream_order


def _float_key(value: float) -> int:
    """IEEE 754 total order: the bits as an int, negatives flipped."""
    bits: int = struct.unpack("<q", struct.pack("<d", value))[0]
    return bits ^ 0x7FFF_FFFF_FFFF_FFFF if bits < 0 else bits


def _row_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (
        row["ts"],
        row["i"],
        _float_key(row["f"]),
        row["s"].encode("utf-8"),
        row["b"],
    )


ROWS = st.lists(
    st.tuples(
        st.integers(0, 3) | st.integers(4, 10**6),  # runs of equal ts, and rows alone
        st.integers(-2, 2) | st.integers(-(2**63), 2**63 - 1),
        st.sampled_from([0.0, -0.0, 1.5, -1.5, float("inf"), float("-inf"), float("nan")])
        | st.floats(),
        st.sampled_from(["", "a", "ab", "b", "é", "\U0001f600"]),
        st.booleans(),
    ),
    max_size=80,
)


@given(ROWS, st.integers(0, 80))
def test_in_stream_order_sorts_by_ts_then_content(rows: list[tuple[Any, ...]], cut: int) -> None:
    table = pa.table(
        {
            "ts": pa.array([r[0] for r in rows], pa.int64()),
            "i": pa.array([r[1] for r in rows], pa.int64()),
            "f": pa.array([r[2] for r in rows], pa.float64()),
            "s": pa.array([r[3] for r in rows], pa.string()),
            "b": pa.array([r[4] for r in rows], pa.bool_()),
        }
    )
    expected = sorted(table.to_pylist(), key=_row_key)
    # NaN != NaN: compare the rows' reprs
    assert repr(in_stream_order(table).to_pylist()) == repr(expected)
    by_ts = sorted(table.to_pylist(), key=lambda row: row["ts"])
    assert repr(in_stream_order(pa.Table.from_pylist(by_ts, table.schema)).to_pylist()) == repr(
        expected
    )
    chunked = pa.concat_tables([table.slice(0, cut), table.slice(cut)])  # as a reorder buffer's
    assert repr(in_stream_order(chunked).to_pylist()) == repr(expected)


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40)), min_size=40, max_size=400))
def test_long_runs_of_equal_ts_are_merged_in_order(rows: list[tuple[int, int]]) -> None:
    """Runs longer than the insertion-sorted blocks go through the merges."""
    table = pa.table(
        {
            "ts": pa.array([r[0] for r in rows], pa.int64()),
            "x": pa.array([r[1] for r in rows], pa.int64()),
        }
    )
    assert in_stream_order(table).to_pylist() == sorted(
        table.to_pylist(), key=lambda row: (row["ts"], row["x"])
    )


@st.composite
def interleaved_runs(draw: st.DrawFn) -> tuple[list[list[tuple[int, int]]], list[int]]:
    """A few sorted sequences of (key, tag) and the order in which their rows interleave."""
    runs = [
        sorted(draw(st.lists(st.tuples(st.integers(0, 50), st.just(r)), max_size=80)))
        for r in range(draw(st.integers(1, 5)))
    ]
    picks = [r for r, run in enumerate(runs) for _ in run]
    return runs, draw(st.permutations(picks))


@given(interleaved_runs())
def test_ties_of_interleaved_sorted_sequences_sort_stably(
    case: tuple[list[list[tuple[int, int]]], list[int]],
) -> None:
    """Several instances' rows at one ts: sorted sequences interleaved (the drainer's case).

    Equal keys keep their order of arrival, the ties' stable sort.
    """
    runs, picks = case
    taken = [0] * len(runs)
    rows = []
    for r in picks:
        rows.append(runs[r][taken[r]])
        taken[r] += 1
    keys = np.array([[key for key, _ in rows]], dtype=np.int64).reshape(1, len(rows))
    order = order_ties(np.zeros(len(rows), dtype=np.int64), keys)
    got = [rows[i] for i in (order if len(order) else range(len(rows)))]
    assert got == sorted(rows, key=lambda row: row[0])  # sorted() is stable
    assert (len(order) == 0) == (got == rows)


@given(interleaved_runs(), st.integers(1, 3))
def test_merge_runs_merges_sorted_runs_stably(
    case: tuple[list[list[tuple[int, int]]], list[int]], width: int
) -> None:
    """Sorted runs, one after the other, merged; equal keys keep their runs' order."""
    runs, _ = case
    rows = [(key, r, i) for r, run in enumerate(runs) for i, (key, _) in enumerate(run)]
    # `width` columns, coarsest first (the last is the key): ordered like the key
    keys = np.array(
        [[key // 10 ** (width - 1 - c) for key, _, _ in rows] for c in range(width)],
        dtype=np.int64,
    ).reshape(width, len(rows))
    starts = np.cumsum([0, *(len(run) for run in runs)], dtype=np.int64)
    order = merge_runs(keys, starts)
    got = [rows[i] for i in (order if len(order) else range(len(rows)))]
    expected = sorted(rows, key=lambda row: row[0])  # stable: runs' order, then in a run
    assert got == expected
    assert (len(order) == 0) == (expected == rows)


@given(
    st.lists(st.integers(1, 300), min_size=1, max_size=4),
    st.integers(1, 3),
    st.integers(0, 2**32 - 1),
)
def test_order_ties_sorts_runs_short_and_long_stably(
    lengths: list[int], width: int, seed: int
) -> None:
    """Runs of equal ts on both sides of ``_RANK_MAX`` (counted ranks, merges) and keys
    with many equal first columns: the order of a stable sort by (ts, keys)."""
    rng = np.random.default_rng(seed)
    ts = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    keys = rng.integers(-3, 3, size=(width, len(ts)), dtype=np.int64)
    keys[0, : len(ts) // 2] = rng.integers(-(2**63), 2**63 - 1, size=len(ts) // 2)
    order = order_ties(ts, keys)
    expected = np.lexsort((*keys[::-1], ts))  # lexsort is stable; its last key is primary
    assert (order if len(order) else np.arange(len(ts))).tolist() == expected.tolist()


def test_ties_of_an_unsorted_batch_are_ordered_on_c_order_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch out of ts order hands the kernel its keys in C order, as a sorted one does:
    the types ``stretch warm`` compiled, so a sidecar's first unsorted batch compiles
    nothing (Fortran-order keys made six more specializations, 25 s on a busy CI)."""
    kernel = order_module.order_ties_texts
    layouts: list[bool] = []

    def recording(ts: np.ndarray, keys: np.ndarray, *rest: np.ndarray) -> np.ndarray:
        layouts.append(bool(keys.flags.c_contiguous))
        return kernel(ts, keys, *rest)

    monkeypatch.setattr(order_module, "order_ties_texts", recording)
    # rows 0 and 2, and 1 and 3, tie on (ts, i), which pack; the floats do not
    table = pa.table({"ts": [3, 1, 3, 1, 2], "i": [5, 4, 5, 4, 1], "f": [1.0, 0.5, 0.5, 0.0, 2.0]})
    assert in_stream_order(table).to_pylist() == sorted(
        table.to_pylist(), key=lambda row: (row["ts"], row["i"], row["f"])
    )
    assert layouts == [True]


@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 2**64 - 1), st.integers(-(2**31), 2**31 - 1)),
        max_size=40,
    ),
    st.integers(0, 40),
)
def test_unsigned_and_narrow_columns_order_by_value(
    rows: list[tuple[int, int, int]], cut: int
) -> None:
    """uint64 (ranked, as int64 cannot hold it) and int32 / float32 (widened) keys."""
    table = pa.table(
        {
            "ts": pa.array([r[0] for r in rows], pa.int64()),
            "u": pa.array([r[1] for r in rows], pa.uint64()),
            "n": pa.array([r[2] for r in rows], pa.int32()),
            "f": pa.array([float(r[2]) for r in rows], pa.float32()),
        }
    )
    expected = sorted(table.to_pylist(), key=lambda row: (row["ts"], row["u"], row["n"]))
    for t in (table, pa.concat_tables([table.slice(0, cut), table.slice(cut)])):
        assert in_stream_order(t).to_pylist() == expected


NEAR_ONE = [1.0, 1.0 + 2**-52, 1.0 + 2**-51]  # floats that tie often after (ts, i)
NUMBERS = st.lists(
    st.tuples(
        st.integers(0, 3) | st.integers(-(10**6), 10**6),
        st.integers(-2, 2),
        st.sampled_from(NEAR_ONE),  # (ts, i) pack; f, then b, order what ties on them
        st.booleans(),
    ),
    max_size=300,
) | st.lists(  # a huge int range: not even (ts, i) packs
    st.tuples(
        st.integers(0, 3),
        st.integers(-2, 2) | st.integers(-(2**63), 2**63 - 1),
        st.sampled_from([0.0, -0.0, 1.5, float("nan")]) | st.floats(),
        st.booleans(),
    ),
    max_size=300,
)


@given(NUMBERS, st.integers(0, 300), st.booleans())
def test_numbers_order_alike_packed_or_not(
    rows: list[tuple[Any, ...]], cut: int, runs: bool
) -> None:
    """Tables of numbers only, whose leading int keys pack into one int64 or not (a huge
    range), shuffled or as two sorted parts: the documented order either way."""
    names = ["ts", "i", "f", "b"]
    table = pa.Table.from_pylist(
        [dict(zip(names, row, strict=True)) for row in rows],
        pa.schema([("ts", pa.int64()), ("i", pa.int64()), ("f", pa.float64()), ("b", pa.bool_())]),
    )
    key = lambda row: (row["ts"], row["i"], _float_key(row["f"]), row["b"])  # noqa: E731
    if runs:  # two sorted parts, a merge's input: few descents
        parts = [sorted(table.slice(0, cut).to_pylist(), key=key)]
        parts.append(sorted(table.slice(cut).to_pylist(), key=key))
        table = pa.Table.from_pylist(parts[0] + parts[1], table.schema)
    expected = repr(sorted(table.to_pylist(), key=key))
    assert repr(in_stream_order(table).to_pylist()) == expected
    ts_only = table.select(["ts"])
    assert in_stream_order(ts_only).column("ts").to_pylist() == sorted(ts_only["ts"].to_pylist())


def test_numbers_that_pack_skip_the_kernel_and_others_use_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Small int ranges pack into one key (no kernel call); a float column or a
    text column does not, and goes through the tie kernel."""
    calls: list[int] = []
    kernel = order_module.order_ties_texts

    def counting(*args: np.ndarray) -> np.ndarray:
        calls.append(1)
        return kernel(*args)

    monkeypatch.setattr(order_module, "order_ties_texts", counting)
    small = pa.table({"ts": [3, 1, 3, 1], "i": [5, 4, 3, 2], "b": [True, False, True, True]})
    assert in_stream_order(small).to_pylist() == sorted(
        small.to_pylist(), key=lambda row: (row["ts"], row["i"], row["b"])
    )
    assert calls == []
    wide = pa.table({"ts": [1, 1, 0], "f": [2.0, 0.0, 1.0]})  # floats do not pack
    assert in_stream_order(wide)["f"].to_pylist() == [1.0, 0.0, 2.0]
    text = pa.table({"ts": [1, 1, 0], "s": ["b", "a", "c"]})
    assert in_stream_order(text)["s"].to_pylist() == ["c", "a", "b"]
    assert calls == [1, 1]
