"""The SN reference runtime: Pi-independence (Theorem 2 / Corollary 1), watermarks, O+."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stretch.errors import OperatorError, ReconfigurationError
from stretch.model.oplus import OPlus, StreamTuple, Windows, WindowType
from stretch.model.schema import Schema
from stretch.model.sn import SNRuntime, Watermark, merge_sources, output_table, run_sn, tuples_of
from stretch.operators.catalog import build
from tests.streams import forward_streams, scalejoin_streams, trades, tweets

PARAMS = {
    "wordcount": {"wa": 10, "ws": 30},
    "paircount": {"wa": 10, "ws": 30, "b": 2},
    "longest_tweet": {"wa": 25, "ws": 100},
    "scalejoin": {"ws": 40, "keys": 4},
    "hedge": {"ws": 50, "keys": 3},
}


def inputs_for(name: str) -> st.SearchStrategy[list[pa.Table]]:
    if name == "scalejoin":
        return scalejoin_streams()
    if name == "hedge":
        return trades().map(lambda t: [t, t])
    return tweets().map(lambda t: [t])


def run_with_mapping(
    op: OPlus, tables: Sequence[pa.Table], parallelism: int, mapping: list[int] | None
) -> pa.Table:
    runtime = SNRuntime(op, parallelism, mapping)
    return output_table(op, runtime.run(merge_sources(tuples_of(op, tables))))


@pytest.mark.parametrize("name", sorted(PARAMS))
@given(data=st.data())
def test_output_identical_for_any_parallelism(name: str, data: st.DataObject) -> None:
    op = build(name, PARAMS[name])
    tables = data.draw(inputs_for(name))
    reference = run_sn(op, tables, 1)
    for parallelism in (2, 3, 4):
        assert run_sn(op, tables, parallelism).equals(reference), parallelism
    mapping = data.draw(st.lists(st.integers(0, 2), min_size=op.key_groups, max_size=op.key_groups))
    assert run_with_mapping(op, tables, 3, mapping).equals(reference)


@given(forward_streams(), st.integers(1, 4))
def test_forward_identical_for_any_parallelism(tables: list[pa.Table], pi: int) -> None:
    op = build("forward", {"columns": "v:int", "inputs": str(len(tables))})
    assert run_sn(op, tables, pi).equals(run_sn(op, tables, 1))


def test_bad_mapping_is_rejected() -> None:
    op = build("wordcount")
    with pytest.raises(ReconfigurationError, match="key group 0"):
        SNRuntime(op, 2, [5] * op.key_groups)
    with pytest.raises(ReconfigurationError, match="each of 1024 key groups"):
        SNRuntime(op, 2, [0, 1])


COUNTS = {"wa": 10, "ws": 10}


def tweet(ts: int, seq: int, text: str) -> StreamTuple:
    return StreamTuple(ts, 0, seq, {"user": "u", "tweet": text})


def test_explicit_watermark_expires_windows_early() -> None:
    """A watermark closes windows before the next tuple arrives (section 2.3)."""
    runtime = SNRuntime(build("wordcount", COUNTS), 2)
    runtime.forward(tweet(3, 0, "a b"))
    assert runtime.rows == []
    runtime.watermark(10)  # window [0, 10) ends at 10: no later tuple can fall in it
    assert sorted((r.ts, *r.payload) for r in runtime.rows) == [(10, "a", 1), (10, "b", 1)]


def test_watermark_items_in_a_stream_give_the_same_output() -> None:
    op = build("wordcount", COUNTS)
    plain = [tweet(3, 0, "a"), tweet(12, 1, "a b"), tweet(31, 2, "b")]
    marked = [plain[0], Watermark(10, 0, 1), plain[1], Watermark(25, 0, 2), plain[2]]
    assert SNRuntime(op, 1).run(marked) == SNRuntime(op, 3).run(plain)


def test_end_of_input_flushes_every_window() -> None:
    out = SNRuntime(build("wordcount", {"wa": 10, "ws": 30}), 1).run([tweet(5, 0, "a")])
    assert [(r.ts, *r.payload) for r in out] == [(10, "a", 1), (20, "a", 1), (30, "a", 1)]


def test_window_bounds() -> None:
    op = build("wordcount", {"wa": 30, "ws": 60})
    assert (op.earliest_win_l(50), op.latest_win_l(50)) == (0, 30)
    assert (op.earliest_win_l(60), op.latest_win_l(60)) == (30, 60)
    assert (op.earliest_win_l(-1), op.latest_win_l(-1)) == (-60, -30)


def test_user_defined_operator_with_table_i_defaults() -> None:
    """Only f_O is specialised: f_U stores tuples and f_S purges them (Table I)."""
    readings = Schema.of(sensor="str", value="float")

    def mean_per_sensor(w: Windows) -> list[tuple[Any, ...]]:
        values = [t["value"] for t in w.states[0]]
        return [(w.key, sum(values) / len(values), len(values))]

    op = OPlus(
        "mean",
        wa_ms=5,
        ws_ms=10,
        inputs=(readings,),
        multi_key=lambda t: [t["sensor"]],
        window_type=WindowType.SINGLE,
        output=Schema.of(sensor="str", mean="float", n="int"),
        output_fn=mean_per_sensor,
    )
    table = readings.table([0, 4, 6, 12], [("s", 1.0), ("s", 3.0), ("t", 5.0), ("s", 7.0)])
    out = [tuple(r.values()) for r in run_sn(op, [table], 2).to_pylist()]
    # single window of s: [0,10) -> {1,3}; shifted to [5,15) -> {} + 7 ... flushed at end
    # s: [-5,5) and [0,10) hold {1, 3}; [5,15) and [10,20) hold {7}; t: [0,10), [5,15)
    assert out == [
        (5, "s", 2.0, 2),
        (10, "s", 2.0, 2),
        (10, "t", 5.0, 1),
        (15, "t", 5.0, 1),
        (15, "s", 7.0, 1),
        (20, "s", 7.0, 1),
    ]
    assert run_sn(op, [table], 1).equals(run_sn(op, [table], 2))


def test_unknown_operator_and_param() -> None:
    with pytest.raises(OperatorError, match="unknown operator 'nope'"):
        build("nope")
    with pytest.raises(OperatorError, match="has no parameter 'wx'"):
        build("wordcount", {"wx": 1})
    with pytest.raises(OperatorError, match="ws='-3'"):
        build("wordcount", {"ws": "-3"})
