"""The string dictionary drops the strings nothing uses any more, at epoch barriers.

A compaction keeps the codes in use and hands dropped codes to later strings, so the
output must stay equal to the reference's whatever the parallelism, reconfigurations and
trims, and a long stream of distinct strings must keep the dictionary bounded.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import stretch
from stretch.generate import hedge, tweets
from stretch.model.oplus import OPlus, Payload, StreamTuple
from stretch.model.order import in_stream_order
from stretch.model.schema import Schema
from stretch.model.sn import run_sn
from stretch.operators import joins
from stretch.operators.catalog import build
from stretch.vsn import Pipeline, RuntimeSettings, setup
from stretch.vsn._compiled.aggregates import AggregateKernel
from stretch.vsn._compiled.band_join import BandJoinKernel, _live
from tests.vsn.support import TIMEOUT_S, Step, no_thread_leak, run_schedule

__all__ = ["no_thread_leak"]

TAGGED = Schema.of(tag="str", x="int", note="str")
WS = 40


@numba.njit
def same_tag_near(tag_l: int, x: int, tag_r: int, a: int) -> bool:
    return tag_l == tag_r and abs(x - a) <= 3


def _same_tag_twin(left: StreamTuple, right: StreamTuple) -> Payload | None:
    if left["tag"] == right["tag"] and abs(left["x"] - right["x"]) <= 3:
        return (left["tag"], left["note"], right["note"])
    return None


def _same_tag_join() -> OPlus:
    return stretch.band_join(
        "same_tag",
        WS,
        left=TAGGED,
        right=TAGGED,
        predicate=same_tag_near,
        reads=(("tag", "x"), ("tag", "x")),
        output={"tag": "left.tag", "l_note": "left.note", "r_note": "right.note"},
        keys=4,
    )


def _tagged(rows: int, seed: int) -> pa.Table:
    """Tags that live for 30 ms each (their strings die), and a distinct note per row."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, rows // 2, rows))
    kinds, xs, lengths = (rng.integers(0, top, rows).tolist() for top in (3, 10, 90))
    tags = [f"tag-{t // 30}-{k}" for t, k in zip(ts.tolist(), kinds, strict=True)]
    notes = [f"{seed}-{i}-" + "n" * k for i, k in enumerate(lengths)]
    return TAGGED.table(ts.tolist(), list(zip(tags, xs, notes, strict=True)))


def _compactions(pipeline: Pipeline) -> int:
    return pipeline._dictionary.compactions


def _from_zero(tables: list[pa.Table]) -> list[pa.Table]:
    """The tables with ``ts`` shifted to start at 0 (so ``FEED`` adds them in steps)."""
    first = min(int(t.column("ts")[0].as_py()) for t in tables)
    return [t.set_column(0, "ts", pc.subtract(t.column("ts"), first)) for t in tables]


COMPACT = RuntimeSettings(compact_dictionary_bytes=1, trim_rows=64)
"""Compact as soon as the dictionary doubles (it starts at about 90 KB), trim often."""

FEED: list[Step] = [(ts, None, None) for ts in range(0, 3000, 100)]
"""Add the input in 30 steps: a compaction may be requested after each."""

SCHEDULES: list[tuple[int, list[Step]]] = [
    (1, FEED),
    (2, FEED),
    (2, [*FEED, (300, 3, None), (900, 1, None), (1500, 2, [1, 0] * 512)]),
]


@pytest.mark.parametrize(("m", "schedule"), SCHEDULES)
def test_band_join_on_string_codes_equals_the_reference(m: int, schedule: list[Step]) -> None:
    """Codes compared in the join's stores stay right when dropped codes are reused."""
    op = _same_tag_join()
    reference = joins.band_join("same_tag", 1, WS, (TAGGED, TAGGED), op.output, _same_tag_twin, 4)
    tables = [_tagged(4000, 1), _tagged(4000, 2)]
    out, pipeline = run_schedule(op, tables, m, 3, schedule, settings=COMPACT)
    assert out.equals(run_sn(reference, tables))
    assert out.num_rows > 100
    assert _compactions(pipeline) >= 1


def test_band_join_reports_the_codes_of_its_stored_tuples() -> None:
    """``codes_in_use``: the tag codes of exactly the tuples the join's stores hold."""
    op = _same_tag_join()
    tables = [_tagged(2000, 3), _tagged(2000, 4)]
    _, pipeline = run_schedule(op, tables, 2, 3, FEED, settings=COMPACT)
    kernel = pipeline._pool.compiled
    assert isinstance(kernel, BandJoinKernel)
    reported = pipeline._dictionary.decode(np.concatenate(kernel.codes_in_use()))
    ordered = [in_stream_order(t).column("tag") for t in tables]
    stored = [
        ordered[side][int(seq)].as_py()
        for slab in kernel.slabs.values()
        for side in (0, 1)
        for seq in slab.seq[:, side].reshape(-1)[_live(slab, side)]
    ]
    assert len(stored) > 10
    assert sorted(reported) == sorted(stored)


