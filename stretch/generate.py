"""Synthetic input streams standing in for the data sets of the paper's section 8.

Each generator returns one table per source, each with an int64 ``ts`` column first (event
time in milliseconds, non-decreasing, ties allowed) followed by the payload columns the
matching catalog operator reads (docs/design.md, operator catalog). Output is a pure function
of the arguments: every draw comes from one ``numpy.random.Generator(PCG64(seed))`` in a
fixed order.

* :func:`scalejoin`: the ScaleJoin benchmark of section 8.3 (two uniform streams).
* :func:`hedge`: NYSE-like trades of ten companies with a bursty rate (section 8.6).
* :func:`tweets`: Zipf-distributed tweets for wordcount, paircount and longest_tweet
  (sections 8.1 and 8.2, appendix D Operator 9).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

__all__ = [
    "DEFAULT_ROWS",
    "GENERATORS",
    "HEDGE_AVG_PRICES",
    "HEDGE_PEAK_RATE",
    "HEDGE_START_MS",
    "VALUE_HIGH",
    "VALUE_LOW",
    "hedge",
    "scalejoin",
    "tweets",
]

VALUE_LOW = 1
"""Section 8.3: x, y, a and b are uniform in [VALUE_LOW, VALUE_HIGH]."""
VALUE_HIGH = 10_000
"""The upper end of scalejoin's values; c and d (double, bool) ride along."""

# The last ts must stay far from int64 overflow whatever code adds to it later.
_MAX_SPAN_MS = 2**62

HEDGE_START_MS = 34_200_000
"""09:30 of day 0, the opening of the NYSE trading day, in milliseconds."""

HEDGE_PEAK_RATE = 8_000.0
"""Section 8.6: the trade rate oscillates between 0 and 8 000 tuples/s."""

HEDGE_AVG_PRICES: dict[str, float] = {
    "GOOG": 1_219.74,
    "FB": 171.06,
    "AMZN": 1_817.27,
    "MSFT": 105.37,
    "AAPL": 190.29,
    "WMT": 87.79,
    "BABA": 187.80,
    "V": 137.47,
    "VOD": 24.68,
    "MA": 199.35,
}
"""Previous-day average trade price (USD) of the ten companies, late July 2018."""

# Share of the day's trades per symbol, in the order of HEDGE_AVG_PRICES.
_HEDGE_TRADE_SHARES = (0.08, 0.16, 0.14, 0.14, 0.18, 0.06, 0.08, 0.06, 0.05, 0.05)
_HEDGE_DEVIATION = 0.02  # stationary std of (price - avg) / avg
_HEDGE_TICK_NOISE = 0.0005  # per-trade jitter of (price - avg) / avg
_HEDGE_REVERSION_MS = 300_000  # e-folding time of a deviation
# Rate profile: levels held for ~30 s, a tenth of them near-silent, one burst per ~10 min.
_HEDGE_SEGMENT_MS = 30_000
_HEDGE_QUIET_SHARE = 0.1
_HEDGE_QUIET_LEVEL = 0.02
_HEDGE_BURST_EVERY_MS = 600_000
_HEDGE_BURST_MAX_MS = 60_000
# Rate buckets are 1 s, widened for very long streams to bound the profile's size.
_HEDGE_BUCKET_MS = 1_000
_HEDGE_MAX_BUCKETS = 2**17

_TWEET_USERS = 10_000
_TWEET_MIN_TOKENS = 3
_TWEET_MAX_TOKENS = 20
_TWEET_HASHTAG_SHARE = 0.08
_ZIPF_EXPONENT = 1.0


