"""Output blocks sort their rows by ``(ts, cause)`` exactly as the tuples sort."""

from __future__ import annotations

from itertools import pairwise
from random import Random

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from stretch.model.instance import OutputRow
from stretch.model.schema import Schema
from stretch.operators.catalog import build
from stretch.vsn import setup
from stretch.vsn._output_block import OutputBlock

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


@st.composite
def interleaved_takes(draw: st.DrawFn) -> tuple[list[int], list[int], list[list[int]]]:
    """Blocks of ``sizes`` rows, their rows merged in some order, cut into takes."""
    sizes = draw(st.lists(st.integers(1, 40), min_size=1, max_size=5))
    left = list(sizes)
    merged = []
    while any(left):
        b = draw(st.sampled_from([i for i, n in enumerate(left) if n]))
        merged.append(b)
        left[b] -= 1
    cuts = sorted(draw(st.sets(st.integers(1, len(merged)), max_size=6)) - {len(merged)})
    takes = [merged[a:b] for a, b in pairwise([0, *cuts, len(merged)])]
    return sizes, merged, takes


@given(interleaved_takes())
def test_a_pool_takes_interleaved_rows_of_its_blocks(
    drawn: tuple[list[int], list[int], list[list[int]]],
) -> None:
    """The drainer takes each block's rows in order, interleaved with other blocks' rows."""
    sizes, _, takes = drawn
    pipeline = setup(build("forward", {"columns": "v:int"}), 1, 1)
    try:
        pool = pipeline._pool
        firsts = []
        for b, size in enumerate(sizes):
            rows = [OutputRow(i, (1000 * b + i,), (0, i)) for i in range(size)]
            firsts.append(pool.store_blocks([OutputBlock.of_rows(SCHEMA, rows)]))
        taken = [0] * len(sizes)
        for take in takes:
            ids, expected = [], []
            for b in take:
                ids.append(firsts[b] + taken[b])
                expected.append(1000 * b + taken[b])
                taken[b] += 1
            got = pool.take_rows(np.array(ids, dtype=np.int64))
            assert [v for block in got for v in block.rows.column("v").to_pylist()] == expected
        assert not pool._blocks  # every block dropped once all its rows were taken
    finally:
        pipeline.shutdown()
