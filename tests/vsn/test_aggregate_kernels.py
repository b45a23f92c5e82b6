"""The aggregate kernels (wordcount, paircount, longest_tweet) against the Python O+."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stretch.model.batch import StringDictionary
from stretch.model.oplus import StreamTuple
from stretch.model.sn import run_sn
from stretch.operators.catalog import TWEETS, build
from stretch.vsn._compiled import compile_operator
from stretch.vsn._compiled.aggregates import AggregateKernel, KeyTable
from stretch.vsn._ingest import SourceStore
from tests.streams import tweets
from tests.vsn.support import no_thread_leak, run_schedule

__all__ = ["no_thread_leak"]

TOKENS = st.sampled_from(["a", "b", "#t", "#", "##u", "é", "a#"])
TEXTS = st.lists(TOKENS, max_size=12).map(" ".join) | st.text(" ab#\t\n", max_size=12)
OPERATORS = [
    ("wordcount", {}),
    ("paircount", {"b": 1}),
    ("paircount", {"b": 3}),
    ("paircount", {"b": "inf"}),
    ("longest_tweet", {}),
]


def _store(texts: list[str]) -> SourceStore:
    store = SourceStore(0, TWEETS, "source 0", StringDictionary())
    ts = list(range(len(texts)))
    store.append(TWEETS.table(ts, [("u", text) for text in texts]))
    return store


@pytest.mark.parametrize(("name", "params"), OPERATORS)
@settings(max_examples=40, deadline=None)
@given(texts=st.lists(TEXTS, max_size=8), split=st.integers(0, 8))
def test_key_table_equals_the_operators_multi_key(
    name: str, params: dict[str, str], texts: list[str], split: int
) -> None:
    """Key numbers name f_MK's keys, in order, with f_mu's groups; read in two steps."""
    op = build(name, params)
    kernel = compile_operator(op)
    assert isinstance(kernel, AggregateKernel)
    table: KeyTable = kernel.keys
    store = _store(texts)
    table.read(store, min(split, len(texts)))
    rows = table.read(store, len(texts))
    assert (rows.base, rows.end) == (0, len(texts))
    for seq, text in enumerate(texts):
        expected = op.keys_of(StreamTuple(seq, 0, seq, {"user": "u", "tweet": text}))
        numbers = rows.numbers[rows.offsets[seq] : rows.offsets[seq + 1]].tolist()
        assert [table.strings[k] for k in numbers] == expected
        assert [int(table.groups[k]) for k in numbers] == [op.group_of(k) for k in expected]
        assert rows.lengths[seq] == len(text)


@pytest.mark.parametrize(("name", "params"), OPERATORS)
@settings(max_examples=6, deadline=None)
@given(table=tweets(), data=st.data())
def test_kernel_equals_generic_path_and_sn(
    name: str, params: dict[str, str], table: pa.Table, data: st.DataObject
) -> None:
    """Small windows and a reconfiguration: kernel == Python functions == run_sn."""
    op = build(name, {"wa": 10, "ws": 30, **params})
    times = table.column("ts").to_pylist() or [0]
    schedule = [(data.draw(st.sampled_from(times)), data.draw(st.integers(1, 3)), None)]
    compiled, pipeline = run_schedule(op, [table], 2, 3, schedule, compiled=True)
    generic, _ = run_schedule(op, [table], 2, 3, schedule, compiled=False)
    assert pipeline._pool.audit is not None
    assert not pipeline._pool.audit.violations
    assert compiled.equals(generic)
    assert compiled.equals(run_sn(op, [table]))


def test_every_aggregate_of_the_catalog_has_a_kernel() -> None:
    for name, params in OPERATORS:
        assert isinstance(compile_operator(build(name, params)), AggregateKernel), name
