"""Elasticity policies: pure functions from a load snapshot to a parallelism decision.

* ``threshold`` is the controller of the paper's Q4 (section 8.4): upper, target and lower
  load thresholds (90%, 70%, 45%). Above the upper one it provisions the fewest threads
  that bring the average load under the target; below the lower one it decommissions the
  most threads that keep it near the target. Decommissioning rounds down, as the paper's
  Table IV shows (5 threads at 30% load go to 2, at an average of 75%), but never past
  the upper threshold.
* ``model`` is the controller of Q5 (section 8.5): a narrower band ([70%, 80%], target
  75%) applied to the work the input will cause (predicted demand plus the backlog to
  drain within a period) over the capacity one thread was measured to have, so it reacts
  to a rate change before the threads are saturated.

Both are bounded by the configured minimum and maximum parallelism, and both hold while
the operator warms up: no decision rests on a load measured before its first input, or
over a period that began before it (``LoadSnapshot.warming_up``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from stretch.controller.load import LoadSnapshot

__all__ = ["POLICIES", "Decision", "PolicyConfig", "decide", "model", "threshold"]

PolicyName = Literal["threshold", "model"]

_EPS = 1e-9
"""Tolerance for float load figures at a threshold (0.3 * 70 / 0.7 is 30, not 30.0...04)."""


@dataclass(frozen=True)
class PolicyConfig:
    """A policy and its bounds.

    Attributes:
        policy: ``"threshold"`` (Q4) or ``"model"`` (Q5).
        upper: Provision above this average load (0..1].
        target: The average load a decision aims at.
        lower: Decommission below this average load.
        period_ms: How often the loop samples and decides.
        min_parallelism: The fewest connected instances a decision leaves.
        max_parallelism: The most connected instances a decision asks for (at most n).

    """

    policy: PolicyName = "threshold"
    upper: float = 0.9
    target: float = 0.7
    lower: float = 0.45
    period_ms: int = 1000
    min_parallelism: int = 1
    max_parallelism: int | None = None

    @classmethod
    def defaults(cls, policy: PolicyName) -> PolicyConfig:
        """The paper's thresholds for ``policy``: Q4's 90/70/45%, Q5's 80/75/70%."""
        if policy == "model":
            return cls(policy="model", upper=0.8, target=0.75, lower=0.7)
        return cls(policy="threshold")

    def check(self, pool_size: int) -> None:
        """Raise ValueError naming the first field out of range for a pool of ``pool_size``."""
        if self.policy not in POLICIES:
            msg = f"policy must be one of {sorted(POLICIES)}, got {self.policy!r}"
            raise ValueError(msg)
        if not 0 < self.lower <= self.target <= self.upper <= 1:
            msg = (
                "thresholds must satisfy 0 < lower <= target <= upper <= 1, got "
                f"lower={self.lower}, target={self.target}, upper={self.upper}"
            )
            raise ValueError(msg)
        if self.period_ms < 10:
            msg = f"period_ms must be at least 10, got {self.period_ms}"
            raise ValueError(msg)
        top = self.max_parallelism if self.max_parallelism is not None else pool_size
        if not 1 <= self.min_parallelism <= top <= pool_size:
            msg = (
                "parallelism bounds must satisfy 1 <= min_parallelism <= max_parallelism <= "
                f"{pool_size} (the pool size), got {self.min_parallelism}..{top}"
            )
            raise ValueError(msg)

    def bounds(self, pool_size: int) -> tuple[int, int]:
        """``(min, max)`` parallelism for a pool of ``pool_size`` threads."""
        top = self.max_parallelism if self.max_parallelism is not None else pool_size
        return self.min_parallelism, min(top, pool_size)


@dataclass(frozen=True)
class Decision:
    """What a policy decided for one snapshot, and why.

    Attributes:
        parallelism: The parallelism to run with (equal to the current one to hold).
        kind: ``"provision"``, ``"decommission"`` or ``"hold"``.
        reason: A sentence with the figures the decision rests on.
        load: The average load the policy judged (measured or predicted, 0..).

    """

    parallelism: int
    kind: Literal["provision", "decommission", "hold"]
    reason: str
    load: float


def threshold(snapshot: LoadSnapshot, config: PolicyConfig) -> Decision:
    """Q4's controller on the measured busy time of the connected instances."""
    total = snapshot.total_load
    return _judge(snapshot, config, total, "measured load", round_down=True)


