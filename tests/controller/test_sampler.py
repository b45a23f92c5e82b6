"""PipelineSampler on a real pipeline, over periods a fake clock sets."""

from __future__ import annotations

import pyarrow as pa

import stretch
from stretch import generate
from stretch.controller import PipelineSampler

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
    assert not worked.inputs_open  # closed: nothing left to scale
    assert idle is not None and idle.busy == (0.0,)
    assert idle.capacity == worked.capacity


def test_input_for_s_counts_from_the_end_of_the_first_period_with_input() -> None:
    """What the warm-up rule reads: None before input, 0 in the period it came, then the
    time since; a sampler made on a pipeline that has input is warm from its start."""
    op = stretch.build("forward", {"columns": "v:int", "inputs": "1"})
    clock = FakeClock()
    with stretch.setup(op, 1, 2) as pipeline:
        sampler = PipelineSampler(pipeline, clock=clock)
        clock.now += 1.0
        before = sampler.sample()
        pipeline.add(0, pa.table({"ts": [1, 2], "v": [1, 2]}))
        clock.now += 1.0
        first = sampler.sample()
        clock.now += 0.5
        second = sampler.sample()
        late = PipelineSampler(pipeline, clock=clock)
        clock.now += 0.25
        restored = late.sample()
    assert before is not None and before.input_for_s is None and before.inputs_open
    assert before.warming_up == "warming up: no input yet"
    assert first is not None and first.input_for_s == 0.0 and first.warming_up is not None
    assert second is not None and second.input_for_s == 0.5 and second.warming_up is None
    assert restored is not None and restored.input_for_s == 0.25
    assert restored.warming_up is None
