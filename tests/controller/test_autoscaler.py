"""The control loop: cool-down, patience, bounds, no flapping; on a real pipeline too."""

from __future__ import annotations

import random
import threading

import pyarrow as pa
import pytest

import stretch
from stretch import generate
from stretch.controller import Autoscaler, LoadSnapshot, PipelineSampler, PolicyConfig, autoscale
from stretch.vsn.status import LoadCounters
from tests.waiting import wait_until

TIMEOUT_S = 60.0


class FakeOperator:
    """Snapshots with a given load at the operator's current parallelism."""

    def __init__(self, m: int = 2, n: int = 8) -> None:
        self.m = m
        self.n = n
        self.loads: list[float] = []
        self.applied: list[tuple[int, str]] = []
        self.fail = False

    def sample(self) -> LoadSnapshot | None:
        if not self.loads:
            return None
        load = self.loads.pop(0)
        return LoadSnapshot(1.0, 1.0, self.m, self.n, busy=(load,) * self.m)

    def apply(self, parallelism: int, reason: str) -> int:
        if self.fail:
            msg = "the operator is closed"
            raise RuntimeError(msg)
        self.applied.append((parallelism, reason))
        self.m = parallelism
        return len(self.applied)


def run(op: FakeOperator, loads: list[float], **kwargs: int) -> Autoscaler:
    scaler = Autoscaler(PolicyConfig(), op.sample, op.apply, **kwargs)
    op.loads = list(loads)
    while op.loads:
        scaler.step()
    return scaler


def test_overload_provisions_at_once_then_cools_down() -> None:
    op = FakeOperator(m=2)
    scaler = run(op, [1.0, 1.0, 1.0, 1.0], cooldown_periods=2)
    assert [p for p, _ in op.applied] == [3, 5]  # 2 / 0.7 -> 3; then 3 / 0.7 -> 5
    kinds = [r.decision.kind for r in scaler.records]
    assert kinds == ["provision", "hold", "hold", "provision"]
    assert "cooling down after a change (2 periods left)" in scaler.records[1].decision.reason
    assert "cooling down after a change (1 period left)" in scaler.records[2].decision.reason
    assert scaler.records[0].applied and scaler.records[0].epoch == 1


def test_decommission_waits_for_patience() -> None:
    op = FakeOperator(m=4)
    scaler = run(op, [0.1, 0.6, 0.1, 0.1], patience=2)
    assert [p for p, _ in op.applied] == [1]  # asked twice in a row only at the end
    assert [r.applied for r in scaler.records] == [False, False, False, True]
    assert "1 of 2" in scaler.records[0].decision.reason


def test_no_new_request_while_the_last_one_is_pending() -> None:
    """A switch completes when the instances reach it: until then the snapshots show the old
    epoch and its parallelism, which would ask for the same provisioning again."""
    applied: list[int] = []

    def apply(parallelism: int, reason: str) -> int:
        applied.append(parallelism)
        return len(applied)  # the epoch

    overloaded = [LoadSnapshot(1.0, 1.0, 2, 8, busy=(1.0, 1.0), epoch=0)] * 6
    in_force = [LoadSnapshot(1.0, 1.0, 3, 8, busy=(1.0,) * 3, epoch=1)] * 3
    snapshots = iter(overloaded + in_force)
    scaler = Autoscaler(PolicyConfig(), lambda: next(snapshots), apply, cooldown_periods=2)
    for _ in range(len(overloaded) + len(in_force)):
        scaler.step()
    assert applied == [3, 5]  # 2 / 0.7 -> 3; in force, cooled down for 2 periods; 3 / 0.7 -> 5
    kinds = [r.decision.kind for r in scaler.records]
    assert kinds == ["provision"] + ["hold"] * 7 + ["provision"]
    assert all("epoch 1 pending" in r.decision.reason for r in list(scaler.records)[1:6])
    assert "cooling down" in scaler.records[6].decision.reason


def test_noisy_load_inside_the_band_never_reconfigures() -> None:
    rnd = random.Random(5)
    op = FakeOperator(m=3)
    run(op, [rnd.uniform(0.5, 0.85) for _ in range(200)])
    assert op.applied == []


def test_noisy_load_around_a_threshold_does_not_flap() -> None:
    rnd = random.Random(7)
    op = FakeOperator(m=4)
    # Load hovering around the lower threshold: at most a change every few periods.
    scaler = run(op, [rnd.uniform(0.35, 0.55) for _ in range(60)], cooldown_periods=3)
    applied = [i for i, r in enumerate(scaler.records) if r.applied]
    assert all(b - a > 3 for a, b in zip(applied, applied[1:], strict=False))
    assert op.m >= 1


def test_a_failed_apply_is_recorded_and_the_loop_goes_on() -> None:
    op = FakeOperator(m=1)
    op.fail = True
    scaler = run(op, [1.0, 1.0])
    assert [r.error for r in scaler.records] == ["RuntimeError: the operator is closed"] * 2
    assert op.m == 1


