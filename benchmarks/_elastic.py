"""Plumbing of bench_elastic.py: paced input, latency read off the output log, measured runs.

A run feeds an operator's input paced by the wall clock (event time = wall time: a row with
ts t ms is added t ms after the start), reads the output log in a consumer thread, samples
the pipeline's counters every ``SAMPLE_S`` and, when given a policy, lets a
``controller.Autoscaler`` reconfigure it. Latency follows section 8: the wall time at which
an output row was read minus the wall arrival of the newest input tuple contributing to it;
for a join that is the input tuple with the output's ts, so the feeder keeps, per tick,
when it added its rows and the last ts among them.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from _elastic_load import DRAIN_TIMEOUT_S
from numpy.typing import NDArray

from stretch.controller import Autoscaler, PipelineSampler, PolicyConfig
from stretch.model.oplus import OPlus
from stretch.vsn import Pipeline, ReconfigurationStatus, setup

SAMPLE_S = 0.25
"""How often a run samples the pipeline's counters (the time series of the plots)."""

POLL_S = 0.05
"""The longest the output reader waits for new rows before it checks for the end."""


class Feeder(threading.Thread):
    """Adds every source's rows paced by the wall clock: a row with ts t ms at start + t.

    The sources share one ts column, so their rows go in the same ticks. Per tick it keeps
    when it added the rows and the last ts among them: the arrival of any input ts.
    """

    def __init__(
        self, pipeline: Pipeline, tables: list[pa.Table], start_s: float, tick_s: float
    ) -> None:
        super().__init__(name="feeder", daemon=True)
        self.pipeline = pipeline
        self.tables = tables
        self.start_s = start_s
        self.tick_s = tick_s
        self.ts = tables[0].column("ts").to_numpy()
        self.arrival_s: list[float] = []
        self.last_ts: list[int] = []
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        done = 0
        try:
            while done < len(self.ts) and not self.stop.is_set():
                now = time.perf_counter()
                # An int key: a float one makes NumPy cast the whole ts column each tick.
                now_ms = math.floor((now - self.start_s) * 1e3)
                upto = int(np.searchsorted(self.ts, now_ms, "right"))
                if upto > done:
                    for source, table in enumerate(self.tables):
                        self.pipeline.add(source, table.slice(done, upto - done))
                    self.arrival_s.append(now)
                    self.last_ts.append(int(self.ts[upto - 1]))
                    done = upto
                time.sleep(self.tick_s)
        except BaseException as exc:  # noqa: BLE001 - raised by the run that started it
            self.error = exc

    def arrivals(self, ts: NDArray[np.int64]) -> NDArray[np.float64]:
        """When the input rows with each ``ts`` were added (perf_counter seconds)."""
        last = np.asarray(self.last_ts, dtype=np.int64)
        at = np.minimum(np.searchsorted(last, ts, "left"), len(last) - 1)
        return np.asarray(self.arrival_s)[at]


class Reader(threading.Thread):
    """Reads the output log as it grows and commits what it read; waits are bounded."""

    def __init__(self, pipeline: Pipeline, keep: bool) -> None:
        super().__init__(name="output-reader", daemon=True)
        self.pipeline = pipeline
        self.keep = keep
        self.read_s: list[float] = []
        self.ts: list[NDArray[np.int64]] = []
        self.tables: list[pa.Table] = []
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        offset = 0
        try:
            while not self.stop.is_set():
                finished = self.pipeline.output_status().finished
                table, end = self.pipeline.output(offset, wait_s=POLL_S)
                if table.num_rows == 0:
                    if finished:
                        return
                    continue
                now = time.perf_counter()
                ts = table.column("ts").to_numpy()
                self.read_s.append(now)
                self.ts.append(ts)
                if self.keep:
                    self.tables.append(table)
                self.pipeline.commit(end)
                offset = end
        except BaseException as exc:  # noqa: BLE001 - raised by the run that started it
            self.error = exc


@dataclass(frozen=True)
class Sample:
    """The pipeline's counters at ``t_s`` seconds into a run (cumulative, per instance)."""

    t_s: float
    parallelism: int
    rows_in: int
    work: tuple[int, ...]
    busy_s: tuple[float, ...]
    backlog: int


