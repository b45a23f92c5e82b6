"""Output blocks sort their rows by ``(ts, cause)`` exactly as the tuples sort."""

from __future__ import annotations

from itertools import pairwise
from random import Random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stretch.model.instance import OutputRow
from stretch.model.schema import Schema
from stretch.model.sn import run_sn
from stretch.operators.catalog import build
from stretch.vsn import pipeline, run_vsn, setup
from stretch.vsn._output_block import OutputBlock
from tests.streams import tweets

SCHEMA = Schema.of(v="int")
small = st.integers(-3, 3)
expired = st.tuples(st.just(0), small, small, small, small, small)  # (0, *created, j)
updated = st.tuples(st.just(1), small, small, small, small, small, small)


@st.composite
def output_rows(draw: st.DrawFn) -> list[OutputRow]:
    causes = draw(st.lists(st.one_of(expired, updated), max_size=30))
    return [OutputRow(draw(small), (i,), cause) for i, cause in enumerate(causes)]


@given(output_rows())
def test_padded_causes_sort_as_the_tuples(rows: list[OutputRow]) -> None:
    block = OutputBlock.of_rows(SCHEMA, rows).sorted()
    expected = sorted(rows, key=lambda r: (r.ts, r.cause))
    assert block.rows.column("v").to_pylist() == [r.payload[0] for r in expected]
    assert block.ts.tolist() == [r.ts for r in expected]


@given(output_rows(), st.integers(0, 30), st.integers(0, 30))
def test_concat_take_and_slice_keep_rows_and_keys_together(
    rows: list[OutputRow], cut: int, stop: int
) -> None:
    block = OutputBlock.of_rows(SCHEMA, rows)
    parts = [block.slice(0, min(cut, len(rows))), block.slice(min(cut, len(rows)), len(rows))]
    joined = OutputBlock.concat(parts)
    assert joined.rows.equals(block.rows)
    assert (joined.key == block.key).all()
    picked = joined.take(joined.ts.argsort(kind="stable")[: min(stop, len(rows))])
    assert picked.rows.column("v").to_pylist() == [
        r.payload[0] for r in sorted(rows, key=lambda r: r.ts)[:stop]
    ]
    assert picked.rows.column("ts").to_pylist() == picked.ts.tolist()


@given(output_rows(), st.lists(st.integers(0, 30), max_size=4), st.randoms())
def test_merge_sorts_runs_in_any_order(rows: list[OutputRow], cuts: list[int], rnd: Random) -> None:
    ordered = OutputBlock.of_rows(SCHEMA, rows).sorted()
    bounds = [0, *sorted(min(c, len(rows)) for c in cuts), len(rows)]
    runs = [ordered.slice(a, b) for a, b in pairwise(bounds)]
    in_place = OutputBlock.merge(runs)
    assert in_place.rows.equals(ordered.rows)
    rnd.shuffle(runs)
    shuffled = OutputBlock.merge(runs)
    assert shuffled.ts.tolist() == ordered.ts.tolist()
    assert (shuffled.key == ordered.key).all()


@given(output_rows(), st.lists(st.integers(0, 30), max_size=4), small, st.randoms())
def test_split_cuts_blocks_that_follow_on_at_a_ts(
    rows: list[OutputRow], cuts: list[int], ts: int, rnd: Random
) -> None:
    """``follow_on`` tells sorted blocks in order from others; ``split`` copies nothing."""
    ordered = OutputBlock.of_rows(SCHEMA, rows).sorted()
    bounds = [0, *sorted(min(c, len(rows)) for c in cuts), len(rows)]
    runs = [ordered.slice(a, b) for a, b in pairwise(bounds)]
    assert OutputBlock.follow_on(runs)
    before, rest = OutputBlock.split(runs, ts)
    assert all(len(block) for block in [*before, *rest])
    assert [t for block in before for t in block.ts.tolist()] == [t for t in ordered.ts if t < ts]
    assert [t for block in rest for t in block.ts.tolist()] == [t for t in ordered.ts if t >= ts]
    got = OutputBlock.concat([*before, *rest]) if before or rest else ordered
    assert got.rows.equals(ordered.rows)
    rnd.shuffle(runs)
    assert OutputBlock.follow_on(runs) == OutputBlock.in_order(runs)


@st.composite
def interleaved_takes(draw: st.DrawFn) -> tuple[list[list[tuple[int, int]]], list[int]]:
    """Instances' released blocks of ``(ts, c)`` rows, and where ESG_out's order is cut.

    ESG_out gives the rows by ``(ts, instance, position)``; each take is a stretch of it.
    """
    rows = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 9)), min_size=1, max_size=40)
    blocks = [sorted(draw(rows)) for _ in range(draw(st.integers(1, 4)))]
    total = sum(len(block) for block in blocks)
    cuts = sorted(draw(st.sets(st.integers(1, total), max_size=6)) - {total})
    return blocks, cuts


@given(interleaved_takes())
def test_a_pool_takes_interleaved_rows_of_its_blocks(
    drawn: tuple[list[list[tuple[int, int]]], list[int]],
) -> None:
    """The drainer takes each block's rows in order, interleaved with other blocks' rows.

    A take's rows come in ``ts`` order, each block's in its own; gathered (ids not
    consecutive), in ``(ts, cause)`` order.
    """
    blocks, cuts = drawn
    pipeline = setup(build("forward", {"columns": "v:int"}), 1, 1)
    try:
        pool = pipeline._pool
        firsts = []
        for b, block in enumerate(blocks):
            rows = [OutputRow(ts, (1000 * b + i,), (0, c, b, i)) for i, (ts, c) in enumerate(block)]
            firsts.append(pool.store_blocks([OutputBlock.of_rows(SCHEMA, rows)]))
        esg_out = sorted(
            (ts, b, i, c) for b, block in enumerate(blocks) for i, (ts, c) in enumerate(block)
        )
        for start, stop in pairwise([0, *cuts, len(esg_out)]):
            take = esg_out[start:stop]
            ids = [firsts[b] + i for _, b, i, _ in take]
            got = pool.take_rows(np.array(ids, dtype=np.int64))
            values = [v for block in got for v in block.rows.column("v").to_pylist()]
            assert [t for block in got for t in block.ts.tolist()] == [t for t, _, _, _ in take]
            for b in range(len(blocks)):
                mine = [1000 * b + i for _, b_, i, _ in take if b_ == b]
                assert [v for v in values if v // 1000 == b] == mine
            if ids != list(range(ids[0], ids[0] + len(ids))):
                by_cause = sorted((t, c, b, i) for t, b, i, c in take)
                assert values == [1000 * b + i for _, _, b, i in by_cause]
        assert not pool._blocks  # every block dropped once all its rows were taken
    finally:
        pipeline.shutdown()


@settings(max_examples=15, deadline=None)
@given(table=tweets(max_rows=30), nodes=st.sampled_from([1, 2, 5]), m=st.integers(2, 3))
def test_output_taken_a_few_nodes_at_a_time_equals_run_sn(
    table: pa.Table, nodes: int, m: int
) -> None:
    """The drainer taking a few ESG_out nodes at a time: a ts's rows come over several takes
    and several instances (paircount closes many pairs at one window end), are held open,
    gathered in order and merged when the ts completes."""
    op = build("paircount", {"wa": 10, "ws": 30})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "DRAIN_NODES", nodes)
        out = run_vsn(op, [table], m)
    assert out.equals(run_sn(op, [table]))
