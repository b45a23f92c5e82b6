"""Synthetic data generators: schemas, determinism, timestamps and distributions."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from stretch import generate
from stretch.generate import (
    CHUNKED,
    DEFAULT_ROWS,
    GENERATORS,
    HEDGE_AVG_PRICES,
    HEDGE_PEAK_RATE,
    HEDGE_START_MS,
    hedge,
    hedge_chunks,
    scalejoin,
    tweets,
)
from stretch.join_estimate import estimate_chunks, estimate_join

SCHEMAS = {
    "scalejoin": [
        pa.schema([("ts", pa.int64()), ("x", pa.int64()), ("y", pa.float64())]),
        pa.schema(
            [
                ("ts", pa.int64()),
                ("a", pa.int64()),
                ("b", pa.float64()),
                ("c", pa.float64()),
                ("d", pa.bool_()),
            ]
        ),
    ],
    "hedge": [
        pa.schema(
            [
                ("ts", pa.int64()),
                ("symbol", pa.string()),
                ("price", pa.float64()),
                ("avg_price", pa.float64()),
            ]
        )
    ],
    "tweets": [pa.schema([("ts", pa.int64()), ("user", pa.string()), ("tweet", pa.string())])],
}

names = pytest.mark.parametrize("name", sorted(SCHEMAS))


def ts_of(table: pa.Table) -> NDArray[np.int64]:
    ts: NDArray[np.int64] = table["ts"].to_numpy()
    return ts


def test_generators_are_named_after_their_operators() -> None:
    assert {"scalejoin": scalejoin, "hedge": hedge, "tweets": tweets} == GENERATORS
    assert set(CHUNKED) == set(GENERATORS)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> int:
    """Chunks of 1,000 rows, so that a few thousand rows take several."""
    monkeypatch.setattr(generate, "CHUNK_ROWS", 1000)
    return 1000


VALUES = {"scalejoin": "x", "hedge": "price", "tweets": "tweet"}


@names
def test_a_stream_is_made_a_chunk_at_a_time(name: str, small_chunks: int) -> None:
    chunks = list(CHUNKED[name](4500, 300.0, 5))
    assert len(chunks) > 2
    assert all(chunk[0].num_rows >= small_chunks for chunk in chunks[:-1])
    joined = [pa.concat_tables(stream) for stream in zip(*chunks, strict=True)]
    whole = GENERATORS[name](4500, 300.0, 5)
    assert all(a.equals(b) for a, b in zip(joined, whole, strict=True))
    assert [table.schema for table in whole] == SCHEMAS[name]
    assert all(np.all(np.diff(ts_of(table)) >= 0) for table in whole)  # across chunks too
    # Each chunk draws from its own generator: the second does not repeat the first.
    column = VALUES[name]
    assert chunks[0][0][column][:50] != chunks[1][0][column][:50]
    if name != "tweets":  # the joins' estimates read only ts
        ts = list(CHUNKED[name](4500, 300.0, 5, ts_only=True))
        assert [[t.column_names for t in c] for c in ts] == [[["ts"]] * len(whole)] * len(chunks)
        assert [[t["ts"] for t in c] for c in ts] == [[t["ts"] for t in c] for c in chunks]


def test_hedge_chunks_hold_whole_seconds_and_keep_the_rate(small_chunks: int) -> None:
    chunks = [chunk for (chunk,) in hedge_chunks(20_000, 500.0, 3)]
    assert len(chunks) > 5
    seconds = [(ts_of(chunk) - HEDGE_START_MS) // 1000 for chunk in chunks]
    assert all(a[-1] < b[0] for a, b in zip(seconds, seconds[1:], strict=False))  # none split
    assert np.bincount(np.concatenate(seconds)).max() <= HEDGE_PEAK_RATE + 1


def test_tweets_arrive_on_across_chunks(small_chunks: int) -> None:
    (table,) = tweets(5000, 50.0, 2)
    ts = ts_of(table)
    assert ts[0] == 0
    assert np.all(np.diff(ts) >= 0)
    gaps = np.diff(ts)
    # Poisson arrivals at 50/s: the gaps at each chunk's edge are like the others
    edges = gaps[small_chunks - 1 :: small_chunks]
    assert edges.max() < 40 * gaps.mean()
    assert abs(len(ts) / (ts[-1] / 1000.0) - 50.0) < 5.0


@settings(max_examples=150, deadline=None)
@given(
    left=st.lists(st.integers(-40, 40), max_size=60),
    right=st.lists(st.integers(-40, 40), max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=6),
    ws=st.integers(0, 30),
)
def test_estimate_chunks_counts_the_pairs_within_the_window_exactly(
    left: list[int], right: list[int], cuts: list[int], ws: int
) -> None:
    """Any chunking of the streams gives the count of a brute force over them whole."""
    ts_l, ts_r = np.sort(np.array(left, dtype=np.int64)), np.sort(np.array(right, dtype=np.int64))

    def chunked(ts: NDArray[np.int64]) -> list[pa.Table]:
        bounds = [0, *sorted(c for c in cuts if c < len(ts)), len(ts)]
        return [pa.table({"ts": ts[a:b]}) for a, b in zip(bounds, bounds[1:], strict=False)]

    chunks_l, chunks_r = chunked(ts_l), chunked(ts_r)
    # the streams' chunks go in pairs; the shorter list is padded with empty chunks
    empty = pa.table({"ts": pa.array([], pa.int64())})
    pairs = max(len(chunks_l), len(chunks_r))
    chunks_l += [empty] * (pairs - len(chunks_l))
    chunks_r += [empty] * (pairs - len(chunks_r))
    estimate = estimate_chunks(
        "scalejoin", lambda *, ts_only: iter(zip(chunks_l, chunks_r, strict=True)), ws
    )
    assert estimate.comparisons == int((np.abs(ts_l[:, None] - ts_r[None, :]) <= ws).sum())


@pytest.mark.parametrize("name", ["scalejoin", "hedge"])
def test_estimate_chunks_matches_the_estimate_over_whole_tables(
    name: str, small_chunks: int
) -> None:
    rate = 1000.0 if name == "scalejoin" else 200.0
    tables = GENERATORS[name](6000, rate, 1)
    whole = estimate_join(name, tables, 2000)
    chunked = estimate_chunks(
        name, lambda *, ts_only: CHUNKED[name](6000, rate, 1, ts_only=ts_only), 2000
    )
    assert chunked.comparisons == whole.comparisons
    # hedge samples its match rate within each chunk, where whole tables have one
    assert abs(chunked.pairs - whole.pairs) <= (0 if name == "scalejoin" else 0.1 * whole.pairs)


@names
@pytest.mark.parametrize("rows", [0, 1, 1000])
def test_schema_and_row_count(name: str, rows: int) -> None:
    tables = GENERATORS[name](rows, 100.0, 7)
    assert [table.schema for table in tables] == SCHEMAS[name]
    assert all(table.num_rows == rows for table in tables)
    assert all(table.column(0).null_count == 0 for table in tables)


@names
def test_same_seed_same_tables_other_seed_other_tables(name: str) -> None:
    generate: Callable[..., list[pa.Table]] = GENERATORS[name]
    first, again, other = (
        generate(2000, 500.0, 1),
        generate(2000, 500.0, 1),
        generate(2000, 500.0, 2),
    )
    assert all(a.equals(b) for a, b in zip(first, again, strict=True))
    assert not any(a.equals(b) for a, b in zip(first, other, strict=True))


@names
@pytest.mark.parametrize("rate", [0.5, 300.0, 5000.0])
def test_ts_is_non_decreasing(name: str, rate: float) -> None:
    for table in GENERATORS[name](3000, rate, 3):
        assert np.all(np.diff(ts_of(table)) >= 0)


@names
@pytest.mark.parametrize(
    ("rows", "rate", "message"),
    [
        (-1, 10.0, "rows must be >= 0, got -1"),
        (10, 0.0, "rate must be a positive"),
        (10, -5.0, "rate must be a positive"),
        (10, float("nan"), "rate must be a positive"),
        (10, float("inf"), "rate must be a positive"),
        (10**18, 1e-3, "more ms than int64"),
    ],
)
def test_bad_arguments_are_value_errors(name: str, rows: int, rate: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GENERATORS[name](rows, rate, 0)


# scalejoin (section 8.3)


def test_scalejoin_ts_is_steady_with_ties_above_1000_per_second() -> None:
    left, right = scalejoin(10_000, 2500.0, 0)
    expected = np.floor(np.arange(10_000) * 1000 / 2500).astype(np.int64)
    assert np.array_equal(ts_of(left), expected)
    assert np.array_equal(ts_of(right), expected)
    assert ts_of(left)[0] == 0
    assert np.diff(ts_of(left)).min() == 0


def test_scalejoin_values_are_uniform_in_1_to_10000() -> None:
    left, right = scalejoin(50_000, 1000.0, 0)
    for column in (left["x"], right["a"]):
        values = column.to_numpy()
        assert values.min() >= 1
        assert values.max() <= 10_000
        assert abs(values.mean() - 5000.5) < 100
    for column in (left["y"], right["b"], right["c"]):
        values = column.to_numpy()
        assert values.min() >= 1.0
        assert values.max() <= 10_000.0
        assert len(np.unique(values)) > 49_000
    assert 0.45 < np.mean(right["d"].to_numpy(zero_copy_only=False)) < 0.55


# hedge (section 8.6)


def test_hedge_starts_at_0930_and_keeps_the_mean_rate() -> None:
    (trades,) = hedge(100_000, 1000.0, 0)
    ts = ts_of(trades)
    assert ts[0] >= HEDGE_START_MS
    assert ts[-1] < HEDGE_START_MS + 100_000
    assert ts[-1] - ts[0] > 90_000


def test_hedge_rate_is_bursty_and_capped_at_8000_per_second() -> None:
    (trades,) = hedge(400_000, 2000.0, 5)
    per_second = np.bincount((ts_of(trades) - HEDGE_START_MS) // 1000)
    assert per_second.max() <= HEDGE_PEAK_RATE + 1
    assert per_second.max() > 2 * per_second.mean()
    assert np.percentile(per_second, 10) < per_second.mean() / 2
    assert per_second.std() > 0.3 * per_second.mean()


def test_hedge_near_the_peak_fills_every_second_up_to_the_cap() -> None:
    (trades,) = hedge(80_000, 7900.0, 1)
    per_second = np.bincount((ts_of(trades) - HEDGE_START_MS) // 1000)
    assert per_second.max() <= HEDGE_PEAK_RATE + 1


def test_hedge_rate_must_stay_below_the_peak() -> None:
    with pytest.raises(ValueError, match="below a finite peak_rate, got 8000"):
        hedge(10, 8000.0, 0)
    with pytest.raises(ValueError, match="peak_rate, got inf"):
        hedge(10, 100.0, 0, peak_rate=float("inf"))
    assert hedge(10, 9000.0, 0, peak_rate=20_000.0)[0].num_rows == 10


def test_hedge_symbols_and_average_prices() -> None:
    (trades,) = hedge(50_000, 500.0, 2)
    symbols = trades["symbol"].to_pylist()
    assert set(symbols) == set(HEDGE_AVG_PRICES)
    assert {"VOD", "MA"} <= set(symbols)
    averages = trades["avg_price"].to_pylist()
    assert all(HEDGE_AVG_PRICES[s] == a for s, a in zip(symbols, averages, strict=True))


def test_hedge_prices_wander_a_few_percent_both_ways_in_cents() -> None:
    (trades,) = hedge(50_000, 500.0, 2)
    price = trades["price"].to_numpy()
    avg = trades["avg_price"].to_numpy()
    deviation = (price - avg) / avg
    assert np.abs(deviation).max() < 0.2
    assert 0.005 < deviation.std() < 0.05
    assert (deviation > 0.01).mean() > 0.1
    assert (deviation < -0.01).mean() > 0.1
    assert np.allclose(np.round(price, 2), price)


def test_hedge_has_mirrored_deviations_the_join_predicate_matches() -> None:
    (trades,) = hedge(2000, 200.0, 4)
    symbol = np.array(trades["symbol"].to_pylist())
    price = trades["price"].to_numpy()
    avg = trades["avg_price"].to_numpy()
    nd = (price - avg) / avg
    ts = ts_of(trades)
    matches = 0
    for i in range(len(nd)):
        window = (np.abs(ts - ts[i]) <= 30_000) & (symbol != symbol[i]) & (nd[i] != 0)
        ratio = nd[window] / nd[i] if nd[i] else np.array([])
        matches += int(np.count_nonzero((ratio >= -1.05) & (ratio <= -0.95)))
    assert matches > 100


# tweets (section 8.1)

TOKEN = re.compile(r"(w|#tag)[1-9][0-9]*")


def test_tweets_are_3_to_20_zipf_tokens_with_hashtags() -> None:
    (table,) = tweets(5000, 100.0, 0)
    token_lists = [tweet.split(" ") for tweet in table["tweet"].to_pylist()]
    assert min(map(len, token_lists)) == 3
    assert max(map(len, token_lists)) == 20
    counts = Counter(token for tokens in token_lists for token in tokens)
    assert all(TOKEN.fullmatch(token) for token in counts)
    assert counts.most_common(1)[0][0] == "w1"
    assert counts["w1"] > 5 * counts["w10"] > 0
    hashtags = {token for token in counts if token.startswith("#")}
    assert 10 < len(hashtags) <= 50
    assert sum("#" in tweet for tweet in table["tweet"].to_pylist()) > 2500
    assert any(len(tokens) > len(set(tokens)) for tokens in token_lists)


def test_tweets_users_and_arrivals() -> None:
    (table,) = tweets(20_000, 1000.0, 0)
    assert all(re.fullmatch(r"u[1-9][0-9]*", user) for user in table["user"].to_pylist())
    ts = ts_of(table)
    assert ts[0] == 0
    assert 18_000 < ts[-1] < 22_000


def test_tweets_vocabulary_and_hashtag_counts() -> None:
    (table,) = tweets(2000, 100.0, 0, vocabulary=5, hashtags=0)
    tokens = {token for tweet in table["tweet"].to_pylist() for token in tweet.split()}
    assert tokens == {"w1", "w2", "w3", "w4", "w5"}
    (table,) = tweets(2000, 100.0, 0, vocabulary=1, hashtags=1)
    tokens = {token for tweet in table["tweet"].to_pylist() for token in tweet.split()}
    assert tokens == {"w1", "#tag1"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"vocabulary": 0}, "vocabulary must be >= 1"), ({"hashtags": -1}, "hashtags must be >= 0")],
)
def test_tweets_bad_vocabulary_is_a_value_error(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tweets(10, 1.0, 0, **kwargs)


def brute_force_hedge_pairs(trades: pa.Table, ws_ms: int) -> int:
    """Every ordered (L, R) pair of trades within ws_ms, hedge's predicate written out."""
    ts = ts_of(trades)
    symbol = np.asarray(trades["symbol"].to_pylist())
    price, avg = trades["price"].to_numpy(), trades["avg_price"].to_numpy()
    nd = (price - avg) / avg
    within = np.abs(ts[:, None] - ts[None, :]) <= ws_ms
    defined = (symbol[:, None] != symbol[None, :]) & (nd[:, None] != 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = nd[None, :] / nd[:, None]
    return int((within & defined & (ratio >= -1.05) & (ratio <= -0.95)).sum())


def brute_force_scalejoin_pairs(left: pa.Table, right: pa.Table, ws_ms: int) -> int:
    """Pairs with abs(x - a) <= 10, abs(y - b) <= 10 and ts within ws_ms, via a sort on a."""
    order = np.argsort(right["a"].to_numpy(), kind="stable")
    a, b = right["a"].to_numpy()[order], right["b"].to_numpy()[order]
    ts_r = ts_of(right)[order]
    x, y, ts_l = left["x"].to_numpy(), left["y"].to_numpy(), ts_of(left)
    low, high = np.searchsorted(a, x - 10, "left"), np.searchsorted(a, x + 10, "right")
    first = np.repeat(np.arange(len(x)), high - low)
    second = np.concatenate([np.arange(lo, hi) for lo, hi in zip(low, high, strict=True)])
    keep = (np.abs(y[first] - b[second]) <= 10) & (np.abs(ts_l[first] - ts_r[second]) <= ws_ms)
    return int(keep.sum())


@pytest.mark.parametrize(("rows", "rate", "ws_ms"), [(2000, 1000.0, 30_000), (3000, 100.0, 5000)])
def test_hedge_estimate_is_near_the_brute_force_count(rows: int, rate: float, ws_ms: int) -> None:
    (trades,) = hedge(rows, rate, 4)
    estimate = estimate_join("hedge", [trades], ws_ms)
    ts = ts_of(trades)
    assert estimate.comparisons == int((np.abs(ts[:, None] - ts[None, :]) <= ws_ms).sum())
    exact = brute_force_hedge_pairs(trades, ws_ms)
    assert exact > 10_000  # enough matches for the sample's share to mean something
    assert abs(estimate.pairs - exact) <= 0.1 * exact


def test_scalejoin_estimate_is_near_the_brute_force_count() -> None:
    left, right = scalejoin(40_000, 1000.0, 6)
    estimate = estimate_join("scalejoin", [left, right])
    assert estimate.comparisons == 40_000**2  # 40 s of stream, all within the 300 s window
    exact = brute_force_scalejoin_pairs(left, right, 300_000)
    assert abs(estimate.pairs - exact) <= 0.1 * exact
    narrow = estimate_join("scalejoin", [left, right], 2000)
    assert abs(narrow.pairs - brute_force_scalejoin_pairs(left, right, 2000)) <= 0.2 * narrow.pairs


def test_estimate_flags_the_explosion_of_the_issue() -> None:
    """Issue 23: 100 000 trades at the default rate are over 10**8 hedge pairs."""
    assert estimate_join("hedge", hedge(100_000, 1000.0, 0)).refused
    small = estimate_join("hedge", hedge(DEFAULT_ROWS["hedge"], 1000.0, 0))
    assert not small.explodes
    assert not estimate_join("scalejoin", scalejoin(DEFAULT_ROWS["scalejoin"], 1000.0, 0)).explodes
    with pytest.raises(ValueError, match="wordcount"):
        estimate_join("wordcount", tweets(10, 1.0, 0))
