"""Stream order: ``in_stream_order`` against Python's ``sorted`` with the documented key."""

from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

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


@given(ROWS)
def test_in_stream_order_sorts_by_ts_then_content(rows: list[tuple[Any, ...]]) -> None:
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