def model(snapshot: LoadSnapshot, config: PolicyConfig) -> Decision:
    """Q5's controller on predicted work: demand plus backlog, over measured capacity.

    Without a measured capacity yet (no work done), it judges the measured load.
    """
    if snapshot.capacity is None or snapshot.capacity <= 0 or snapshot.demand is None:
        return _judge(snapshot, config, snapshot.total_load, "measured load", round_down=False)
    pending = snapshot.pending or 0.0
    work = snapshot.demand + pending / (config.period_ms / 1000)
    total = work / snapshot.capacity
    what = (
        f"predicted {snapshot.unit}/s {snapshot.demand:,.0f} + backlog {pending:,.0f} "
        f"over {snapshot.capacity:,.0f} per thread-second"
    )
    decision = _judge(snapshot, config, total, what, round_down=False)
    average = decision.load
    if (
        len(snapshot.capacities) < 2
        or snapshot.warming_up is not None
        or config.lower - _EPS <= average <= config.upper + _EPS
    ):
        return decision
    return _as_measured(snapshot, config, work, decision)


def _as_measured(
    snapshot: LoadSnapshot, config: PolicyConfig, work: float, decision: Decision
) -> Decision:
    """Outside the band, the fewest threads measured to do ``work`` at the target load.

    Used once capacities were measured at two parallelisms or more
    (``LoadSnapshot.throughput``): where more threads were measured to do less in all,
    no more than the best measured are asked for, even overloaded.
    """
    m = snapshot.parallelism
    low, high = config.bounds(snapshot.max_parallelism)
    done = {k: snapshot.throughput(k) or 0.0 for k in range(low, high + 1)}
    carried = [k for k, rate in done.items() if rate * config.target >= work - _EPS]
    new = carried[0] if carried else max(done, key=done.__getitem__)  # ties: the fewest
    measured = ", ".join(f"{k}: {k * c:,.0f}/s" for k, c in sorted(snapshot.capacities.items()))
    figures = f"{decision.reason}; measured at {measured}"
    if new == m:
        return Decision(m, "hold", f"{figures}: {m} does the most", decision.load)
    kind: Literal["provision", "decommission"] = "provision" if new > m else "decommission"
    return Decision(new, kind, f"{figures}: {new} for {work:,.0f}/s", decision.load)


POLICIES = {"threshold": threshold, "model": model}


def decide(snapshot: LoadSnapshot, config: PolicyConfig) -> Decision:
    """The decision of ``config.policy`` for ``snapshot``."""
    return POLICIES[config.policy](snapshot, config)


def _judge(
    snapshot: LoadSnapshot, config: PolicyConfig, total: float, what: str, *, round_down: bool
) -> Decision:
    """Compare the average of ``total`` threads' work over m with the band; pick the new m."""
    m = snapshot.parallelism
    low, high = config.bounds(snapshot.max_parallelism)
    average = total / m
    figures = f"{what}: {total:.2f} threads' work over {m} = {average:.0%} average"
    upper, target, lower = (f"{x * 100:g}%" for x in (config.upper, config.target, config.lower))
    warming = snapshot.warming_up
    if warming is not None:
        figures = f"{warming}; {figures} not judged"
        if low <= m <= high:
            return Decision(m, "hold", figures, average)
        return _into_bounds(m, low, high, figures, average)
    if average > config.upper + _EPS:
        new = max(min(math.ceil(total / config.target - _EPS), high), low)
        if new <= m:
            return Decision(m, "hold", f"{figures}, above {upper}, at max {high}", average)
        return Decision(new, "provision", f"{figures} > {upper}: {new} under {target}", average)
    if average < config.lower - _EPS:
        wanted = math.ceil(total / config.target - _EPS)
        if round_down:  # Table IV: as many as keep it near the target, never over the upper
            near = math.floor(total / config.target + _EPS)
            wanted = max(near, math.ceil(total / config.upper - _EPS))
        new = min(max(wanted, low, 1), high)
        if new >= m:
            why = f"at min {low}" if wanted <= low else f"{wanted} needed"
            return Decision(m, "hold", f"{figures}, below {lower}, {why}", average)
        return Decision(new, "decommission", f"{figures} < {lower}: {new} near {target}", average)
    if not low <= m <= high:
        return _into_bounds(m, low, high, figures, average)
    return Decision(m, "hold", f"{figures}, within {lower}..{upper}", average)


def _into_bounds(m: int, low: int, high: int, figures: str, average: float) -> Decision:
    """Back into ``low..high`` from an ``m`` outside it."""
    new = min(max(m, low), high)
    kind: Literal["provision", "decommission"] = "provision" if new > m else "decommission"
    return Decision(new, kind, f"{figures}; outside the bounds {low}..{high}", average)
