"""run_vsn feeds sources in step, so inputs larger than ESG_in never deadlock it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from stretch.model.sn import run_sn
from stretch.operators.catalog import build
from stretch.vsn import run_vsn, setup


def stream(ts: np.ndarray, offset: int) -> pa.Table:
    return pa.table({"ts": ts.astype(np.int64), "v": np.arange(len(ts)) + offset})


def test_skewed_sources_larger_than_the_gate() -> None:
    """Source 0 ends before source 1 starts; each holds more than half of ESG_in."""
    rows = 40_000  # the gate holds 65,536 nodes; a source ahead may fill half
    early = stream(np.arange(rows), 0)
    late = stream(np.arange(rows) + rows, rows)
    op = build("forward", {"columns": "v:int", "inputs": "2"})
    out = run_vsn(op, [early, late], 2, 2, reconfigure=[(rows // 2, 1), (rows * 3, 2)])
    assert out.column("v").to_pylist() == list(range(2 * rows))


def test_interleaved_sources_with_reconfigurations_equal_sn() -> None:
    rng = np.random.default_rng(5)
    a = stream(np.sort(rng.integers(0, 50_000, 30_000)), 0)
    b = stream(np.sort(rng.integers(0, 50_000, 30_000)), 10**6)
    op = build("forward", {"columns": "v:int", "inputs": "2"})
    schedule = [(10_000, 2), (20_000, 1), (20_000, 3), (40_000, 2)]
    assert run_vsn(op, [a, b], 1, 3, schedule).equals(run_sn(op, [a, b]))


def test_producers_never_wait_for_room_in_the_gate() -> None:
    """Adds, reconfigurations and closes return while ESG_in is full; nothing is lost.

    Source 0 sends five times what the gate lets a source that is ahead hold; the rest
    waits in the source (its backlog), and goes in once source 1 lets the gate drain.
    """
    op = build("forward", {"columns": "v:int", "inputs": "2"})
    early = stream(np.arange(5000) + 1, 0)
    late = stream(np.arange(0, 6000, 3), 10**6)
    with setup(op, 1, 3, capacity=1024) as pipeline:
        pipeline.add(1, late.slice(0, 1))
        pipeline.add(0, early)
        assert pipeline.status().sources[0].backlog > 0
        epochs = [pipeline.reconfigure(parallelism=1 + k % 3) for k in range(50)]
        pipeline.close(0)
        pipeline.add(1, late.slice(1))
        pipeline.close(1)
        assert pipeline.join(60.0)
        assert pipeline.status().sources[0].backlog == pipeline.status().sources[1].backlog == 0
        assert pipeline.reconfigurations()[-1].epoch == epochs[-1]
        out, _ = pipeline.output()
    assert out.equals(run_sn(op, [early, late]))
