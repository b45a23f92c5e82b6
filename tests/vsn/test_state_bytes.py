"""``Pipeline.status().state_bytes``: the bytes of the arrays holding an operator's windows."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pyarrow as pa
import pytest

import stretch
from stretch import generate
from stretch.operators.catalog import build
from stretch.vsn import Pipeline
from stretch.vsn._compiled.aggregates import AggregateKernel
from tests.vsn.support import TIMEOUT_S
from tests.waiting import wait_until


def _run(pipeline: Pipeline, tables: list[pa.Table]) -> None:
    for i, table in enumerate(tables):
        pipeline.add(i, table)
    pipeline.close()
    assert pipeline.join(TIMEOUT_S)


def test_each_path_counts_its_state() -> None:
    """Forward keeps none, a band join its stores, the generic path cannot tell (None)."""
    left, right = generate.scalejoin(500, 1000.0, 1)
    scalejoin = build("scalejoin", {"ws": 1000})
    cases = (
        (build("forward", {"columns": "x:int", "inputs": "1"}), "forward"),
        (scalejoin, "compiled"),
        (replace(scalejoin, kernel=None), "generic"),
    )
    for op, case in cases:
        tables = [left.select(["ts", "x"])] if case == "forward" else None
        with stretch.setup(op, 2, 2) as pipeline:
            _run(pipeline, tables or [left, right])
            state = pipeline.status().state_bytes
        if case == "forward":
            assert state == 0
        elif case == "compiled":
            assert state is not None and state > 0
        else:
            assert state is None


def test_a_band_join_holds_its_window_and_no_more() -> None:
    """A long window holds every live tuple's columns; a short one holds as much over a
    stream four times as long: its stores keep room for a run's tuples (``MAX_RUN`` at
    most), not for the history.
    """
    held = {}
    for ws, rows, index in (
        (60_000, 20_000, "on"),
        (60_000, 20_000, "off"),
        (100, 160_000, "on"),
        (100, 640_000, "on"),
    ):
        tables = generate.scalejoin(rows, 1000.0, 2)  # rows / 1000 seconds of each stream
        op = build("scalejoin", {"ws": ws, "keys": 4, "index": index})
        with stretch.setup(op, 2, 2) as pipeline:
            _run(pipeline, tables)
            held[ws, rows, index] = pipeline.status().state_bytes
    for index in ("on", "off"):
        # every tuple is live: at least ts, seq and two 8-byte predicate columns a side
        assert held[60_000, 20_000, index] >= 2 * 20_000 * 4 * 8
    assert held[100, 640_000, "on"] <= 2 * held[100, 160_000, "on"]


@contextmanager
def _status_read_all_along(pipeline: Pipeline) -> Iterator[list[BaseException]]:
    """A thread reading ``pipeline.status()`` over the block; yields what it raised."""
    errors: list[BaseException] = []
    done = threading.Event()

    def poll() -> None:
        try:
            while not done.is_set():
                pipeline.status()
        except BaseException as exc:  # the caller asserts there is none
            errors.append(exc)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        yield errors
    finally:
        done.set()
        poller.join(TIMEOUT_S)


@pytest.fixture
def switch_often() -> Iterator[None]:
    """Threads switch every microsecond: a reader racing the instances meets them."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("switch_often")
def test_aggregates_give_back_the_tables_of_closed_windows() -> None:
    """Open windows' tables count; once every window is out only the key table is left
    (and, with panes, their logs' room).

    A thread reads the status all along: the instances add and drop tables meanwhile,
    and a reconfiguration moves the open ones to one instance.
    """
    (tweets,) = generate.tweets(4000, 1000.0, 3)
    last = int(tweets.column("ts")[-1].as_py())
    wordcount = build("wordcount", {"ws": 2000, "wa": 500})
    assert wordcount.kernel is not None
    per_window = replace(wordcount, kernel=replace(wordcount.kernel, combine=None))
    for op in (wordcount, per_window):
        with stretch.setup(op, 2, 2) as pipeline:
            with _status_read_all_along(pipeline) as errors:
                pipeline.add(0, tweets)
                pipeline.watermark(0, last + 1)  # the windows of the last 2 s stay open
                assert wait_until(
                    lambda p=pipeline: min(i.tuples_in for i in p.status().instances) == 4000
                )
                open_windows = pipeline.status().state_bytes
                assert pipeline.wait_epoch(pipeline.reconfigure(parallelism=1), TIMEOUT_S)
                moved = pipeline.status().state_bytes
                pipeline.close()
                assert pipeline.join(TIMEOUT_S)
                closed = pipeline.status().state_bytes
            kernel = pipeline._pool.compiled
        assert not errors
        assert isinstance(kernel, AggregateKernel)
        assert open_windows is not None and moved is not None and closed is not None
        keys = kernel.keys.held_bytes
        assert min(open_windows, moved) > closed >= keys
        if op is per_window:
            assert closed == keys


@pytest.mark.usefixtures("switch_often")
@pytest.mark.parametrize("partition", ["seq", "band"])
def test_a_band_join_counts_its_state_across_switches(partition: str) -> None:
    """Read all along while instances gather their keys after each switch (docs/vsn.md),
    the state never counts less than the columns of the tuples the instances have seen."""
    left, right = generate.scalejoin(6000, 1000.0, 4)  # 6 s, all within the window
    op = build("scalejoin", {"ws": 60_000, "keys": 8, "partition": partition})
    with stretch.setup(op, 1, 3) as pipeline, _status_read_all_along(pipeline) as errors:
        sizes = []
        for k, m in enumerate((2, 3, 1)):
            pipeline.add(0, left.slice(2000 * k, 2000))
            pipeline.add(1, right.slice(2000 * k, 2000))
            assert pipeline.wait_epoch(pipeline.reconfigure(parallelism=m), TIMEOUT_S)
            sizes.append(pipeline.status().state_bytes)
        pipeline.close()
        assert pipeline.join(TIMEOUT_S)
        sizes.append(pipeline.status().state_bytes)
    assert not errors
    for k, size in enumerate(sizes):
        live = 2000 * min(k + 1, 3)  # tuples a side every instance has seen by then
        assert size is not None and size >= 2 * live * 4 * 8
