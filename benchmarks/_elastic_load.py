"""The load side of bench_elastic.py: inputs with rate phases, work counters, calibration.

A join's capacity is calibrated as the comparisons one of m threads does per busy second
with full windows; ``warm_up`` compiles what a timed run uses before any timing.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from stretch.generate import HEDGE_START_MS, hedge, scalejoin
from stretch.model.oplus import OPlus
from stretch.vsn import Pipeline, setup

DRAIN_TIMEOUT_S = 120.0
"""The longest a run waits, after its input ended, for the backlog's output."""

MIN_BUSY_S = 0.05
"""The least busy time a calibration divides by."""


def phased_scalejoin(phases: Sequence[tuple[float, float]], seed: int) -> list[pa.Table]:
    """ScaleJoin's two streams with a constant rate per phase: ``(seconds, t/s per stream)``."""
    parts = []
    start_ms = 0.0
    for seconds, rate in phases:
        parts.append(start_ms + np.arange(int(seconds * rate)) * 1000.0 / rate)
        start_ms += seconds * 1000.0
    ts = pa.array(np.floor(np.concatenate(parts)).astype(np.int64))
    return [table.set_column(0, "ts", ts) for table in scalejoin(len(ts), 1000.0, seed)]


def trading_day(seconds: float, mean_rate: float, peak_rate: float, seed: int) -> list[pa.Table]:
    """``seconds`` of NYSE-like trades from the opening (ts from 0), fed as both L and R."""
    (table,) = hedge(int(seconds * mean_rate), mean_rate, seed, peak_rate=peak_rate)
    table = table.set_column(0, "ts", pc.subtract(table.column("ts"), HEDGE_START_MS))
    return [table, table]


def work_done(pipeline: Pipeline) -> list[int]:
    """Comparisons per pool instance so far (a band join's unit of work)."""
    return [i.comparisons for i in pipeline.status().instances]


def busy_s(pipeline: Pipeline) -> list[float]:
    """Busy seconds per pool instance so far."""
    return list(pipeline.load().busy_s)


def cv_percent(values: Sequence[float]) -> float:
    """Coefficient of variation in percent (0 for fewer than two values or a zero mean)."""
    mean = statistics.fmean(values) if values else 0.0
    return statistics.pstdev(values) / mean * 100 if mean > 0 and len(values) > 1 else 0.0


def calibrate(op: OPlus, tables: list[pa.Table], m: int, full_ms: int, until_ms: int) -> float:
    """Comparisons one of ``m`` threads does per busy second, with full windows.

    The input goes in as fast as the pipeline takes it (flow control paces the adds); the
    work and busy time are counted between the output watermark passing ``full_ms`` (the
    windows are full) and passing ``until_ms``.

    Raises:
        RuntimeError: the output stalled, or there was too little work to measure.
    """
    pipeline = setup(op, m, m)

    def add_all() -> None:
        rows = tables[0].num_rows
        for start in range(0, rows, 2048):
            for source, table in enumerate(tables):
                pipeline.add(source, table.slice(start, 2048))
        pipeline.close()

    feeder = threading.Thread(target=add_all, name="calibration-feeder", daemon=True)
    marks = []
    try:
        feeder.start()
        for ts_ms in (full_ms, until_ms):
            deadline = time.monotonic() + DRAIN_TIMEOUT_S
            while pipeline.output_status().watermark < ts_ms:
                if time.monotonic() > deadline:
                    msg = f"calibration: output did not reach ts {ts_ms} in {DRAIN_TIMEOUT_S} s"
                    raise RuntimeError(msg)
                time.sleep(0.005)
            marks.append((sum(work_done(pipeline)), sum(busy_s(pipeline))))
        pipeline.join(DRAIN_TIMEOUT_S)
        feeder.join(DRAIN_TIMEOUT_S)
        marks.append((sum(work_done(pipeline)), sum(busy_s(pipeline))))
    finally:
        pipeline.shutdown()
    # Busy time grows a batch at a time, and a fast kernel may pass both marks in one
    # batch: then the span to the end of the input, else the whole run.
    full, until, end = marks
    for (work0, busy0), (work1, busy1) in ((full, until), (full, end), ((0, 0.0), end)):
        if busy1 - busy0 >= MIN_BUSY_S:
            return (work1 - work0) / (busy1 - busy0)
    msg = f"calibration: the instances were busy for less than {MIN_BUSY_S} s in all"
    raise RuntimeError(msg)


def warm_up(op: OPlus, tables: list[pa.Table], n: int) -> None:
    """Compile what a timed run uses: the kernel, and a provisioning and a decommissioning."""
    pipeline = setup(op, 1, n)
    try:
        thirds = np.array_split(np.arange(tables[0].num_rows), 3)
        for i, (part, parallelism) in enumerate(zip(thirds, (n, 1, None), strict=True)):
            for source, table in enumerate(tables):
                pipeline.add(source, table.slice(int(part[0]), len(part)))
            if i > 0:  # the rows just added trigger the switch requested before them
                pipeline.wait_epoch(i, DRAIN_TIMEOUT_S)
            if parallelism is not None:
                pipeline.reconfigure(parallelism=parallelism)
        pipeline.close()
        pipeline.join(DRAIN_TIMEOUT_S)
    finally:
        pipeline.shutdown()