def test_the_loop_thread_stops_within_its_deadline() -> None:
    op = FakeOperator(m=2)
    sampled = threading.Event()

    def sample() -> LoadSnapshot | None:
        sampled.set()
        return LoadSnapshot(1.0, 1.0, op.m, op.n, busy=(0.6,) * op.m)

    scaler = Autoscaler(PolicyConfig(period_ms=10), sample, op.apply)
    scaler.start()
    assert sampled.wait(TIMEOUT_S)
    scaler.stop(timeout_s=TIMEOUT_S)
    assert scaler._thread is None
    assert scaler.last is not None and scaler.last.decision.kind == "hold"


class FakeClock:
    """Seconds that move only when told: the sampler's period is what the test says."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("policy", ["threshold", "model"])
def test_a_pipeline_is_scaled_up_and_down_with_output_equal_to_sn(policy: str) -> None:
    """Real busy time over a fake period: overload and idleness without timing races."""
    op = stretch.build("scalejoin", {"ws": 500, "keys": 8})
    left, right = generate.scalejoin(3_000, 2000.0, 2)
    clock = FakeClock()
    with stretch.setup(op, 1, 4) as pipeline:
        sampler = PipelineSampler(pipeline, clock=clock)

        def apply(parallelism: int, reason: str) -> int:
            return pipeline.reconfigure(parallelism=parallelism)

        config = PolicyConfig.defaults(policy)  # type: ignore[arg-type]
        scaler = Autoscaler(config, sampler.sample, apply, cooldown_periods=1, patience=2)
        clock.now += 1000.0  # idle for 1000 s before any input: not judged (warm-up)
        before = scaler.step()
        assert before is not None and before.decision.kind == "hold"
        assert before.decision.reason.startswith("warming up: no input yet")
        pipeline.add(0, left.slice(0, 1_000))
        pipeline.add(1, right.slice(0, 1_000))
        pipeline.watermark(0, int(left.column("ts")[999].as_py()))
        assert _wait_for_work(pipeline, 0.0)
        clock.now += 1e-6  # the first period with input began before it: not judged
        first = scaler.step()
        assert first is not None and first.decision.kind == "hold", first
        assert first.decision.reason.startswith("warming up: input for 0.00 s")
        busy_s = pipeline.load().busy_s[0]
        pipeline.add(0, left.slice(1_000, 500))
        pipeline.add(1, right.slice(1_000, 500))
        pipeline.watermark(0, int(left.column("ts")[1_499].as_py()))
        assert _wait_for_work(pipeline, busy_s)
        clock.now += 1e-6  # all that busy time in a microsecond: overloaded
        record = scaler.step()
        assert record is not None and record.applied, record
        assert record.decision.kind == "provision" and record.decision.parallelism >= 2
        pipeline.add(0, left.slice(1_500))
        pipeline.add(1, right.slice(1_500))
        assert record.epoch is not None and pipeline.wait_epoch(record.epoch, TIMEOUT_S)
        last_ts = max(t.column("ts")[-1].as_py() for t in (left, right))
        for source in (0, 1):
            pipeline.watermark(source, last_ts)
        # Idle means the input is processed: no backlog for the model policy to drain.
        assert wait_until(lambda: pipeline.status().output.watermark >= last_ts)
        for _ in range(3):  # idle for 1000 s per period: cool down, then patience, then down
            clock.now += 1000.0
            scaler.step()
        kinds = [r.decision.kind for r in scaler.records]
        assert kinds == ["hold", "hold", "provision", "hold", "hold", "decommission"], kinds
        assert scaler.records[-1].decision.parallelism == 1
        assert scaler.records[-1].epoch is not None
        pipeline.close()
        assert pipeline.join(TIMEOUT_S)
        out, _ = pipeline.output()
    assert out.equals(stretch.run_sn(op, [left, right]))


def _wait_for_work(pipeline: stretch.Pipeline, busy_s: float) -> bool:
    """Wait (bounded) until instance 0 has been busy for more than ``busy_s`` seconds."""
    return wait_until(lambda: pipeline.load().busy_s[0] > busy_s)


def test_autoscale_binds_a_pipeline_and_records_the_cause() -> None:
    op = stretch.build("forward", {"columns": "v:int", "inputs": "1"})
    with stretch.setup(op, 3, 4) as pipeline:
        with pytest.raises(ValueError, match="the pool size"):
            autoscale(pipeline, PolicyConfig(max_parallelism=8))
        pipeline.add(0, pa.table({"ts": [1, 2], "v": [1, 2]}))  # input seen: warm a period on
        scaler = autoscale(pipeline, PolicyConfig(period_ms=10, min_parallelism=1))
        try:  # idle: the policy asks to decommission, patience permitting
            assert wait_until(lambda: any(r.applied for r in scaler.records))
        finally:
            scaler.stop(TIMEOUT_S)
        applied = next(r for r in scaler.records if r.applied)
        assert applied.decision.kind == "decommission"
        assert applied.epoch is not None and pipeline.wait_epoch(applied.epoch, TIMEOUT_S)
        (record,) = [r for r in pipeline.reconfigurations() if r.epoch == applied.epoch]
        assert record.cause == "autoscale" and record.reason == applied.decision.reason
        assert pipeline.status().reconfigurations[0].cause == "autoscale"


def test_an_operator_without_input_keeps_its_parallelism_until_input_comes() -> None:
    """The warm-up rule in the loop (issue 23): an operator created ahead of its data is
    idle, not over-provisioned; once input has come and a period of it passed, the idle
    operator is decommissioned."""
    op = stretch.build("forward", {"columns": "v:int", "inputs": "1"})
    with stretch.setup(op, 3, 4) as pipeline:
        scaler = autoscale(pipeline, PolicyConfig(period_ms=10, min_parallelism=1))
        try:
            assert wait_until(lambda: len(scaler.records) >= 5)
            early = list(scaler.records)
            pipeline.add(0, pa.table({"ts": [1, 2], "v": [1, 2]}))
            assert wait_until(lambda: any(r.applied for r in scaler.records))
        finally:
            scaler.stop(TIMEOUT_S)
        assert all(r.decision.kind == "hold" and not r.applied for r in early)
        assert all(r.decision.reason.startswith("warming up: no input yet") for r in early)
        applied = next(r for r in scaler.records if r.applied)
        assert applied.decision.kind == "decommission"
        assert applied.snapshot.warming_up is None
        assert applied.snapshot.input_for_s is not None
        assert applied.snapshot.input_for_s >= applied.snapshot.period_s


def test_no_change_is_asked_once_every_input_has_ended() -> None:
    """A runtime refuses a reconfiguration after the end of input: the loop holds, quietly."""
    ended = LoadSnapshot(1.0, 1.0, 2, 8, busy=(0.05, 0.05), epoch=0, inputs_open=False)
    asked: list[int] = []

    def apply(parallelism: int, reason: str) -> int:
        asked.append(parallelism)
        return 1

    scaler = Autoscaler(PolicyConfig(), iter([ended] * 4).__next__, apply, patience=1)
    records = [scaler.step() for _ in range(4)]
    assert asked == []
    for record in records:
        assert record is not None and record.decision.kind == "hold"
        assert record.error is None
        assert record.decision.reason.startswith("every input has ended: nothing left to scale")


class SlowingMachine:
    """A band join on a simulated machine where threads beyond 8 slow each other down.

    Per-thread capacity as measured on a lent 16-vCPU machine (section "Q4 on 16 cores"
    of docs/elasticity.md): 2.35G comparisons per busy second up to 8 threads, 0.47G at
    16 (``(8 / m) ** 2.3`` beyond 8), so 16 threads do less than 8 in all. ``load()``
    gives the pipeline's counters after one more period of 1 s at the demand given.
    """

    WINDOW = 100_000

    def __init__(self, m: int, n: int, demand: float, clock: FakeClock) -> None:
        self.m, self.n, self.demand, self.clock = m, n, demand, clock
        self.epoch = 0
        self.busy_s = [0.0] * n
        self.comparisons = 0.0
        self.rows = 0
        self.owed = 0.0  # comparisons of the backlog

    @staticmethod
    def capacity(m: int) -> float:
        return 2.35e9 * min(1.0, (8 / m) ** 2.3)

    def load(self) -> LoadCounters:
        return LoadCounters(
            epoch=self.epoch,
            parallelism=self.m,
            max_parallelism=self.n,
            busy_s=tuple(self.busy_s),
            comparisons=int(self.comparisons),
            rows=(self.rows, self.rows),
            backlog=int(self.owed / self.WINDOW),
            window_rows=(self.WINDOW, self.WINDOW),
        )

    def period(self) -> None:
        """One second of input at the demand, worked off as far as the threads can."""
        self.clock.now += 1.0
        self.rows += int(self.demand / (2 * self.WINDOW))
        wanted = self.demand + self.owed
        done = min(wanted, self.m * self.capacity(self.m))
        self.owed = wanted - done
        self.comparisons += done
        for j in range(self.m):
            self.busy_s[j] += done / (self.m * self.capacity(self.m))

    def apply(self, parallelism: int, reason: str) -> int:
        self.m = parallelism
        self.epoch += 1
        return self.epoch


def test_the_model_policy_settles_where_the_machine_does_the_most() -> None:
    """Overloaded beyond what any parallelism carries, the model policy first assumes more
    threads scale (8 -> 16), measures that they do not, and goes back to 8, the most the
    machine does; then it holds, however long the overload lasts."""
    clock = FakeClock()
    machine = SlowingMachine(m=8, n=16, demand=25e9, clock=clock)
    sampler = PipelineSampler(machine, clock=clock)  # type: ignore[arg-type]
    scaler = Autoscaler(PolicyConfig.defaults("model"), sampler.sample, machine.apply)
    path = []
    for _ in range(40):
        machine.period()
        record = scaler.step()
        assert record is not None
        path.append(machine.m)
    changes = [b for a, b in zip(path, path[1:], strict=False) if a != b]
    assert changes == [16, 8], path
    assert path[-1] == 8
    held = scaler.records[-1].decision
    assert held.kind == "hold" and "8 does the most" in held.reason
