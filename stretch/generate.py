"""Synthetic input streams standing in for the data sets of the paper's section 8.

Each generator returns one table per source, each with an int64 ``ts`` column first (event
time in milliseconds, non-decreasing, ties allowed) followed by the payload columns the
matching catalog operator reads (docs/design.md, operator catalog). Output is a pure function
of the arguments. The rows are made :data:`CHUNK_ROWS` at a time (the ``*_chunks``
generators, which ``stretch generate`` writes as they come, so its memory does not grow
with ``rows``): chunk 0 draws from ``numpy.random.Generator(PCG64(seed))``, chunk ``k``
from ``PCG64(seed).jumped(k)``, each in a fixed order. A stream of up to
:data:`CHUNK_ROWS` rows is one chunk.

* :func:`scalejoin`: the ScaleJoin benchmark of section 8.3 (two uniform streams).
* :func:`hedge`: NYSE-like trades of ten companies with a bursty rate (section 8.6).
* :func:`tweets`: Zipf-distributed tweets for wordcount, paircount and longest_tweet
  (sections 8.1 and 8.2, appendix D Operator 9).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

__all__ = [
    "CHUNKED",
    "CHUNK_ROWS",
    "DEFAULT_ROWS",
    "GENERATORS",
    "HEDGE_AVG_PRICES",
    "HEDGE_PEAK_RATE",
    "HEDGE_START_MS",
    "VALUE_HIGH",
    "VALUE_LOW",
    "hedge",
    "hedge_chunks",
    "scalejoin",
    "scalejoin_chunks",
    "tweets",
    "tweets_chunks",
]

CHUNK_ROWS = 1 << 20
"""Rows per stream made at a time (hedge: whole buckets of its rate profile, so a chunk may
hold up to one bucket more); tweets take about 400 bytes a row while made, the others about
100."""

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
    return _whole(scalejoin_chunks(rows, rate, seed))


def scalejoin_chunks(
    rows: int, rate: float, seed: int, *, ts_only: bool = False
) -> Iterator[list[pa.Table]]:
    """:func:`scalejoin`'s streams, :data:`CHUNK_ROWS` rows of each at a time.

    With ``ts_only`` the tables hold only their ``ts`` column (what a join's cost needs).
    """
    _check_stream(rows, rate)
    for k, (start, stop) in enumerate(_spans(rows)):
        rng, n = _chunk_rng(seed, k), stop - start
        position = np.arange(start, stop, dtype=np.float64)
        ts = np.floor(position * 1000.0 / rate).astype(np.int64)
        if ts_only:
            yield [pa.table({"ts": ts}), pa.table({"ts": ts})]
            continue
        left = pa.table(
            {
                "ts": ts,
                "x": rng.integers(VALUE_LOW, VALUE_HIGH + 1, n, dtype=np.int64),
                "y": rng.uniform(VALUE_LOW, VALUE_HIGH, n),
            }
        )
        right = pa.table(
            {
                "ts": ts,
                "a": rng.integers(VALUE_LOW, VALUE_HIGH + 1, n, dtype=np.int64),
                "b": rng.uniform(VALUE_LOW, VALUE_HIGH, n),
                "c": rng.uniform(VALUE_LOW, VALUE_HIGH, n),
                "d": rng.random(n) < 0.5,
            }
        )
        yield [left, right]


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
    return _whole(hedge_chunks(rows, rate, seed, peak_rate=peak_rate))


def hedge_chunks(
    rows: int,
    rate: float,
    seed: int,
    *,
    peak_rate: float = HEDGE_PEAK_RATE,
    ts_only: bool = False,
) -> Iterator[list[pa.Table]]:
    """:func:`hedge`'s trades, whole buckets of about :data:`CHUNK_ROWS` rows at a time.

    Chunk 0's generator draws the rate profile first and the price walks (a few values per
    bucket, and buckets are at most 2**17) after its own trades' times and symbols, so a
    stream of one chunk draws as the whole stream always did; each later chunk draws its
    trades. With ``ts_only`` the tables hold only their ``ts`` column (what a join's cost
    needs).
    """
    _check_stream(rows, rate)
    if not (rate < peak_rate and math.isfinite(peak_rate)):
        msg = f"hedge: mean rate {rate} t/s must be below a finite peak_rate, got {peak_rate}"
        raise ValueError(msg)
    rng = _chunk_rng(seed, 0)
    span_ms = rows * 1000.0 / rate
    bucket_ms = max(_HEDGE_BUCKET_MS, math.ceil(span_ms / _HEDGE_MAX_BUCKETS))
    n_buckets = max(1, math.ceil(span_ms / bucket_ms))
    profile = _bursty_profile(rng, n_buckets, bucket_ms)
    counts = _fill(profile, rows, peak_rate * bucket_ms / 1000.0)
    symbols = pa.array(list(HEDGE_AVG_PRICES), type=pa.string())
    avg_prices = np.array(list(HEDGE_AVG_PRICES.values()))
    reversion_buckets = max(1.0, _HEDGE_REVERSION_MS / bucket_ms)
    deviation: NDArray[np.float64] | None = None
    for k, (first, stop) in enumerate(_bucket_spans(counts)):
        if k:
            rng = _chunk_rng(seed, k)
        bucket = np.repeat(np.arange(first, stop, dtype=np.int64), counts[first:stop])
        n = len(bucket)
        offset_ms = rng.integers(0, bucket_ms, n, dtype=np.int64)
        ts = np.sort(HEDGE_START_MS + bucket * bucket_ms + offset_ms)
        if ts_only:
            yield [pa.table({"ts": ts})]
            continue
        symbol = rng.choice(len(symbols), size=n, p=_HEDGE_TRADE_SHARES)
        if deviation is None:  # drawn after chunk 0's symbols: one chunk draws as it always did
            deviation = _mean_reverting(rng, len(symbols), n_buckets, reversion_buckets)
        # ts is sorted and bucket is non-decreasing, so row i's bucket is still bucket[i].
        deviation_at = deviation[symbol, bucket] + rng.normal(0.0, _HEDGE_TICK_NOISE, n)
        avg_price = avg_prices[symbol]
        price = np.round(avg_price * (1.0 + deviation_at), 2)
        yield [
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
    return _whole(tweets_chunks(rows, rate, seed, vocabulary, hashtags))


def tweets_chunks(
    rows: int, rate: float, seed: int, vocabulary: int = 2000, hashtags: int = 50
) -> Iterator[list[pa.Table]]:
    """:func:`tweets`, :data:`CHUNK_ROWS` tweets at a time."""
    _check_stream(rows, rate)
    if vocabulary < 1:
        msg = f"tweets: vocabulary must be >= 1 words, got {vocabulary}"
        raise ValueError(msg)
    if hashtags < 0:
        msg = f"tweets: hashtags must be >= 0, got {hashtags}"
        raise ValueError(msg)
    users, words, tags = _Zipf.of(_TWEET_USERS), _Zipf.of(vocabulary), _Zipf.of(max(hashtags, 1))
    user_names = pa.array([f"u{rank}" for rank in range(1, _TWEET_USERS + 1)])
    token_names = pa.array(
        [f"w{rank}" for rank in range(1, vocabulary + 1)]
        + [f"#tag{rank}" for rank in range(1, hashtags + 1)]
    )
    hashtag_share = _TWEET_HASHTAG_SHARE if hashtags else 0.0
    arrived = 0.0  # ms from the first tweet's gap to the last tweet made
    first_gap = 0.0
    for k, (start, stop) in enumerate(_spans(rows)):
        rng, n = _chunk_rng(seed, k), stop - start
        gaps_ms = rng.exponential(1000.0 / rate, n)
        if start == 0 and n:
            first_gap = float(gaps_ms[0])  # the first tweet arrives at ts 0
        arrival_ms = np.cumsum(gaps_ms) + arrived
        arrived = float(arrival_ms[-1]) if n else arrived
        ts = np.floor(arrival_ms - first_gap).astype(np.int64)
        user = user_names.take(users.draw(rng, n))

        lengths = rng.integers(_TWEET_MIN_TOKENS, _TWEET_MAX_TOKENS + 1, n, dtype=np.int64)
        n_tokens = int(lengths.sum())
        is_hashtag = rng.random(n_tokens) < hashtag_share
        token = np.empty(n_tokens, dtype=np.int64)
        token[~is_hashtag] = words.draw(rng, n_tokens - int(is_hashtag.sum()))
        # Hashtag codes follow the vocabulary's in token_names.
        token[is_hashtag] = vocabulary + tags.draw(rng, int(is_hashtag.sum()))
        tokens = token_names.take(token)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        tweet = pc.binary_join(pa.LargeListArray.from_arrays(offsets, tokens), " ")
        yield [pa.table({"ts": ts, "user": user, "tweet": tweet})]


GENERATORS: dict[str, Callable[..., list[pa.Table]]] = {
    "scalejoin": scalejoin,
    "hedge": hedge,
    "tweets": tweets,
}
"""Generators by the name of the catalog operator (or family) they feed."""

CHUNKED: dict[str, Callable[..., Iterator[list[pa.Table]]]] = {
    "scalejoin": scalejoin_chunks,
    "hedge": hedge_chunks,
    "tweets": tweets_chunks,
}
"""The same generators a chunk at a time: each chunk is one table per stream."""

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


def _whole(chunks: Iterator[list[pa.Table]]) -> list[pa.Table]:
    """The chunks' tables joined, one table per stream."""
    streams = list(zip(*chunks, strict=True))
    return [table[0] if len(table) == 1 else pa.concat_tables(table) for table in streams]