def scalejoin(rows: int, rate: float, seed: int) -> list[pa.Table]:
    """Generate the two streams of the ScaleJoin benchmark (section 8.3).

    Both streams carry ``rows`` tuples at a steady ``rate``: tuple ``i`` has
    ``ts = floor(i * 1000 / rate)``, so several tuples share a millisecond when
    ``rate > 1000``. ``x``, ``a`` are integers and ``y``, ``b``, ``c`` floats, all uniform
    in [1, 10 000]; ``d`` is a fair coin.

    Args:
        rows: Tuples per stream, >= 0.
        rate: Tuples per second per stream, > 0.
        seed: Seed of the random generator.

    Returns:
        ``[L, R]``: L has columns ``ts, x, y`` (int64, int64, float64); R has
        ``ts, a, b, c, d`` (int64, int64, float64, float64, bool).

    Raises:
        ValueError: ``rows`` or ``rate`` is out of range.

    """
    _check_stream(rows, rate)
    rng = _rng(seed)
    ts = np.floor(np.arange(rows, dtype=np.float64) * 1000.0 / rate).astype(np.int64)
    left = pa.table(
        {
            "ts": ts,
            "x": rng.integers(VALUE_LOW, VALUE_HIGH + 1, rows, dtype=np.int64),
            "y": rng.uniform(VALUE_LOW, VALUE_HIGH, rows),
        }
    )
    right = pa.table(
        {
            "ts": ts,
            "a": rng.integers(VALUE_LOW, VALUE_HIGH + 1, rows, dtype=np.int64),
            "b": rng.uniform(VALUE_LOW, VALUE_HIGH, rows),
            "c": rng.uniform(VALUE_LOW, VALUE_HIGH, rows),
            "d": rng.random(rows) < 0.5,
        }
    )
    return [left, right]


def hedge(
    rows: int, rate: float, seed: int, *, peak_rate: float = HEDGE_PEAK_RATE
) -> list[pa.Table]:
    """Generate NYSE-like trades of ten companies, the self-join input of section 8.6.

    The rate is bursty: a random piecewise-constant level per ~30 s (a tenth of them
    near-silent), second-to-second jitter and short bursts, scaled so that the mean rate
    is ``rate`` and clipped to ``peak_rate`` per 1-second bucket (buckets widen only past
    2**17 seconds). Trades start at 09:30 (:data:`HEDGE_START_MS`), span about
    ``rows / rate`` seconds (a 6.5-hour trading day is 23 400 s) and fall uniformly within
    their bucket. Each trade's symbol is drawn by trade share; its price follows a
    mean-reverting (Ornstein-Uhlenbeck) walk around the symbol's previous-day average
    (:data:`HEDGE_AVG_PRICES`), about 2% either way with a 5-minute reversion time, so
    normalised deviations of different symbols often mirror each other. Prices are in
    cents.

    Args:
        rows: Number of trades, >= 0.
        rate: Mean trades per second, > 0 and below ``peak_rate``.
        seed: Seed of the random generator.
        peak_rate: Most trades in any one second (give or take one), finite.

    Returns:
        One table (fed as both L and R) with columns ``ts`` int64, ``symbol`` string,
        ``price`` float64, ``avg_price`` float64.

    Raises:
        ValueError: ``rows`` or ``rate`` is out of range, or ``rate`` is not below a
            finite ``peak_rate``.

    """
    _check_stream(rows, rate)
    if not (rate < peak_rate and math.isfinite(peak_rate)):
        msg = f"hedge: mean rate {rate} t/s must be below a finite peak_rate, got {peak_rate}"
        raise ValueError(msg)
    rng = _rng(seed)
    span_ms = rows * 1000.0 / rate
    bucket_ms = max(_HEDGE_BUCKET_MS, math.ceil(span_ms / _HEDGE_MAX_BUCKETS))
    n_buckets = max(1, math.ceil(span_ms / bucket_ms))
    profile = _bursty_profile(rng, n_buckets, bucket_ms)
    counts = _fill(profile, rows, peak_rate * bucket_ms / 1000.0)
    bucket = np.repeat(np.arange(n_buckets, dtype=np.int64), counts)
    offset_ms = rng.integers(0, bucket_ms, rows, dtype=np.int64)
    ts = np.sort(HEDGE_START_MS + bucket * bucket_ms + offset_ms)

    symbols = pa.array(list(HEDGE_AVG_PRICES), type=pa.string())
    avg_prices = np.array(list(HEDGE_AVG_PRICES.values()))
    symbol = rng.choice(len(symbols), size=rows, p=_HEDGE_TRADE_SHARES)
    reversion_buckets = max(1.0, _HEDGE_REVERSION_MS / bucket_ms)
    deviation = _mean_reverting(rng, len(symbols), n_buckets, reversion_buckets)
    # ts is sorted and bucket is non-decreasing, so row i's bucket is still bucket[i].
    deviation_at = deviation[symbol, bucket] + rng.normal(0.0, _HEDGE_TICK_NOISE, rows)
    avg_price = avg_prices[symbol]
    price = np.round(avg_price * (1.0 + deviation_at), 2)
    return [
        pa.table(
            {
                "ts": ts,
                "symbol": symbols.take(symbol),
                "price": price,
                "avg_price": avg_price,
            }
        )
    ]


