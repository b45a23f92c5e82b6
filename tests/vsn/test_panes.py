"""Panes (Enorm) for the aggregates that declare an associative combine, against run_sn."""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stretch.model.oplus import OPlus
from stretch.model.sn import run_sn
from stretch.operators.catalog import build
from stretch.operators.kernels import AggregateSpec
from stretch.operators.kernels._aggregate import distinct_in_rows
from stretch.vsn._compiled import compile_operator
from stretch.vsn._compiled._tokens import split_tokens
from stretch.vsn._compiled.aggregates import AggregateKernel
from stretch.vsn._compiled.panes import PaneKernel
from tests.streams import tweets
from tests.vsn.support import Step, no_thread_leak, run_schedule

__all__ = ["no_thread_leak"]

AGGREGATES = [
    ("wordcount", {}),
    ("paircount", {"b": 2}),
    ("paircount", {"b": "inf"}),
    ("longest_tweet", {}),
]
MAX_PARALLELISM = 4


@st.composite
def windows(draw: st.DrawFn) -> dict[str, int]:
    """WA and WS with WS a multiple of WA or not (panes of gcd(WA, WS)), up to 24 per tuple."""
    wa = draw(st.integers(1, 60))
    ws = draw(st.integers(1, 24) if draw(st.booleans()) else st.integers(1, 24 * wa)) * (
        wa if draw(st.booleans()) else 1
    )
    return {"wa": wa, "ws": max(1, min(ws, 24 * wa))}


@st.composite
def schedules(draw: st.DrawFn, op: OPlus, table: pa.Table) -> list[Step]:
    """Reconfigurations (parallelism and mapping) at event times within the input."""
    times = table.column("ts").to_pylist() or [0]
    steps: list[Step] = []
    for _ in range(draw(st.integers(0, 3))):
        m = draw(st.integers(1, MAX_PARALLELISM))
        mapping = None
        if draw(st.booleans()):
            mapping = draw(
                st.lists(st.integers(0, m - 1), min_size=op.key_groups, max_size=op.key_groups)
            )
        steps.append((draw(st.sampled_from(times)), m, mapping))
    return steps


@pytest.mark.parametrize(("name", "params"), AGGREGATES)
@settings(max_examples=12, deadline=None)
@given(table=tweets(max_rows=30), window=windows(), data=st.data())
def test_panes_equal_sn_at_every_parallelism_and_reconfiguration(
    name: str, params: dict[str, str], table: pa.Table, window: dict[str, int], data: st.DataObject
) -> None:
    """Rows, values and tie-break order: panes at 1, 2, 4 and reconfigured == run_sn."""
    op = build(name, {**params, **window})
    assert isinstance(compile_operator(op), PaneKernel)
    expected = run_sn(op, [table])
    for m in (1, 2, 4):
        out, pipeline = run_schedule(op, [table], m, MAX_PARALLELISM, [])
        assert out.equals(expected), m
    schedule = data.draw(schedules(op, table))
    m = data.draw(st.integers(1, MAX_PARALLELISM))
    out, pipeline = run_schedule(op, [table], m, MAX_PARALLELISM, schedule)
    assert out.equals(expected)
    assert pipeline._pool.audit is not None
    assert not pipeline._pool.audit.violations


@settings(max_examples=15, deadline=None)
@given(table=tweets(max_rows=30), window=windows())
def test_panes_equal_the_per_window_path(table: pa.Table, window: dict[str, int]) -> None:
    """The same operator with its combine undeclared takes the per-window path: same rows."""
    op = build("wordcount", window)
    assert isinstance(op.kernel, AggregateSpec)
    per_window = replace(op, kernel=replace(op.kernel, combine=None))
    kernel = compile_operator(per_window)
    assert isinstance(kernel, AggregateKernel)
    assert not isinstance(kernel, PaneKernel)
    panes, _ = run_schedule(op, [table], 2, 2, [])
    windows_out, _ = run_schedule(per_window, [table], 2, 2, [])
    assert panes.equals(windows_out)


