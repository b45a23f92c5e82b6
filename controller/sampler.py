"""Load snapshots of a running pipeline, measured without stopping its instances.

The sampler reads the pipeline's counters (each instance's busy time and comparisons, the
rows each source added, ESG_in's occupancy) and turns the change since the previous
sample into a ``LoadSnapshot``. Counters are read without locks: a sample may be a few
tuples stale, which a policy judging a period of hundreds of ms does not notice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from controller.load import LoadSnapshot
from stretch.operators.kernels import BandJoinSpec
from stretch.vsn import Pipeline

__all__ = ["PipelineSampler"]


@dataclass(frozen=True)
class _Counters:
    time_s: float
    busy_s: tuple[float, ...]
    comparisons: int
    rows: tuple[int, ...]


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
        self.join = isinstance(pipeline.op.kernel, BandJoinSpec)
        self._last = self._read()
        # Kept from the latest period with work: an instance's busy time counts when a batch
        # is done, so a period inside a long batch (a backlog) shows no work.
        self._capacity: float | None = None

    def sample(self) -> LoadSnapshot | None:
        """The load since the previous call, or None if no time has passed."""
        now = self._read()
        last, self._last = self._last, now
        period = now.time_s - last.time_s
        if period <= 0:
            return None
        pool = self.pipeline.pool
        m = pool.current.parallelism
        busy = tuple(
            min(max((now.busy_s[j] - last.busy_s[j]) / period, 0.0), 1.0) for j in range(m)
        )
        added = [b - a for a, b in zip(last.rows, now.rows, strict=True)]
        busy_s = sum(now.busy_s) - sum(last.busy_s)
        backlog = int(self.pipeline.esg_in.occupancy())
        if self.join:
            window = self._window_rows()
            rates = [a / period for a in added]
            demand = rates[0] * window[1] + rates[1] * window[0]
            pending = backlog * (window[0] + window[1]) / 2
            work = now.comparisons - last.comparisons
            unit = "comparisons"
        else:
            demand = sum(added) / period
            pending = float(backlog)
            work = sum(added)  # the instances share each tuple's work: one thread's worth
            unit = "tuples"
        if busy_s > 0 and work > 0:
            self._capacity = work / busy_s
        return LoadSnapshot(
            time_s=now.time_s,
            period_s=period,
            parallelism=m,
            max_parallelism=self.pipeline.max_parallelism,
            busy=busy,
            input_rate=sum(added) / period,
            backlog=backlog,
            demand=demand,
            pending=pending,
            capacity=self._capacity,
            unit=unit,
            epoch=pool.current.epoch,
        )

    def _read(self) -> _Counters:
        pool = self.pipeline.pool
        comparisons = getattr(pool.compiled, "comparisons", {})
        return _Counters(
            self.clock(),
            tuple(i.busy_ns / 1e9 for i in pool.instances),
            int(sum(comparisons.values())),
            tuple(len(s) for s in self.pipeline.sources),
        )

    def _window_rows(self) -> list[int]:
        """Per source, the rows it holds within WS of its last ts (what a new tuple meets)."""
        ws = self.pipeline.op.ws_ms
        counts = []
        for store in self.pipeline.sources:
            held = store.rows()
            ts = held.ts[: max(len(store) - held.base, 0)]
            if ts.shape[0] == 0:
                counts.append(0)
                continue
            first = int(np.searchsorted(ts, int(ts[-1]) - ws, side="left"))
            counts.append(int(ts.shape[0]) - first)
        return counts
