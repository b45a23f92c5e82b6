"""Every catalog operator's reference output equals a brute-force oracle written here.

The oracles know nothing of windows-as-state, keys or instances: they enumerate every
window or every pair directly from the definitions in docs/design.md's catalog.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stretch.model.sn import run_sn
from stretch.operators.catalog import build
from tests.streams import forward_streams, scalejoin_streams, trades, tweets


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) for r in table.to_pylist()]


def assert_same_rows(actual: pa.Table, expected: list[tuple[Any, ...]]) -> None:
    got = rows(actual)
    assert Counter(got) == Counter(expected)
    assert [r[0] for r in got] == sorted(r[0] for r in got), "output not in ts order"


def windows_of(ts_values: list[int], wa: int, ws: int) -> list[int]:
    """Left boundaries of every window [l, l + ws) on the wa grid holding some ts."""
    found = set()
    for ts in ts_values:
        found.update(range(math.floor((ts - ws) / wa + 1) * wa, ts + 1, wa))
    return sorted(found)


def aggregate_oracle(
    table: pa.Table, wa: int, ws: int, keys_of: Any, value_of: Any, combine: Any
) -> list[tuple[Any, ...]]:
    data = table.to_pylist()
    expected = []
    for l in windows_of([r["ts"] for r in data], wa, ws):
        inside = [r for r in data if l <= r["ts"] < l + ws]
        per_key: dict[str, Any] = {}
        for r in inside:
            for key in set(keys_of(r["tweet"])):
                per_key[key] = combine(per_key.get(key), value_of(r))
        expected += [(l + ws, k, v) for k, v in per_key.items()]
    return expected


def count(old: int | None, _: int) -> int:
    return (old or 0) + 1


def longest(old: int | None, value: int) -> int:
    return max(old or 0, value)


WINDOWS = st.sampled_from([(10, 10), (10, 30), (25, 100), (7, 20)])


@given(tweets(), WINDOWS)
def test_wordcount(table: pa.Table, window: tuple[int, int]) -> None:
    wa, ws = window
    out = run_sn(build("wordcount", {"wa": wa, "ws": ws}), [table])
    assert_same_rows(out, aggregate_oracle(table, wa, ws, str.split, len, count))


@given(tweets(), WINDOWS, st.sampled_from(["1", "2", "3", "inf"]))
def test_paircount(table: pa.Table, window: tuple[int, int], b: str) -> None:
    wa, ws = window
    limit = math.inf if b == "inf" else int(b)

    def pairs(text: str) -> list[str]:
        w = text.split()
        return [
            f"{w[i]} {w[j]}" for i in range(len(w)) for j in range(len(w)) if 0 < j - i <= limit
        ]

    out = run_sn(build("paircount", {"wa": wa, "ws": ws, "b": b}), [table])
    assert_same_rows(out, aggregate_oracle(table, wa, ws, pairs, len, count))


@given(tweets(), WINDOWS)
def test_longest_tweet(table: pa.Table, window: tuple[int, int]) -> None:
    wa, ws = window

    def tags(text: str) -> list[str]:
        return [w[1:] for w in text.split() if w.startswith("#") and len(w) > 1]

    out = run_sn(build("longest_tweet", {"wa": wa, "ws": ws}), [table])
    expected = aggregate_oracle(table, wa, ws, tags, lambda r: len(r["tweet"]), longest)
    assert_same_rows(out, expected)


def band_pairs(
    left: list[dict[str, Any]], right: list[dict[str, Any]], ws: int, match: Any
) -> list[tuple[Any, ...]]:
    expected = []
    for l_row in left:
        for r_row in right:
            if abs(l_row["ts"] - r_row["ts"]) <= ws and (payload := match(l_row, r_row)):
                expected.append((max(l_row["ts"], r_row["ts"]), *payload))
    return expected


@given(scalejoin_streams(), st.sampled_from([0, 5, 40, 300]), st.integers(1, 5))
def test_scalejoin(streams: list[pa.Table], ws: int, keys: int) -> None:
    def match(l_row: dict[str, Any], r_row: dict[str, Any]) -> tuple[Any, ...] | None:
        if abs(l_row["x"] - r_row["a"]) <= 10 and abs(l_row["y"] - r_row["b"]) <= 10:
            return (l_row["x"], l_row["y"], r_row["a"], r_row["b"], r_row["c"], r_row["d"])
        return None

    out = run_sn(build("scalejoin", {"ws": max(ws, 1), "keys": keys}), streams)
    left, right = (t.to_pylist() for t in streams)
    assert_same_rows(out, band_pairs(left, right, max(ws, 1), match))


@given(trades(), st.sampled_from([1, 20, 200]))
def test_hedge(table: pa.Table, ws: int) -> None:
    def match(l_row: dict[str, Any], r_row: dict[str, Any]) -> tuple[Any, ...] | None:
        if l_row["avg_price"] == 0 or r_row["avg_price"] == 0:
            return None  # no ND
        nd_l = (l_row["price"] - l_row["avg_price"]) / l_row["avg_price"]
        nd_r = (r_row["price"] - r_row["avg_price"]) / r_row["avg_price"]
        if l_row["symbol"] != r_row["symbol"] and nd_l != 0 and -1.05 <= nd_r / nd_l <= -0.95:
            return (l_row["symbol"], l_row["price"], r_row["symbol"], r_row["price"])
        return None

    out = run_sn(build("hedge", {"ws": ws}), [table, table])
    data = table.to_pylist()
    assert_same_rows(out, band_pairs(data, data, ws, match))


@given(forward_streams())
def test_forward(tables: list[pa.Table]) -> None:
    op = build("forward", {"columns": "v:int", "inputs": str(len(tables))})
    out = run_sn(op, tables)
    # Stream order: ts, then source, then rows of one ts by content (stretch.model.order).
    merged = sorted(
        (r["ts"], source, r["v"]) for source, t in enumerate(tables) for r in t.to_pylist()
    )
    assert rows(out) == [(ts, v) for ts, _, v in merged]


def test_hedge_finds_opposite_deviations() -> None:
    """A worked pair: -4 % against +4 % is a hedge, +4 % against +4 % is not."""
    from stretch.model.schema import Schema

    schema = Schema.of(symbol="str", price="float", avg_price="float")
    table = schema.table(
        [0, 10, 20], [("GOOG", 96.0, 100.0), ("VOD", 104.0, 100.0), ("FB", 104.0, 100.0)]
    )
    out = rows(run_sn(build("hedge"), [table, table]))
    # At ts 10, VOD arrives first as L (source 0), then as R: the order of the total order.
    assert out == [
        (10, "VOD", 104.0, "GOOG", 96.0),
        (10, "GOOG", 96.0, "VOD", 104.0),
        (20, "FB", 104.0, "GOOG", 96.0),
        (20, "GOOG", 96.0, "FB", 104.0),
    ]


@pytest.mark.parametrize("name", ["wordcount", "paircount", "longest_tweet"])
def test_aggregate_of_empty_input_is_empty(name: str) -> None:
    from stretch.model.schema import Schema

    empty = Schema.of(user="str", tweet="str").empty_table()
    assert run_sn(build(name), [empty]).num_rows == 0


@pytest.mark.parametrize("ws", [1, 7, 300])
def test_join_pairs_exactly_ws_apart_match_in_both_runtimes(ws: int) -> None:
    """The band includes its ends: a pair WS apart matches (after a gap, too)."""
    from stretch.model.schema import Schema
    from stretch.vsn import run_vsn

    schema = Schema.of(symbol="str", price="float", avg_price="float")
    table = schema.table(
        [0, ws, 3 * ws + 5, 4 * ws + 5], [("GOOG", 95.0, 100.0), ("FB", 105.0, 100.0)] * 2
    )
    op = build("hedge", {"ws": ws, "keys": 3})
    expected = run_sn(op, [table, table])
    assert rows(expected) == [
        (ws, "FB", 105.0, "GOOG", 95.0),
        (ws, "GOOG", 95.0, "FB", 105.0),
        (4 * ws + 5, "FB", 105.0, "GOOG", 95.0),
        (4 * ws + 5, "GOOG", 95.0, "FB", 105.0),
    ]
    left = Schema.of(x="int", y="float").table([0, 3 * ws + 5], [(1, 1.0), (1, 1.0)])
    right = Schema.of(a="int", b="float", c="float", d="bool").table(
        [ws, 4 * ws + 5], [(2, 2.0, 0.0, True), (2, 2.0, 0.0, False)]
    )
    joined = run_sn(build("scalejoin", {"ws": ws, "keys": 2}), [left, right])
    assert [r[0] for r in rows(joined)] == [ws, 4 * ws + 5]
    for parallelism in (1, 2):
        assert run_vsn(op, [table, table], parallelism, 2).equals(expected)
        scalejoin = build("scalejoin", {"ws": ws, "keys": 2})
        assert run_vsn(scalejoin, [left, right], parallelism, 2).equals(joined)
