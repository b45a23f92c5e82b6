"""Hypothesis strategies for input streams of the catalog operators."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import strategies as st

from stretch.model.schema import Schema

WORDS = ["a", "b", "c", "#x", "#y", "#", "dd"]


@st.composite
def sorted_ts(draw: st.DrawFn, max_rows: int = 25, span: int = 400) -> list[int]:
    """Non-decreasing event times with ties and gaps (so some windows stay empty)."""
    steps = draw(
        st.lists(st.one_of(st.just(0), st.integers(0, 10), st.integers(0, span)), max_size=max_rows)
    )
    start = draw(st.integers(-50, 50))
    ts, now = [], start
    for step in steps:
        now += step
        ts.append(now)
    return ts


@st.composite
def tweets(draw: st.DrawFn, max_rows: int = 20) -> pa.Table:
    ts = draw(sorted_ts(max_rows))
    texts = [" ".join(draw(st.lists(st.sampled_from(WORDS), max_size=6))) for _ in ts]
    users = [f"u{i % 3}" for i in range(len(ts))]
    return Schema.of(user="str", tweet="str").table(ts, list(zip(users, texts, strict=True)))


@st.composite
def scalejoin_streams(draw: st.DrawFn) -> list[pa.Table]:
    small = st.integers(1, 30)
    smallf = st.floats(1, 30, allow_nan=False).map(lambda v: round(v, 1))
    left_ts = draw(sorted_ts(15))
    right_ts = draw(sorted_ts(15))
    left = Schema.of(x="int", y="float").table(
        left_ts, [(draw(small), draw(smallf)) for _ in left_ts]
    )
    right = Schema.of(a="int", b="float", c="float", d="bool").table(
        right_ts, [(draw(small), draw(smallf), draw(smallf), draw(st.booleans())) for _ in right_ts]
    )
    return [left, right]


AVG_PRICES = [100.0, 40.0, 0.0]
"""avg_price of generated trades; 0: a trade with no ND, which matches nothing."""
DEVIATIONS = [-5.0, -4.0, -2.1, -2.0, -1.9, 0.0, 2.0, 4.0, 4.1, 5.0]
"""price - avg_price of generated trades: opposite deviations of similar size, ND = 0, and
ratios ND_R / ND_L at the ends of [-1.05, -0.95], some a rounding error either side."""


@st.composite
def trades(draw: st.DrawFn) -> pa.Table:
    ts = draw(sorted_ts(18))
    symbols = ["GOOG", "FB", "VOD"]
    rows = []
    for _ in ts:
        avg = draw(st.sampled_from(AVG_PRICES))
        price = avg + draw(st.sampled_from(DEVIATIONS))
        rows.append((draw(st.sampled_from(symbols)), price, avg))
    return Schema.of(symbol="str", price="float", avg_price="float").table(ts, rows)


@st.composite
def forward_streams(draw: st.DrawFn) -> list[pa.Table]:
    inputs = draw(st.integers(1, 3))
    schema = Schema.of(v="int")
    tables = []
    for _ in range(inputs):
        ts = draw(sorted_ts(12))
        tables.append(schema.table(ts, [(draw(st.integers(0, 9)),) for _ in ts]))
    return tables


TYPED = Schema.of(i="int", f="float", b="bool", s="str")


@st.composite
def typed_streams(draw: st.DrawFn) -> list[pa.Table]:
    """Two forward inputs with a column of every type."""
    tables = []
    for _ in range(2):
        ts = draw(sorted_ts(12))
        rows = [
            (
                draw(st.integers(-5, 5)),
                draw(st.floats(-1e3, 1e3, allow_nan=False)),
                draw(st.booleans()),
                draw(st.sampled_from(WORDS)),
            )
            for _ in ts
        ]
        tables.append(TYPED.table(ts, rows))
    return tables
