"""What a policy sees of an operator: one load snapshot over a sampling period.

A snapshot is measured, not configured: busy time over wall time per connected instance,
the input rate, the backlog waiting in ESG_in, and for the model policy the work the input
will cause (for a join: comparisons, each new tuple against the opposite window) and the
work one thread has been seen to do per busy second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["LoadSnapshot"]


@dataclass(frozen=True)
class LoadSnapshot:
    """The load of one operator over ``period_s`` seconds ending at ``time_s``.

    Attributes:
        time_s: When the period ended (the sampler's clock).
        period_s: The length of the period.
        parallelism: m, the connected instances during the period.
        max_parallelism: n, the pool size.
        busy: Per connected instance, busy time over wall time in the period (0..1).
        input_rate: Input tuples per second added to the operator in the period.
        backlog: Tuples waiting in ESG_in (added, not yet taken by every instance).
        demand: Work per second the current input causes, in ``unit`` (for a join: the
            comparisons of each new tuple against the opposite window); None if unknown.
        pending: Work waiting in the backlog, in ``unit``; None if unknown.
        capacity: Work one instance does per busy second, measured in the latest period
            with work (this one if it had any); None until some work was measured.
        capacities: Per parallelism, the capacity last measured in a period wholly at
            that parallelism with its threads at least ``TRUSTED_BUSY`` busy on average:
            how the work per thread changes with the threads (it falls where the threads
            contend for the cores, memory or the GIL).
        unit: What work is counted in (``"comparisons"`` or ``"tuples"``).
        epoch: The reconfiguration epoch in force at ``time_s``; None if unknown.
        inputs_open: Whether some input has not ended yet; once every input has, the
            operator cannot be reconfigured (there is nothing left to scale).
        input_for_s: Seconds the operator has had input, counted from the end of the
            first sampled period in which input arrived (0 in that period); None while no
            input has arrived; infinity (the default) when not measured. A period whose
            load was measured wholly after the first input has ``input_for_s >= period_s``.

    """

    time_s: float
    period_s: float
    parallelism: int
    max_parallelism: int
    busy: tuple[float, ...] = field(default_factory=tuple)
    input_rate: float = 0.0
    backlog: int = 0
    demand: float | None = None
    pending: float | None = None
    capacity: float | None = None
    capacities: dict[int, float] = field(default_factory=dict)
    unit: str = "tuples"
    epoch: int | None = None
    inputs_open: bool = True
    input_for_s: float | None = math.inf

    @property
    def load(self) -> float:
        """The average busy fraction of the connected instances (0 with none measured)."""
        return sum(self.busy) / len(self.busy) if self.busy else 0.0

    @property
    def total_load(self) -> float:
        """The busy fractions added up: how many fully busy threads the work took."""
        return sum(self.busy)

    def throughput(self, m: int) -> float | None:
        """Work ``m`` fully busy threads do per second, as far as it was measured.

        At a measured parallelism, ``m`` times its capacity; between two measured ones,
        on the line between their throughputs; beyond them, ``m`` times the capacity of
        the nearest (more threads are assumed to scale until measured); ``m`` times
        ``capacity`` if no parallelism was measured; None without a capacity.
        """
        if not self.capacities:
            return None if self.capacity is None else m * self.capacity
        below = [k for k in self.capacities if k <= m]
        above = [k for k in self.capacities if k >= m]
        if not below or not above:
            nearest = min(above) if not below else max(below)
            return m * self.capacities[nearest]
        a, b = max(below), min(above)
        done_a, done_b = a * self.capacities[a], b * self.capacities[b]
        return done_a if a == b else done_a + (done_b - done_a) * (m - a) / (b - a)

    @property
    def warming_up(self) -> str | None:
        """Why this load cannot be judged yet (the warm-up rule), or None when it can.

        A load measured before any input arrived, or over a period that began before the
        first input, says nothing about the work the input causes (an idle operator is at
        0% whatever its input will be).
        """
        if self.input_for_s is None:
            return "warming up: no input yet"
        if self.input_for_s < self.period_s:
            return (
                f"warming up: input for {self.input_for_s:.2f} s, less than a "
                f"{self.period_s:.2f} s period"
            )
        return None
