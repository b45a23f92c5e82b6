"""PipelineSampler on a real pipeline, over periods a fake clock sets."""

from __future__ import annotations

import stretch
from controller import PipelineSampler
from stretch import generate

TIMEOUT_S = 60.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_capacity_outlives_a_period_without_work() -> None:
    """Busy time counts when a batch is done, so a period inside a long batch shows no work;
    the capacity last measured stays, or the model policy would judge that period's busy
    time (none) and decommission an operator in the middle of its backlog."""
    op = stretch.build("scalejoin", {"ws": 500, "keys": 8})
    left, right = generate.scalejoin(2_000, 2000.0, 3)
    clock = FakeClock()
    with stretch.setup(op, 1, 2) as pipeline:
        sampler = PipelineSampler(pipeline, clock=clock)
        pipeline.add(0, left)
        pipeline.add(1, right)
        pipeline.close()
        assert pipeline.join(TIMEOUT_S)
        clock.now += 1.0
        worked = sampler.sample()
        clock.now += 1.0
        idle = sampler.sample()
    assert worked is not None and worked.capacity is not None and worked.capacity > 0
    assert worked.unit == "comparisons" and worked.epoch == 0
    assert idle is not None and idle.busy == (0.0,)
    assert idle.capacity == worked.capacity
