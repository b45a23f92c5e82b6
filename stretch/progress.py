"""What ``stretch -v replay`` reports while it runs.

Rows in and out per second, and each reconfiguration with its duration: a daemon thread
samples the pipeline's ``stats()`` once per interval and logs one line per sample and one
per completed reconfiguration; the sampling never touches the data path.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from stretch.vsn import Pipeline, ReconfigurationStatus

__all__ = ["ReplayProgress"]

JOIN_TIMEOUT_S = 1.0


class ReplayProgress:
    """Log a replay's progress every ``interval_s`` until stopped.

    Args:
        name: The operator's name, for the lines.
        logger: Where the lines go (at INFO).
        interval_s: Seconds between two lines.
        rows_total: The input's rows, if known: the lines say how much of it went in.

    """

    def __init__(
        self,
        name: str,
        logger: logging.Logger,
        interval_s: float = 1.0,
        rows_total: int | None = None,
    ) -> None:
        self.name = name
        self.rows_total = rows_total
        self.logger = logger
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pipeline: Pipeline | None = None
        self._reported: set[int] = set()
        self._last = (time.perf_counter(), 0, 0)

    def watch(self, pipeline: Pipeline) -> None:
        """Start reporting on ``pipeline`` (``run_vsn``'s ``on_start``)."""
        self._pipeline = pipeline
        self._last = (time.perf_counter(), 0, 0)
        self._thread = threading.Thread(
            target=self._run, name=f"stretch-progress-{self.name}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop reporting; log the reconfigurations completed since the last line."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(JOIN_TIMEOUT_S)
            if self._pipeline is not None:
                self._reconfigurations(self._pipeline.reconfigurations())

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self._pipeline is not None:
                self._sample(self._pipeline)

    def _sample(self, pipeline: Pipeline) -> None:
        status = pipeline.status()
        rows_in = sum(source.rows - source.backlog for source in status.sources)
        rows_out = status.output.end_offset
        now = time.perf_counter()
        then, before_in, before_out = self._last
        elapsed = max(now - then, 1e-9)
        self._last = (now, rows_in, rows_out)
        share = "" if not self.rows_total else f"{100 * rows_in // self.rows_total}%, "
        self.logger.info(
            "%s: %d rows in (%s%.0f/s), %d rows out (%.0f/s), %d instances",
            self.name,
            rows_in,
            share,
            (rows_in - before_in) / elapsed,
            rows_out,
            (rows_out - before_out) / elapsed,
            status.parallelism,
        )
        self._reconfigurations(status.reconfigurations)

    def _reconfigurations(self, records: Sequence[ReconfigurationStatus]) -> None:
        for record in records:
            epoch = record.epoch
            if record.duration_ms is None or epoch in self._reported:
                continue
            self._reported.add(epoch)
            self.logger.info(
                "%s: reconfiguration to epoch %d: %s -> %s instances in %.2f ms (at ts %s)",
                self.name,
                epoch,
                record.from_parallelism,
                record.to_parallelism,
                record.duration_ms,
                record.trigger_ts,
            )
