"""Sources drop the rows no instance reads any more, and the output stays the same."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest

from stretch.generate import hedge, scalejoin, tweets
from stretch.model.batch import StringDictionary
from stretch.model.schema import Schema
from stretch.model.sn import run_sn
from stretch.operators.catalog import build
from stretch.vsn import Pipeline, RuntimeSettings, setup
from stretch.vsn._ingest import SourceStore
from tests.vsn.support import TIMEOUT_S, no_thread_leak

__all__ = ["no_thread_leak"]

SCHEMA = Schema.of(v="int", s="str")


def _table(ts: list[int]) -> pa.Table:
    return SCHEMA.table(ts, [(t * 10, f"s{t}") for t in ts])


def test_trim_drops_old_rows_and_snapshots_stay_valid() -> None:
    store = SourceStore(0, SCHEMA, "source 0", StringDictionary())
    store.append(_table(list(range(100))))
    assert store.tuple_at(5).payload == {"v": 50, "s": "s5"}
    before = store.rows()
    assert store.trim(40, min_rows=100) == 0  # fewer than min_rows: nothing dropped
    assert store.trim(40, min_rows=10) == 40
    rows = store.rows()
    assert rows.base == 40
    assert rows.column("v")[60 - rows.base] == 600
    assert before.column("v")[60] == 600  # the older snapshot still reads its rows
    store.append(_table(list(range(100, 3000))))  # grows past the trimmed arrays
    rows = store.rows()
    assert rows.column("v")[2999 - rows.base] == 29990
    assert store.tuple_at(70).payload == {"v": 700, "s": "s70"}
    with pytest.raises(LookupError, match="row 5 was trimmed"):
        store.tuple_at(5)


def test_a_long_window_is_not_copied_at_every_trim(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trimming a few rows off a long window leaves the rest in place: every row is copied
    a few times in all (at growths), not once per trim; old snapshots still read theirs."""
    numbers = Schema.of(v="int")
    store = SourceStore(0, numbers, "source 0", StringDictionary())
    copied: list[int] = []
    moved = SourceStore._moved

    def counted(self: SourceStore, base: int, capacity: int) -> object:
        copied.append(len(self) - base)
        return moved(self, base, capacity)

    monkeypatch.setattr(SourceStore, "_moved", counted)
    window, chunk, total = 20_000, 500, 200_000
    snapshots = []
    for start in range(0, total, chunk):
        ts = list(range(start, start + chunk))
        store.append(numbers.table(ts, [(t * 10,) for t in ts]))
        store.trim(start + chunk - window, min_rows=1)
        if start % 50_000 == 0:
            snapshots.append((start, store.rows()))
    assert sum(copied) <= 4 * total  # copying the window at each of 400 trims: 8M rows
    rows = store.rows()
    assert rows.base == total - window
    kept = np.arange(total - window, total)
    assert np.array_equal(rows.column("v")[kept - rows.base], kept * 10)
    for start, snapshot in snapshots:  # each still reads the rows it was taken with
        seqs = np.arange(max(snapshot.base, start - 100), start + chunk)
        assert np.array_equal(snapshot.column("v")[seqs - snapshot.base], seqs * 10)


def _cases() -> list[tuple[str, dict[str, object], list[pa.Table], bool]]:
    tweet = tweets(1500, 100.0, seed=3)
    return [
        ("scalejoin", {"ws": 200, "keys": 4}, scalejoin(1500, 500.0, seed=2), True),
        ("hedge", {"ws": 300, "keys": 3}, hedge(1500, 500.0, seed=2) * 2, True),
        ("paircount", {"wa": 100, "ws": 300, "b": 3}, tweet, True),
        ("longest_tweet", {"wa": 100, "ws": 300}, tweet, True),
        ("wordcount", {"wa": 100, "ws": 300}, tweet, False),  # the generic path
    ]


def _wait_until_read(pipeline: Pipeline, ts: int) -> None:
    """Wait (a while) until every instance has read up to ``ts``."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        marks = [i.reading_from() for i in pipeline._pool.instances]
        if all(m is None or m >= ts for m in marks):
            return
        time.sleep(0.005)


@pytest.mark.parametrize(("name", "params", "tables", "compiled"), _cases())
def test_output_is_the_same_when_sources_trim(
    name: str, params: dict[str, object], tables: list[pa.Table], compiled: bool
) -> None:
    op = build(name, params)
    settings = RuntimeSettings(trim_rows=1)  # trim at every add
    pipeline = setup(op, 2, 3, settings=settings, compiled=compiled, audit=True)
    try:
        steps = np.linspace(0, tables[0].num_rows, 16).astype(int).tolist()
        for i, (start, stop) in enumerate(zip(steps, steps[1:], strict=False)):
            if i:  # the previous chunk's rows (but its last ts) can be read by now
                _wait_until_read(
                    pipeline, min(int(t.column("ts")[start - 1].as_py()) for t in tables)
                )
            for source, table in enumerate(tables):
                pipeline.add(source, table.slice(start, stop - start))
            if i in (4, 9):
                pipeline.reconfigure(parallelism=3 if i == 4 else 1)
        bases = [store.rows().base for store in pipeline._sources]
        pipeline.close()
        assert pipeline.join(TIMEOUT_S)
        out, _ = pipeline.output()
    finally:
        pipeline.shutdown()
    assert out.equals(run_sn(op, tables))
    assert all(base > 0 for base in bases), bases
    assert pipeline._pool.audit is not None
    assert not pipeline._pool.audit.violations
