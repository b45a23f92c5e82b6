"""``bench_reorder``'s bare buffer: every row out once, in stream order, by its watermark."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from onethread_reorder import Buffer  # noqa: E402 - the benchmarks folder is not a package

BIG = 2**62
BATCH = st.lists(st.tuples(st.integers(0, 60), st.integers(-BIG, BIG)), max_size=12)


@given(st.lists(BATCH, max_size=8), st.integers(0, 30), st.integers(1, 20), st.booleans())
def test_the_bare_buffer_frees_what_the_watermark_passes_in_stream_order(
    batches: list[list[tuple[int, int]]], lateness: int, width: int, small: bool
) -> None:
    buffer = Buffer(lateness, width)
    sent: list[tuple[int, int]] = []
    out: list[tuple[int, int]] = []
    top = 0
    for batch in batches:
        rows = [(top - lateness + dt, v % 7 if small else v) for dt, v in batch]  # none late
        ts = np.array([r[0] for r in rows], dtype=np.int64)
        v = np.array([r[1] for r in rows], dtype=np.int64)
        freed = buffer.push(ts, v)
        sent += rows
        top = max([top, *ts.tolist()])
        if rows:
            assert buffer.released == max(r[0] for r in sent) - lateness
        got = [] if freed is None else list(zip(*(a.tolist() for a in freed), strict=True))
        assert all(t < buffer.released for t, _ in got)
        assert got == sorted(got)
        out += got
    last = buffer.flush()
    out += [] if last is None else list(zip(*(a.tolist() for a in last), strict=True))
    assert out == sorted(sent)


def test_the_bare_buffer_refuses_a_late_row() -> None:
    buffer = Buffer(5)
    buffer.push(np.array([20], dtype=np.int64), np.array([0], dtype=np.int64))
    with pytest.raises(ValueError, match="ts 14, before the watermark 15"):
        buffer.push(np.array([16, 14], dtype=np.int64), np.array([0, 1], dtype=np.int64))