def tweets(
    rows: int, rate: float, seed: int, vocabulary: int = 2000, hashtags: int = 50
) -> list[pa.Table]:
    """Generate tweets for wordcount, paircount and longest_tweet (section 8.1).

    Arrivals are a Poisson process of mean ``rate`` starting at ts 0. Users ``u1``,
    ``u2``, ... (10 000 of them) and tokens are Zipf-distributed (exponent 1, rank 1 most
    frequent). A tweet has 3 to 20 tokens joined by single spaces; each token is a
    hashtag ``#tagK`` (from ``hashtags`` ranks) with probability 8%, otherwise a word
    ``wK`` (from ``vocabulary`` ranks). Tokens may repeat within a tweet.

    Args:
        rows: Number of tweets, >= 0.
        rate: Mean tweets per second, > 0.
        seed: Seed of the random generator.
        vocabulary: Number of distinct words, >= 1.
        hashtags: Number of distinct hashtags, >= 0 (0: no hashtags).

    Returns:
        One table with columns ``ts`` int64, ``user`` string, ``tweet`` string.

    Raises:
        ValueError: An argument is out of range.

    """
    _check_stream(rows, rate)
    if vocabulary < 1:
        msg = f"tweets: vocabulary must be >= 1 words, got {vocabulary}"
        raise ValueError(msg)
    if hashtags < 0:
        msg = f"tweets: hashtags must be >= 0, got {hashtags}"
        raise ValueError(msg)
    rng = _rng(seed)
    gaps_ms = rng.exponential(1000.0 / rate, rows)
    ts = np.floor(np.cumsum(gaps_ms) - gaps_ms[:1]).astype(np.int64)
    user_names = pa.array([f"u{rank}" for rank in range(1, _TWEET_USERS + 1)])
    user = user_names.take(_zipf(rng, _TWEET_USERS, rows))

    lengths = rng.integers(_TWEET_MIN_TOKENS, _TWEET_MAX_TOKENS + 1, rows, dtype=np.int64)
    n_tokens = int(lengths.sum())
    hashtag_share = _TWEET_HASHTAG_SHARE if hashtags else 0.0
    is_hashtag = rng.random(n_tokens) < hashtag_share
    token = np.empty(n_tokens, dtype=np.int64)
    token[~is_hashtag] = _zipf(rng, vocabulary, n_tokens - int(is_hashtag.sum()))
    # Hashtag codes follow the vocabulary's in token_names.
    token[is_hashtag] = vocabulary + _zipf(rng, max(hashtags, 1), int(is_hashtag.sum()))
    token_names = pa.array(
        [f"w{rank}" for rank in range(1, vocabulary + 1)]
        + [f"#tag{rank}" for rank in range(1, hashtags + 1)]
    )
    tokens = token_names.take(token)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    tweet = pc.binary_join(pa.LargeListArray.from_arrays(offsets, tokens), " ")
    return [pa.table({"ts": ts, "user": user, "tweet": tweet})]


GENERATORS: dict[str, Callable[..., list[pa.Table]]] = {
    "scalejoin": scalejoin,
    "hedge": hedge,
    "tweets": tweets,
}
"""Generators by the name of the catalog operator (or family) they feed."""

DEFAULT_ROWS: dict[str, int] = {"scalejoin": 10_000, "hedge": 5_000, "tweets": 10_000}
"""Rows per stream ``stretch generate`` writes by default: a replay of each with the
catalog's defaults takes seconds (5 000 trades at 1 000/s are about 140 000 hedge pairs;
hedge's output grows with rows squared while the trades span less than its 30 s window)."""


def _check_stream(rows: int, rate: float) -> None:
    if rows < 0:
        msg = f"rows must be >= 0, got {rows}"
        raise ValueError(msg)
    if not (math.isfinite(rate) and rate > 0):
        msg = f"rate must be a positive, finite number of tuples/s, got {rate}"
        raise ValueError(msg)
    if rows * 1000.0 / rate > _MAX_SPAN_MS:
        msg = f"{rows} rows at {rate} tuples/s span more ms than int64 timestamps allow"
        raise ValueError(msg)


def _rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed))


