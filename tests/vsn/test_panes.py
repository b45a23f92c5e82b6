"""Panes (Enorm) for the aggregates that declare an associative combine, against run_sn."""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stretch.model.oplus import OPlus
from stretch.model.sn import run_sn
from stretch.operators.catalog import build
from stretch.operators.kernels import AggregateSpec
from stretch.operators.kernels._aggregate import combine_panes, distinct_in_rows
from stretch.vsn._compiled import compile_operator
from stretch.vsn._compiled import panes as panes_module
from stretch.vsn._compiled._tokens import TokenTable
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


def test_the_pane_log_grows_and_drops_its_dead_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pane log with room for one entry at first: it grows and compacts all along."""
    monkeypatch.setattr(panes_module, "LOG_ENTRIES", 1)
    words = ["a", "b", "c", "d", "e", "f", "g"]
    rows = [(ts, (f"u{ts % 3}", " ".join(words[ts % 5 : ts % 7 + 2]))) for ts in range(0, 3000, 7)]
    op = build("wordcount", {"wa": 30, "ws": 90})
    table = op.inputs[0].table([r[0] for r in rows], [r[1] for r in rows])
    expected = run_sn(op, [table])
    assert expected.num_rows > 100
    for m, schedule in ((1, []), (3, [(1500, 2, None), (2200, 3, None)])):
        out, pipeline = run_schedule(op, [table], m, 3, schedule)
        assert out.equals(expected), m
        kernel = pipeline._pool.compiled
        assert isinstance(kernel, PaneKernel)
        assert kernel._logs and all(log.keys.shape[0] > 1 for log in kernel._logs.values())
    # The combine gets the log's whole arrays (a window may span all of it or part of it):
    # one layout, so Numba compiles one specialization, the one ``stretch warm`` compiles.
    assert {signature[2].layout for signature in combine_panes.signatures} == {"C"}


def test_custom_operators_keep_the_general_path() -> None:
    op = build("wordcount")
    assert compile_operator(replace(op, kernel=None)) is None


def _split(texts: list[str], hashtags: bool, table: TokenTable | None = None) -> list[list[str]]:
    """Each text's tokens as the token table splits and numbers them."""
    table = table or TokenTable()
    numbers, offsets, _ = table.numbers(pa.array(texts, pa.string()), hashtags)
    return [
        [table.strings[k] for k in numbers[offsets[r] : offsets[r + 1]].tolist()]
        for r in range(len(texts))
    ]


def test_tokens_split_on_exactly_pythons_whitespace() -> None:
    """Every code point inside a word, at a word's ends and (whitespace) in runs at a text's
    ends: as ``str.split()``. Words of every code point are joined into texts of 4,096."""
    chars = [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c < 0xE000]
    words = [f"a{c}b" for c in chars] + [f"{c}{c}x{c}" for c in chars]
    texts = [" ".join(words[i : i + 4096]) for i in range(0, len(words), 4096)]
    texts += [f"{c}{c}x{c}" for c in chars if c.isspace()] + ["", " ", "  a  b  "]
    assert _split(texts, hashtags=False) == [text.split() for text in texts]
    spaces = [c for c in chars if c.isspace()]
    joined = "".join(f"w{i}{c}" for i, c in enumerate(spaces))
    assert _split([joined], hashtags=False) == [joined.split()]


@settings(max_examples=100, deadline=None)
@given(
    texts=st.lists(st.text(" \t\n\u3000\u2029\x1c#ab\u00e9\U0001f600", max_size=14), max_size=8),
    split_at=st.integers(0, 8),
)
def test_tokens_and_hashtags_equal_python(texts: list[str], split_at: int) -> None:
    """Tokens, and hashtags without '#', numbered alike across calls on one table."""
    for hashtags in (False, True):
        table = TokenTable()
        got = _split(texts[:split_at], hashtags, table) + _split(texts[split_at:], hashtags, table)
        words = [text.split() for text in texts]
        if hashtags:
            words = [[w[1:] for w in ws if w.startswith("#") and len(w) > 1] for ws in words]
        assert got == words
        assert len(set(table.strings)) == len(table.strings)


def test_the_token_table_grows() -> None:
    """Many distinct long tokens: the arena, the table and the index grow; numbers stay."""
    table = TokenTable()
    texts = [" ".join(f"{'x' * 40}{i}-{j}" for j in range(50)) for i in range(200)]
    assert _split(texts, hashtags=False, table=table) == [t.split() for t in texts]
    assert _split(texts[:3], hashtags=False, table=table) == [t.split() for t in texts[:3]]
    assert len(table.strings) == 200 * 50


@settings(max_examples=100, deadline=None)
@given(
    calls=st.lists(
        st.lists(st.lists(st.integers(0, 6), max_size=40), max_size=6), min_size=1, max_size=3
    )
)
def test_distinct_in_rows_keeps_first_occurrences(calls: list[list[list[int]]]) -> None:
    """Calls in a row share ``seen``, as a KeyTable's reads do: no call sees another's rows."""
    seen = np.full(7, -1, dtype=np.int64)
    first_row = 0
    for rows in calls:
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in rows], out=offsets[1:])
        flat = np.array([x for r in rows for x in r], dtype=np.int64)
        numbers, counts = distinct_in_rows(flat, offsets, seen, first_row)
        assert counts.tolist() == [len(dict.fromkeys(r)) for r in rows]
        assert numbers.tolist() == [x for r in rows for x in dict.fromkeys(r)]
        first_row += len(rows)