class Monitor(threading.Thread):
    """Samples the pipeline's counters every ``SAMPLE_S`` without stopping it."""

    def __init__(self, pipeline: Pipeline, start_s: float) -> None:
        super().__init__(name="monitor", daemon=True)
        self.pipeline = pipeline
        self.start_s = start_s
        self.samples: list[Sample] = []
        self.stop = threading.Event()

    def sample(self) -> None:
        status = self.pipeline.status()
        self.samples.append(
            Sample(
                time.perf_counter() - self.start_s,
                status.parallelism,
                status.sources[0].rows,
                tuple(i.comparisons for i in status.instances),
                tuple(i.busy_s for i in status.instances),
                status.esg_in.occupancy,
            )
        )

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_S):
            self.sample()


@dataclass
class Run:
    """What one measured run saw; times are seconds since its start.

    Attributes:
        label: Its name in tables and plots (``"elastic"``, ``"static 2"``).
        parallelism: m at the start.
        samples: The monitor's samples.
        read_s: Per output row, when it was read.
        latency_ms: Per output row, its latency (section 8).
        out_ts: Per output row, its ts.
        reconfigurations: Per reconfiguration: epoch, from, to, cause, the times of the
            call, of its trigger's arrival and of its completion, and their phases in ms.
        decisions: The autoscaler's records (time, kind, parallelism, reason, applied).
        feed_s: When the last input row was added.
        thread_s: Connected threads integrated over the feed (thread-seconds).
        output: The output rows (only when kept).

    """

    label: str
    parallelism: int
    samples: list[Sample]
    read_s: NDArray[np.float64]
    latency_ms: NDArray[np.float64]
    out_ts: NDArray[np.int64]
    reconfigurations: list[dict[str, Any]]
    decisions: list[dict[str, Any]]
    feed_s: float
    thread_s: float
    output: pa.Table | None

    def final_parallelism(self) -> int:
        """m after the last completed reconfiguration."""
        done = [r for r in self.reconfigurations if r["completed_s"] is not None]
        return done[-1]["to"] if done else self.parallelism

    def summary(self) -> dict[str, Any]:
        """The run without its per-row arrays (for the JSON)."""
        return {
            "label": self.label,
            "parallelism": self.parallelism,
            "feed_s": self.feed_s,
            "thread_seconds": self.thread_s,
            "latency_ms": latency_stats(self.latency_ms),
            "output_rows": len(self.out_ts),
            "reconfigurations": self.reconfigurations,
            "decisions": self.decisions,
            "timeline": timeline(self),
        }


def latency_stats(values: NDArray[np.float64]) -> dict[str, float]:
    """Mean, p50, p99 and max of latencies in ms (NaN when empty)."""
    if len(values) == 0:
        return {"mean": float("nan"), "p50": float("nan"), "p99": float("nan"), "max": 0.0}
    p50, p99 = np.percentile(values, [50, 99])
    return {
        "mean": float(values.mean()),
        "p50": float(p50),
        "p99": float(p99),
        "max": float(values.max()),
        "n": len(values),
    }


def timeline(run: Run) -> list[dict[str, float]]:
    """Per second: threads, input t/s, comparisons/s, backlog, mean latency."""
    rows = []
    step = round(1 / SAMPLE_S)
    for a, b in zip(run.samples[::step], run.samples[step::step], strict=False):
        dt = b.t_s - a.t_s
        in_period = (run.read_s >= a.t_s) & (run.read_s < b.t_s)
        latency = run.latency_ms[in_period]
        rows.append(
            {
                "t_s": b.t_s,
                "threads": b.parallelism,
                "input_rate": (b.rows_in - a.rows_in) / dt,
                "throughput": (sum(b.work) - sum(a.work)) / dt,
                "backlog": b.backlog,
                "latency_ms": float(latency.mean()) if len(latency) else float("nan"),
            }
        )
    return rows