def _zipf(rng: np.random.Generator, ranks: int, size: int) -> NDArray[np.int64]:
    """Draw 0-based ranks in ``[0, ranks)`` with P(k) proportional to 1 / (k + 1)^s.

    Walker's alias method: O(ranks) to build the table, O(1) a draw; a binary search of
    the CDF per draw is several times slower on tweets' ten million tokens.
    """
    weights = np.arange(1, ranks + 1, dtype=np.float64) ** -_ZIPF_EXPONENT
    keep = weights * (ranks / weights.sum())
    alias = np.arange(ranks, dtype=np.int64)
    small = [k for k in range(ranks) if keep[k] < 1.0]
    large = [k for k in range(ranks) if keep[k] >= 1.0]
    while small and large:
        short, tall = small.pop(), large[-1]
        alias[short] = tall
        keep[tall] -= 1.0 - keep[short]
        if keep[tall] < 1.0:
            small.append(large.pop())
    # Ranks left in either list hold (up to rounding) exactly one share: never aliased.
    keep[small + large] = 1.0
    column = rng.integers(0, ranks, size, dtype=np.int64)
    drawn: NDArray[np.int64] = np.where(rng.random(size) < keep[column], column, alias[column])
    return drawn


def _bursty_profile(
    rng: np.random.Generator, n_buckets: int, bucket_ms: int
) -> NDArray[np.float64]:
    """Draw a positive, unnormalised rate per bucket: held levels, jitter and bursts."""
    n_segments = max(1, n_buckets * bucket_ms // _HEDGE_SEGMENT_MS)
    starts = np.sort(rng.integers(1, max(n_buckets, 2), n_segments - 1))
    segment = np.searchsorted(starts, np.arange(n_buckets), side="right")
    levels = rng.lognormal(0.0, 1.0, n_segments)
    levels[rng.random(n_segments) < _HEDGE_QUIET_SHARE] *= _HEDGE_QUIET_LEVEL
    profile = levels[segment] * rng.lognormal(0.0, 0.3, n_buckets)

    n_bursts = 1 + n_buckets * bucket_ms // _HEDGE_BURST_EVERY_MS
    burst_start = rng.integers(0, n_buckets, n_bursts)
    burst_length = rng.integers(1, max(2, _HEDGE_BURST_MAX_MS // bucket_ms), n_bursts)
    burst_height = rng.lognormal(1.5, 0.5, n_bursts) * levels.mean()
    step = np.zeros(n_buckets + 1)
    np.add.at(step, burst_start, burst_height)
    np.add.at(step, np.minimum(burst_start + burst_length, n_buckets), -burst_height)
    # Rounding in the running sum can leave -1e-16 where no burst is on.
    bursts: NDArray[np.float64] = np.maximum(np.cumsum(step[:-1]), 0.0)
    return profile + bursts


def _fill(profile: NDArray[np.float64], rows: int, cap: float) -> NDArray[np.int64]:
    """Split ``rows`` over buckets in proportion to ``min(scale * profile, cap)``.

    ``scale`` is found by bisection so that the clipped profile sums to ``rows``; the
    caller guarantees ``cap * len(profile) > rows``. Rounding the running total keeps each
    count within one tuple of its clipped rate, so no bucket exceeds ``cap + 1``.
    """
    low, high = 0.0, cap / float(profile.min())
    for _ in range(64):
        middle = (low + high) / 2.0
        if np.minimum(middle * profile, cap).sum() < rows:
            low = middle
        else:
            high = middle
    rate = np.minimum(high * profile, cap)
    total = np.cumsum(rate)
    bounds = np.floor(total * (rows / total[-1])).astype(np.int64)
    bounds[-1] = rows
    counts: NDArray[np.int64] = np.diff(bounds, prepend=0)
    return counts


def _mean_reverting(
    rng: np.random.Generator, n_series: int, length: int, reversion: float
) -> NDArray[np.float64]:
    """Draw stationary Ornstein-Uhlenbeck paths, one value per bucket, std 2%.

    Each path is white noise filtered by the AR(1) impulse response ``a**k`` with
    ``a = exp(-1 / reversion)``, convolved by FFT; a warm-up of ten reversion times is
    dropped so that the first bucket is already stationary.
    """
    warm_up = math.ceil(10 * reversion)
    total = length + warm_up
    decay = math.exp(-1.0 / reversion)
    noise = rng.normal(0.0, _HEDGE_DEVIATION * math.sqrt(1.0 - decay**2), (n_series, total))
    response = decay ** np.arange(total, dtype=np.float64)
    size = 1 << (2 * total - 1).bit_length()
    spectrum = np.fft.rfft(noise, size, axis=1) * np.fft.rfft(response, size)
    paths: NDArray[np.float64] = np.fft.irfft(spectrum, size, axis=1)[:, warm_up:total]
    return paths
