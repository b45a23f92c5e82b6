"""Out-of-order input (decision 8): the reorder buffer and a pipeline fed unsorted batches."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stretch.errors import LateTupleError
from stretch.model.sn import run_sn
from stretch.operators.catalog import build
from stretch.vsn import setup
from stretch.vsn._reorder import ReorderBuffer


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
    # ties leave in arrival order: the output is that of the arrival order, stably sorted
    in_order = arrival.take(pa.array(np.argsort(arrival["ts"].to_numpy(), kind="stable")))
    assert out.equals(run_sn(op, [in_order]))