@pytest.mark.parametrize(
    ("name", "params", "tables", "path"),
    [
        ("hedge", {"ws": 300, "keys": 3}, _from_zero(hedge(3000, 1000.0, seed=4) * 2), "kernel"),
        ("longest_tweet", {"wa": 100, "ws": 300}, tweets(3000, 1000.0, seed=5), "kernel"),
        ("paircount", {"wa": 100, "ws": 300, "b": 2}, tweets(1500, 1000.0, seed=6), "kernel"),
        ("paircount", {"wa": 100, "ws": 300, "b": 2}, tweets(1500, 1000.0, seed=6), "windows"),
        ("wordcount", {"wa": 100, "ws": 300}, tweets(1500, 1000.0, seed=7), "kernel"),
        ("wordcount", {"wa": 100, "ws": 300}, tweets(1500, 1000.0, seed=7), "windows"),
        ("wordcount", {"wa": 100, "ws": 300}, tweets(1500, 1000.0, seed=7), "generic"),
    ],
)
def test_catalog_operators_equal_the_reference_across_compactions(
    name: str, params: dict[str, object], tables: list[pa.Table], path: str
) -> None:
    """The string dictionary, and the aggregates' key tables (panes or one table per
    window), compacted at barriers: the output is the reference's."""
    op = build(name, params)
    if path == "windows":  # the per-window tables rather than panes
        op = replace(op, kernel=replace(op.kernel, combine=None))
    m, schedule = SCHEDULES[-1]
    compiled = path != "generic"
    out, pipeline = run_schedule(op, tables, m, 3, schedule, compiled=compiled, settings=COMPACT)
    assert out.equals(run_sn(op, tables))
    assert _compactions(pipeline) >= 1
    kernel = pipeline._pool.compiled
    if isinstance(kernel, AggregateKernel):
        assert kernel._renumbered_bytes > 0  # its key table was renumbered


def test_new_words_keep_the_key_table_bounded() -> None:
    """Tweets of words never seen before: wordcount keeps the keys of the open windows."""
    rows, step = 20_000, 1_000
    texts = [f"w{i} w{i + 1} #t{i % 7}" for i in range(rows)]
    table = pa.table({"ts": list(range(rows)), "user": ["u"] * rows, "tweet": texts})
    op = build("wordcount", {"wa": 100, "ws": 200})
    settings = RuntimeSettings(compact_dictionary_bytes=128 << 10, trim_rows=256)
    sizes = []
    with setup(op, 2, 2, settings=settings) as pipeline:
        kernel = pipeline._pool.compiled
        assert isinstance(kernel, AggregateKernel)
        for start in range(0, rows, step):
            pipeline.add(0, table.slice(start, step))
            deadline = time.monotonic() + TIMEOUT_S  # let the instances catch up
            while pipeline.output_status().watermark < start - 400:
                assert time.monotonic() < deadline
                time.sleep(0.002)
            sizes.append(len(kernel.keys.strings))
        pipeline.close()
        assert pipeline.join(TIMEOUT_S)
        out, _ = pipeline.output()
    assert out.equals(run_sn(op, [table]))
    assert max(sizes) < 8_000, sizes  # 20,000 words without compaction, and growing


def test_distinct_strings_keep_the_dictionary_bounded() -> None:
    """60,000 distinct 60-byte strings through forward: the dictionary holds a few steps'.

    Without compaction it would hold every string, 60,000 x (60 + about 40) bytes.
    """
    schema = Schema.of(s="str")
    rows, step = 60_000, 2_000
    strings = [f"{i:08d}-" + "s" * 51 for i in range(rows)]
    table = schema.table(list(range(rows)), [(s,) for s in strings])
    op = build("forward", {"columns": "s:str", "inputs": "1"})
    settings = RuntimeSettings(compact_dictionary_bytes=256 << 10, trim_rows=256)
    sizes = []
    with setup(op, 2, 2, settings=settings) as pipeline:
        for start in range(0, rows, step):
            pipeline.add(0, table.slice(start, step))
            deadline = time.monotonic() + TIMEOUT_S  # let the instances catch up
            while pipeline.output_status().end_offset < start and time.monotonic() < deadline:
                time.sleep(0.002)
            sizes.append(pipeline._dictionary.nbytes)
        pipeline.close()
        assert pipeline.join(TIMEOUT_S)
        out, _ = pipeline.output()
        compactions = _compactions(pipeline)
    assert out.column("s").to_pylist() == strings
    assert compactions >= 5
    assert max(sizes) < 1_500_000, sizes  # against 6 MB, and growing, without compaction