def measured_run(
    op: OPlus,
    tables: list[pa.Table],
    parallelism: int,
    max_parallelism: int,
    *,
    label: str,
    tick_s: float,
    policy: PolicyConfig | None = None,
    policy_from_s: float = 0.0,
    keep_output: bool = False,
) -> Run:
    """Run ``op`` over ``tables`` paced in real time, autoscaled from ``policy_from_s`` if a
    ``policy`` is given; wait for the whole output."""
    pipeline = setup(op, parallelism, max_parallelism)
    start = time.perf_counter()
    feeder = Feeder(pipeline, tables, start, tick_s)
    reader = Reader(pipeline, keep_output)
    monitor = Monitor(pipeline, start)
    returned: dict[int, float] = {}  # epoch -> when its reconfigure call returned

    def apply(m: int, reason: str) -> int:
        epoch = pipeline.reconfigure(parallelism=m, cause="autoscale", reason=reason)
        returned[epoch] = time.perf_counter()
        return epoch

    autoscaler = None
    span_s = int(feeder.ts[-1]) / 1e3 if len(feeder.ts) else 0.0
    try:
        for thread in (feeder, reader, monitor):
            thread.start()
        if policy is not None:
            feeder.join(max(policy_from_s - (time.perf_counter() - start), 0.0))
            autoscaler = Autoscaler(
                policy,
                PipelineSampler(pipeline, time.perf_counter).sample,
                apply,
                history=1 << 20,
            )
            autoscaler.start()
        feeder.join(span_s + DRAIN_TIMEOUT_S)
        feed_end = time.perf_counter()
        if autoscaler is not None:
            autoscaler.stop()
        if feeder.error is not None:
            raise feeder.error
        monitor.sample()
        pipeline.close()
        if not pipeline.join(DRAIN_TIMEOUT_S):
            msg = f"{label}: the output did not complete {DRAIN_TIMEOUT_S} s after the input"
            raise RuntimeError(msg)
        reader.join(DRAIN_TIMEOUT_S)
        if reader.error is not None:
            raise reader.error
    finally:
        for thread in (feeder, reader, monitor):
            thread.stop.set()
        if autoscaler is not None:
            autoscaler.stop()
        pipeline.shutdown()
    monitor.join(1.0)
    out_ts = np.concatenate(reader.ts) if reader.ts else np.zeros(0, np.int64)
    read_s = np.repeat(np.asarray(reader.read_s), [len(t) for t in reader.ts])
    reconfigurations = [
        _reconfiguration(r, returned, feeder, start) for r in pipeline.reconfigurations()
    ]
    decisions = [
        {
            "t_s": d.snapshot.time_s - start,
            "kind": d.decision.kind,
            "parallelism": d.decision.parallelism,
            "load": d.decision.load,
            "reason": d.decision.reason,
            "applied": d.applied,
            "error": d.error,
        }
        for d in (autoscaler.records if autoscaler is not None else [])
    ]
    return Run(
        label=label,
        parallelism=parallelism,
        samples=monitor.samples,
        read_s=read_s - start,
        latency_ms=(read_s - feeder.arrivals(out_ts)) * 1e3,
        out_ts=out_ts,
        reconfigurations=reconfigurations,
        decisions=decisions,
        feed_s=feed_end - start,
        thread_s=thread_seconds(parallelism, reconfigurations, feed_end - start),
        output=pa.concat_tables(reader.tables) if keep_output and reader.tables else None,
    )


def _reconfiguration(
    record: ReconfigurationStatus,
    returned: dict[int, float],
    feeder: Feeder,
    start_s: float,
) -> dict[str, Any]:
    """A reconfiguration record with the phases the benchmark can see, in ms.

    ``call``: ``reconfigure`` adding the control tuples; ``wait_for_input``: from its return
    to the arrival of the input tuple it switched at (``trigger_ts``; nothing once the switch
    happens at the control tuple itself, which is at the last ts already added);
    ``switch``: from then to completion (the instances work through what is ahead of that
    tuple, meet at the barrier, and one switches).
    """
    requested = record.requested_ns / 1e9
    call_returned = returned.get(record.epoch, requested)
    completed = record.completed_ns / 1e9 if record.completed_ns is not None else None
    phases: dict[str, float | None] = {"call": (call_returned - requested) * 1e3}
    if completed is not None and record.trigger_ts is not None:
        arrival = float(feeder.arrivals(np.asarray([record.trigger_ts]))[0])
        arrived = max(arrival, call_returned)
        phases["wait_for_input"] = (arrived - call_returned) * 1e3
        phases["switch"] = (completed - arrived) * 1e3
    return {
        "epoch": record.epoch,
        "from": record.from_parallelism,
        "to": record.to_parallelism,
        "cause": record.cause,
        "reason": record.reason,
        "requested_s": requested - start_s,
        "completed_s": completed - start_s if completed is not None else None,
        "duration_ms": record.duration_ms,
        "phases_ms": phases,
    }


def thread_seconds(parallelism: int, reconfigurations: list[dict[str, Any]], end_s: float) -> float:
    """Connected threads integrated over ``0..end_s`` (a switch counts from its completion)."""
    total, m, since = 0.0, parallelism, 0.0
    for r in reconfigurations:
        if r["completed_s"] is None or r["completed_s"] >= end_s:
            continue
        total += m * (r["completed_s"] - since)
        m, since = r["to"], r["completed_s"]
    return total + m * (end_s - since)
