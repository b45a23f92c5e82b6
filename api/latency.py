"""Output latency: an output row's wall-clock delay after the newest input it depends on.

``ArrivalClock`` records, per source, when each accepted batch arrived and the ``ts`` of
its first row. For an output of event time T the newest contributing input is taken as the
last batch (of any source) whose first row has ``ts <= T``, so the latency is measured at
batch granularity. ``LatencyObserver`` follows the output log in a thread (it reads, never
commits) and observes one latency per group of rows that became visible together, using
the group's largest ``ts``.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable

from stretch.errors import InputError, StretchError
from stretch.model.schema import TS
from stretch.vsn import Pipeline

__all__ = ["ArrivalClock", "LatencyObserver"]


class ArrivalClock:
    """Per source: the first ``ts`` and arrival time of each batch, in arrival order.

    Args:
        sources: The number of input sources.

    """

    def __init__(self, sources: int) -> None:
        self._first_ts: list[list[int]] = [[] for _ in range(sources)]
        self._arrival_s: list[list[float]] = [[] for _ in range(sources)]
        self._lock = threading.Lock()

    def record(self, source: int, first_ts: int, arrival_s: float) -> None:
        """A batch whose first row has ``first_ts`` arrived at ``arrival_s``. O(1)."""
        with self._lock:
            self._first_ts[source].append(first_ts)
            self._arrival_s[source].append(arrival_s)

    def newest_before(self, ts: int) -> float | None:
        """The arrival time of the newest batch that starts at or before ``ts``.

        Forgets older batches, since output times only grow. O(S log B).
        """
        newest: float | None = None
        with self._lock:
            for firsts, arrivals in zip(self._first_ts, self._arrival_s, strict=True):
                index = bisect.bisect_right(firsts, ts) - 1
                if index < 0:
                    continue
                arrival = arrivals[index]
                newest = arrival if newest is None else max(newest, arrival)
                del firsts[:index]
                del arrivals[:index]
        return newest


class LatencyObserver:
    """A thread that follows an output log and reports each new group's latency.

    Args:
        pipeline: The operator's pipeline (its output is followed).
        clock: The arrival times of the operator's input batches.
        observe: Called with a latency in seconds.
        name: The thread's name.
        poll_s: The longest wait before checking for a stop request.

    """

    def __init__(
        self,
        pipeline: Pipeline,
        clock: ArrivalClock,
        observe: Callable[[float], None],
        name: str,
        poll_s: float = 0.2,
    ) -> None:
        self._pipeline = pipeline
        self._clock = clock
        self._observe = observe
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start following the log."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and join it (it ends within one ``poll_s``)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10 * self._poll_s)

    def _run(self) -> None:
        offset = 0
        while not self._stop.is_set():
            pipeline = self._pipeline
            try:
                rows, _ = pipeline.output(offset, 1, self._poll_s)
                output = pipeline.output_status()
                if not rows.num_rows:
                    if output.finished and offset >= output.end_offset:
                        return
                    continue
                end = output.end_offset
                last, _ = pipeline.output(end - 1, 1)
            except InputError:  # a reader committed past us and the log trimmed
                offset = pipeline.output_status().start_offset
                continue
            except StretchError:  # the operator failed: nothing more to follow
                return
            now = time.time()
            if last.num_rows:
                arrival = self._clock.newest_before(last.column(TS)[0].as_py())
                if arrival is not None:
                    self._observe(max(0.0, now - arrival))
            offset = end