def _spans(rows: int) -> Iterator[tuple[int, int]]:
    """The row ranges of the chunks; one empty range for no rows."""
    yield from ((start, min(start + CHUNK_ROWS, rows)) for start in range(0, rows, CHUNK_ROWS))
    if rows == 0:
        yield 0, 0


def _bucket_spans(counts: NDArray[np.int64]) -> Iterator[tuple[int, int]]:
    """Bucket ranges of at least :data:`CHUNK_ROWS` rows each (the last one: the rest)."""
    bounds = np.concatenate([[0], np.cumsum(counts)])
    first = 0
    while True:
        stop = int(np.searchsorted(bounds, bounds[first] + CHUNK_ROWS, side="left"))
        if stop >= len(counts) or bounds[stop] >= bounds[-1]:
            yield first, len(counts)
            return
        yield first, stop
        first = stop


def _chunk_rng(seed: int, chunk: int) -> np.random.Generator:
    """The generator of chunk ``chunk``: PCG64(seed), jumped ``chunk`` times."""
    bits = np.random.PCG64(seed)
    return np.random.Generator(bits.jumped(chunk) if chunk else bits)


@dataclass(frozen=True, slots=True)
class _Zipf:
    """Walker's alias table over 0-based ranks, P(k) proportional to 1 / (k + 1)^s.

    O(ranks) to build, O(1) a draw; a binary search of the CDF per draw is several times
    slower on tweets' ten million tokens.
    """

    keep: NDArray[np.float64]
    alias: NDArray[np.int64]

    @classmethod
    def of(cls, ranks: int) -> _Zipf:
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
        return cls(keep, alias)

    def draw(self, rng: np.random.Generator, size: int) -> NDArray[np.int64]:
        """``size`` ranks in ``[0, ranks)``."""
        column = rng.integers(0, len(self.keep), size, dtype=np.int64)
        drawn: NDArray[np.int64] = np.where(
            rng.random(size) < self.keep[column], column, self.alias[column]
        )
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
