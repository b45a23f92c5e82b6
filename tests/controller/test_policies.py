"""Policies on table-driven load snapshots, including the paper's Table IV transitions."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stretch.controller import LoadSnapshot, PolicyConfig, decide, model, threshold


def snapshot(m: int, load: float, n: int = 128, **kwargs: float | None) -> LoadSnapshot:
    """m connected instances, each ``load`` busy, in a pool of n."""
    return LoadSnapshot(
        time_s=1.0, period_s=1.0, parallelism=m, max_parallelism=n, busy=(load,) * m, **kwargs
    )


Q4 = PolicyConfig.defaults("threshold")

# Table IV (section 8.4): starting threads -> after provisioning at 120% of what they
# sustain, and after decommissioning at 30%. "-" (None): no action possible or run.
TABLE_IV = [
    (1, 2, None),
    (5, 9, 2),
    (9, 16, 3),
    (18, 31, 7),
    (30, 52, 12),
    (40, 69, 17),
    (60, None, 25),
    (70, None, 30),
]


@pytest.mark.parametrize(("start", "provisioned", "decommissioned"), TABLE_IV)
def test_threshold_policy_reproduces_table_iv(
    start: int, provisioned: int | None, decommissioned: int | None
) -> None:
    up = threshold(snapshot(start, 1.2), Q4)
    if provisioned is not None:
        assert (up.kind, up.parallelism) == ("provision", provisioned), up.reason
    down = threshold(snapshot(start, 0.3), Q4)
    if decommissioned is None:
        assert (down.kind, down.parallelism) == ("hold", start), down.reason
    else:
        assert (down.kind, down.parallelism) == ("decommission", decommissioned), down.reason


@pytest.mark.parametrize(
    ("m", "load", "kind", "new"),
    [
        (4, 0.95, "provision", 6),  # 3.8 threads' work / 0.7 -> 6
        (4, 0.9, "hold", 4),  # at the upper threshold: not above it
        (4, 0.7, "hold", 4),
        (4, 0.45, "hold", 4),  # at the lower threshold: not below it
        (4, 0.2, "decommission", 1),  # 0.8 threads' work: one thread at 80% (< 90%)
        (1, 0.1, "hold", 1),  # nothing to remove
        (8, 1.0, "provision", 12),  # 8 / 0.7 = 11.4 -> 12
    ],
)
def test_threshold_policy_table(m: int, load: float, kind: str, new: int) -> None:
    decision = threshold(snapshot(m, load), Q4)
    assert (decision.kind, decision.parallelism) == (kind, new), decision.reason
    assert f"{load * m:.2f}" in decision.reason


def test_decisions_stay_within_the_bounds() -> None:
    config = PolicyConfig(min_parallelism=2, max_parallelism=5)
    assert threshold(snapshot(4, 1.0, n=8), config).parallelism == 5
    assert threshold(snapshot(4, 0.05, n=8), config).parallelism == 2
    assert threshold(snapshot(5, 1.0, n=8), config).kind == "hold"  # already at the max
    assert threshold(snapshot(7, 0.7, n=8), config).parallelism == 5  # outside the bounds
    assert threshold(snapshot(2, 1.0, n=3), PolicyConfig()).parallelism == 3  # pool size


@given(
    m=st.integers(1, 64),
    loads=st.lists(st.floats(0, 1), min_size=64, max_size=64),
    policy=st.sampled_from(["threshold", "model"]),
)
def test_a_decision_brings_the_load_into_the_band(m: int, loads: list[float], policy: str) -> None:
    config = PolicyConfig.defaults(policy)  # type: ignore[arg-type]
    snap = LoadSnapshot(1.0, 1.0, m, 64, busy=tuple(loads[:m]))
    decision = decide(snap, config)
    assert 1 <= decision.parallelism <= 64
    after = snap.total_load / decision.parallelism
    if decision.kind == "provision":
        assert after <= config.target + 1e-9 or decision.parallelism == 64
    elif decision.kind == "decommission":
        assert after <= config.upper + 1e-9
        assert decision.parallelism < m
    else:
        assert decision.parallelism == m


def test_model_policy_predicts_from_demand_and_capacity() -> None:
    config = PolicyConfig.defaults("model")
    assert (config.lower, config.target, config.upper) == (0.7, 0.75, 0.8)
    # Threads are barely busy yet, but the input now causes 3.0e9 comparisons/s and one
    # thread does 1e9 per busy second: 3 threads' work, 4 threads at 75%.
    rising = snapshot(2, 0.3, demand=3.0e9, pending=0.0, capacity=1e9)
    decision = model(rising, config)
    assert (decision.kind, decision.parallelism) == ("provision", 4), decision.reason
    assert "predicted" in decision.reason
    # A backlog of 1e9 comparisons to drain within the 1 s period adds a thread's work.
    backlog = snapshot(2, 0.3, demand=3.0e9, pending=1.0e9, capacity=1e9)
    assert model(backlog, config).parallelism == 6
    # Load that fell: 1.2 threads' work on 4 threads (30%) -> 2 threads at 60%.
    falling = snapshot(4, 0.9, demand=1.2e9, pending=0.0, capacity=1e9)
    assert (model(falling, config).kind, model(falling, config).parallelism) == ("decommission", 2)
    # Inside the band [70%, 80%]: hold.
    steady = snapshot(4, 0.9, demand=3.0e9, pending=0.0, capacity=1e9)
    assert model(steady, config).kind == "hold"


def test_model_policy_without_a_measured_capacity_judges_the_measured_load() -> None:
    decision = model(snapshot(2, 1.0, demand=None, capacity=None), PolicyConfig.defaults("model"))
    assert (decision.kind, decision.parallelism) == ("provision", 3)
    assert "measured load" in decision.reason


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"upper": 0.5, "target": 0.7}, "lower <= target <= upper"),
        ({"lower": 0.0}, "0 < lower"),
        ({"period_ms": 1}, "period_ms"),
        ({"min_parallelism": 3, "max_parallelism": 2}, "min_parallelism <= max_parallelism"),
        ({"max_parallelism": 9}, "the pool size"),
        ({"policy": "magic"}, "policy must be one of"),
    ],
)
def test_bad_configs_name_the_field(fields: dict[str, object], message: str) -> None:
    config = PolicyConfig(**fields)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        config.check(pool_size=8)
    PolicyConfig().check(pool_size=8)


@pytest.mark.parametrize("policy", [threshold, model])
@pytest.mark.parametrize("load", [0.0, 0.1, 1.0])
def test_no_decision_before_input_or_within_its_first_period(policy: object, load: float) -> None:
    """The warm-up rule (issue 23): a load measured before the operator's first input, or
    over a period that began before it, is not judged; a whole period after it is."""
    decide_with = threshold if policy is threshold else model
    config = PolicyConfig.defaults("threshold" if policy is threshold else "model")
    before = decide_with(snapshot(2, load, input_for_s=None), config)
    assert (before.kind, before.parallelism) == ("hold", 2)
    assert before.reason.startswith("warming up: no input yet")
    first = decide_with(snapshot(2, load, input_for_s=0.0), config)
    assert (first.kind, first.parallelism) == ("hold", 2)
    assert first.reason.startswith("warming up: input for 0.00 s")
    partial = decide_with(snapshot(2, load, input_for_s=0.99), config)
    assert partial.kind == "hold" and "warming up" in partial.reason
    warm = decide_with(snapshot(2, load, input_for_s=1.0), config)
    assert warm == decide_with(snapshot(2, load), config)  # the default: not measured
    assert warm.kind == (
        "hold" if 0.45 <= load <= 0.9 else "provision" if load > 0.9 else "decommission"
    )


def test_warm_up_still_keeps_the_bounds() -> None:
    """Bounds are configuration, not load: they apply before the first input too."""
    config = PolicyConfig(min_parallelism=3, max_parallelism=6)
    low = decide(snapshot(2, 0.0, n=8, input_for_s=None), config)
    assert (low.kind, low.parallelism) == ("provision", 3)
    high = decide(snapshot(7, 0.0, n=8, input_for_s=None), config)
    assert (high.kind, high.parallelism) == ("decommission", 6)


def test_throughput_follows_the_measured_capacities() -> None:
    none = snapshot(2, 0.5)
    assert none.throughput(4) is None
    one = snapshot(2, 0.5, capacity=1e9)
    assert one.throughput(4) == 4e9  # no table yet: linear in the latest capacity
    # 16 vCPUs as measured on a lent machine: a thread of 16 does a fifth of one of 8
    table = LoadSnapshot(1.0, 1.0, 16, 16, capacity=4.7e8, capacities={8: 2.35e9, 16: 4.7e8})
    assert table.throughput(8) == 8 * 2.35e9
    assert table.throughput(4) == 4 * 2.35e9  # below the table: the nearest capacity
    assert table.throughput(12) == pytest.approx((8 * 2.35e9 + 16 * 4.7e8) / 2)  # on the line
    assert table.throughput(20) == 20 * 4.7e8  # beyond: assumed to scale from the nearest


def test_model_policy_asks_for_no_more_threads_than_were_measured_to_help() -> None:
    config = PolicyConfig.defaults("model")
    measured = {8: 2.35e9, 16: 4.7e8}  # 18.8e9 comparisons/s at 8 threads, 7.5e9 at 16
    # Overloaded at 16 (25e9/s wanted): 8 threads do the most, so back to 8.
    at_16 = LoadSnapshot(
        1.0, 1.0, 16, 16, busy=(1.0,) * 16, demand=25e9, pending=0.0, capacity=4.7e8,
        capacities=measured,
    )  # fmt: skip
    decision = model(at_16, config)
    assert (decision.kind, decision.parallelism) == ("decommission", 8), decision.reason
    assert "8 for" in decision.reason and "measured at 8:" in decision.reason
    # Overloaded at 8 with 16 measured to do less: hold at 8.
    at_8 = replace(at_16, parallelism=8, busy=(1.0,) * 8, capacity=2.35e9)
    decision = model(at_8, config)
    assert (decision.kind, decision.parallelism) == ("hold", 8), decision.reason
    # With only 8 measured the policy still assumes more threads scale (and finds out).
    alone = replace(at_8, capacities={8: 2.35e9})
    decision = model(alone, config)
    assert (decision.kind, decision.parallelism) == ("provision", 15), decision.reason
    # Under the band (3e9/s, 40% of 16 threads): the fewest threads measured to do it at
    # 75%, two at 8's capacity.
    light = replace(at_16, demand=3e9)
    decision = model(light, config)
    assert (decision.kind, decision.parallelism) == ("decommission", 2), decision.reason
    # Inside the band the policy holds, as without a table.
    assert model(replace(at_16, demand=6e9), config).kind == "hold"


@given(
    m=st.integers(1, 16),
    demand=st.floats(1e6, 1e11),
    measured=st.dictionaries(st.integers(1, 16), st.floats(1e6, 1e10), min_size=2, max_size=6),
)
def test_measured_decisions_carry_the_work_or_do_the_most(
    m: int, demand: float, measured: dict[int, float]
) -> None:
    config = PolicyConfig.defaults("model")
    snap = LoadSnapshot(
        1.0, 1.0, m, 16, busy=(0.5,) * m, demand=demand, pending=0.0,
        capacity=measured.get(m, next(iter(measured.values()))), capacities=measured,
    )  # fmt: skip
    decision = model(snap, config)
    assert 1 <= decision.parallelism <= 16
    average = demand / snap.capacity / m  # type: ignore[operator]
    if config.lower - 1e-9 <= average <= config.upper + 1e-9:
        assert decision.parallelism == m  # in the band: hold, as before
        return
    done = {k: snap.throughput(k) or 0.0 for k in range(1, 17)}
    carried = [k for k in done if done[k] * config.target >= demand - 1e-9]
    if carried:
        assert decision.parallelism == min(carried)
    else:
        assert done[decision.parallelism] >= max(done.values()) - 1e-6 * max(done.values())
