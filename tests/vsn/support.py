"""Helpers for the VSN tests: feeding a pipeline with a reconfiguration schedule."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pytest

from stretch.model.oplus import OPlus
from stretch.vsn import RuntimeSettings, setup
from stretch.vsn.pipeline import Pipeline

TIMEOUT_S = 60.0

Step = tuple[int, int | None, list[int] | None]
"""(ts, parallelism, mapping): reconfigure once every source has added its rows <= ts."""


def run_schedule(
    op: OPlus,
    tables: Sequence[pa.Table],
    m: int,
    n: int,
    schedule: Sequence[Step],
    *,
    compiled: bool = True,
    audit: bool = True,
    settings: RuntimeSettings | None = None,
) -> tuple[pa.Table, Pipeline]:
    """Feed ``tables`` in ts order, reconfiguring per ``schedule``; return output, pipeline."""
    pipeline = setup(op, m, n, settings=settings, audit=audit, compiled=compiled, capacity=1 << 12)
    try:
        done = [0] * len(tables)
        for ts, parallelism, mapping in [*sorted(schedule, key=lambda s: s[0]), (None, None, None)]:
            for i, table in enumerate(tables):
                column = table.column("ts").to_numpy()
                stop = len(column) if ts is None else int(np.searchsorted(column, ts, "right"))
                if stop > done[i]:
                    pipeline.add(i, table.slice(done[i], stop - done[i]))
                    done[i] = stop
            if parallelism is not None or mapping is not None:
                pipeline.reconfigure(parallelism=parallelism, mapping=mapping)
        pipeline.close()
        assert pipeline.join(TIMEOUT_S)
        out, _ = pipeline.output()
        return out, pipeline
    finally:
        pipeline.shutdown()


@pytest.fixture(autouse=True)
def no_thread_leak() -> Iterator[None]:
    """Every thread a test starts is joined by its end."""
    before = set(threading.enumerate())
    yield
    leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not leaked, leaked
