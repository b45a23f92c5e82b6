"""PipelineSampler on a real pipeline, over periods a fake clock sets."""

from __future__ import annotations

import pyarrow as pa

import stretch
from stretch import generate
from stretch.controller import PipelineSampler
from stretch.vsn.status import LoadCounters

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


class ScriptedPipeline:
    """A pipeline whose ``load()`` returns the counters it is given, one per call."""

    def __init__(self, counters: list[LoadCounters]) -> None:
        self.counters = iter(counters)

    def load(self) -> LoadCounters:
        return next(self.counters)


def counters(epoch: int, m: int, busy_s: float, comparisons: int) -> LoadCounters:
    return LoadCounters(
        epoch=epoch,
        parallelism=m,
        max_parallelism=4,
        busy_s=(busy_s / m,) * m + (0.0,) * (4 - m),
        comparisons=comparisons,
        rows=(comparisons // 1000, comparisons // 1000),
        backlog=0,
        window_rows=(100, 100),
    )


def test_capacities_are_kept_per_parallelism_but_not_across_a_switch() -> None:
    clock = FakeClock()
    pipeline = ScriptedPipeline(
        [
            counters(0, 1, 0.0, 0),
            counters(0, 1, 1.0, 4_000_000),  # 1 thread: 4M per busy second
            counters(1, 2, 2.0, 5_000_000),  # a switch in the period: not a figure for 2
            counters(1, 2, 4.0, 11_000_000),  # 2 threads: 3M per busy second
            counters(1, 2, 4.5, 11_500_000),  # 25% busy: 1M per busy second, not kept
        ]
    )
    sampler = PipelineSampler(pipeline, clock=clock)  # type: ignore[arg-type]
    snapshots = []
    for _ in range(4):
        clock.now += 1.0
        snapshots.append(sampler.sample())
    one, switched, two, idle = snapshots
    assert one is not None and one.capacities == {1: 4e6}
    assert switched is not None and switched.capacity == 1e6 and switched.capacities == {1: 4e6}
    assert two is not None and two.capacities == {1: 4e6, 2: 3e6}
    assert two.throughput(2) == 6e6 and two.throughput(4) == 12e6
    assert idle is not None and idle.capacity == 1e6 and idle.capacities == two.capacities
