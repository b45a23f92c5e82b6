"""Load snapshots of a running pipeline, measured without stopping its instances.

The sampler reads the pipeline's counters (each instance's busy time and comparisons, the
rows each source added, ESG_in's occupancy) and turns the change since the previous
sample into a ``LoadSnapshot``. Counters are read without locks: a sample may be a few
tuples stale, which a policy judging a period of hundreds of ms does not notice.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from stretch.controller.load import LoadSnapshot
from stretch.vsn import Pipeline

__all__ = ["TRUSTED_BUSY", "PipelineSampler"]

TRUSTED_BUSY = 0.5
"""The average busy fraction of a period whose capacity counts for its parallelism.

At low load a thread's batches are small and their fixed costs make its work per busy
second look lower than what it does when busy: in one Q5 run on two cores, two threads
read 1.23G comparisons/s from a period at 43% predicted load and 3.13G from one at 68%.
"""


class PipelineSampler:
    """Makes a ``LoadSnapshot`` of ``pipeline`` per call, over the time since the last call.

    For a band join the work unit is comparisons: the demand is each source's input rate
    times the tuples of the opposite stream within WS (every new tuple is compared with the
    opposite window), and the capacity is the comparisons done per busy second. For other
    operators the unit is tuples.

    Args:
        pipeline: The running pipeline.
        clock: Seconds, monotonic (a fake one in tests).

    """

    def __init__(self, pipeline: Pipeline, clock: Callable[[], float] = time.monotonic) -> None:
        self.pipeline = pipeline
        self.clock = clock
        self._last = (clock(), pipeline.load())
        # Kept from the latest period with work: an instance's busy time counts when a batch
        # is done, so a period inside a long batch (a backlog) shows no work.
        self._capacity: float | None = None
        self._capacities: dict[int, float] = {}
        # The end of the first period with input (the warm-up rule); a pipeline restored
        # with input already in it is warm from now on.
        self._input_since: float | None = self._last[0] if sum(self._last[1].rows) else None

    def sample(self) -> LoadSnapshot | None:
        """The load since the previous call, or None if no time has passed."""
        now = (self.clock(), self.pipeline.load())
        (last_s, last), self._last = self._last, now
        now_s, counters = now
        period = now_s - last_s
        if period <= 0:
            return None
        m = counters.parallelism
        busy = tuple(
            min(max((counters.busy_s[j] - last.busy_s[j]) / period, 0.0), 1.0) for j in range(m)
        )
        added = [b - a for a, b in zip(last.rows, counters.rows, strict=True)]
        busy_s = sum(counters.busy_s) - sum(last.busy_s)
        backlog = counters.backlog
        window = counters.window_rows
        if window is not None:  # a band join: the work unit is comparisons
            rates = [a / period for a in added]
            demand = rates[0] * window[1] + rates[1] * window[0]
            pending = backlog * (window[0] + window[1]) / 2
            work = counters.comparisons - last.comparisons
            unit = "comparisons"
        else:
            demand = sum(added) / period
            pending = float(backlog)
            work = sum(added)  # the instances share each tuple's work: one thread's worth
            unit = "tuples"
        if busy_s > 0 and work > 0:
            self._capacity = work / busy_s
            # A figure for m: a period at one parallelism, its threads busy enough that
            # per-batch overheads of a trickle of input do not pass for what m can do.
            if counters.epoch == last.epoch and sum(busy) >= TRUSTED_BUSY * m:
                self._capacities[m] = self._capacity
        if self._input_since is None and sum(added) > 0:
            self._input_since = now_s
        return LoadSnapshot(
            time_s=now_s,
            period_s=period,
            parallelism=m,
            max_parallelism=counters.max_parallelism,
            busy=busy,
            input_rate=sum(added) / period,
            backlog=backlog,
            demand=demand,
            pending=pending,
            capacity=self._capacity,
            capacities=dict(self._capacities),
            unit=unit,
            epoch=counters.epoch,
            inputs_open=counters.inputs_open,
            input_for_s=None if self._input_since is None else now_s - self._input_since,
        )