def test_the_catalog_declares_each_aggregates_combine() -> None:
    combines = {name: build(name).kernel for name in ("wordcount", "paircount", "longest_tweet")}
    assert {name: getattr(spec, "combine", None) for name, spec in combines.items()} == {
        "wordcount": "sum",
        "paircount": "sum",
        "longest_tweet": "max",
    }


def test_a_combine_must_agree_with_the_value_kept() -> None:
    with pytest.raises(ValueError, match="counts cannot combine its panes by 'max'"):
        AggregateSpec("words", combine="max")
    with pytest.raises(ValueError, match="maxima cannot combine its panes by 'sum'"):
        AggregateSpec("hashtags", take_max=True, combine="sum")


def test_panes_are_gcd_long_and_dropped_when_their_windows_closed() -> None:
    """WA 40, WS 100: panes of 20 ms; after the input every pane is gone."""
    op = build("wordcount", {"wa": 40, "ws": 100})
    kernel = compile_operator(op)
    assert isinstance(kernel, PaneKernel)
    assert kernel.pane_ms == 20
    assert kernel._spans(5, 61) == [(0, 20), (20, 40), (40, 60), (60, 80)]
    rows = [(ts, ("u", "a b a")) for ts in range(0, 400, 7)]
    table = build("wordcount").inputs[0].table([r[0] for r in rows], [r[1] for r in rows])
    out, pipeline = run_schedule(op, [table], 2, 2, [])
    assert out.equals(run_sn(op, [table]))
    compiled = pipeline._pool.compiled
    assert isinstance(compiled, PaneKernel)
    assert compiled.window_sets() == 0


def test_custom_operators_keep_the_general_path() -> None:
    op = build("wordcount")
    assert compile_operator(replace(op, kernel=None)) is None


def test_arrow_splits_on_exactly_pythons_whitespace() -> None:
    """Every code point, alone and in runs, at the ends and inside: as ``str.split()``."""
    chars = [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c < 0xE000]
    texts = [f"a{c}b" for c in chars] + [f"{c}{c}x{c}" for c in chars] + ["", " ", "  a  b  "]
    tokens, offsets = split_tokens(pa.array(texts, pa.string()), hashtags=False)
    counts = np.diff(offsets)
    expected = [len(text.split()) for text in texts]
    assert counts.tolist() == expected
    spaces = [c for c in chars if c.isspace()]
    joined = pa.array(["".join(f"w{i}{c}" for i, c in enumerate(spaces))], pa.string())
    words, _ = split_tokens(joined, hashtags=False)
    assert words.to_pylist() == joined[0].as_py().split()


@settings(max_examples=100, deadline=None)
@given(texts=st.lists(st.text(" \t\n\u3000\x1c#ab\u00e9", max_size=14), max_size=8))
def test_split_tokens_and_hashtags_equal_python(texts: list[str]) -> None:
    for hashtags in (False, True):
        tokens, offsets = split_tokens(pa.array(texts, pa.string()), hashtags=hashtags)
        got = [tokens[offsets[r] : offsets[r + 1]].to_pylist() for r in range(len(texts))]
        words = [text.split() for text in texts]
        if hashtags:
            words = [[w[1:] for w in ws if w.startswith("#") and len(w) > 1] for ws in words]
        assert got == words
    assert pc.utf8_length(pa.array(texts, pa.string())).to_pylist() == [len(t) for t in texts]


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.lists(st.integers(0, 6), max_size=40), max_size=6))
def test_distinct_in_rows_keeps_first_occurrences(rows: list[list[int]]) -> None:
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    flat = np.array([x for r in rows for x in r], dtype=np.int64)
    numbers, counts = distinct_in_rows(flat, offsets)
    assert counts.tolist() == [len(dict.fromkeys(r)) for r in rows]
    assert numbers.tolist() == [x for r in rows for x in dict.fromkeys(r)]
