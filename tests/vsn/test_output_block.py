"""Output blocks sort their rows by ``(ts, cause)`` exactly as the tuples sort."""

from __future__ import annotations

from itertools import pairwise
from random import Random

from hypothesis import given
from hypothesis import strategies as st

from stretch.model.instance import OutputRow
from stretch.model.schema import Schema
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
