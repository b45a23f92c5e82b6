"""What joining generated streams will cost, told before the files are written.

A band join's output grows with the pairs of tuples that share a window: at a steady rate
``r`` and window ``WS`` every tuple meets about ``2 * r * WS`` others, so until the stream
is longer than the window the pairs grow with the square of its rows (20 000 trades in
20 s of event time are 4 * 10**8 candidate pairs under hedge's 30 s window). ``stretch
generate`` estimates, for the catalog join a generated stream feeds, the comparisons it
costs and the rows it writes, warns above :data:`WARN_PAIRS` or :data:`WARN_COMPARISONS`
and refuses above :data:`REFUSE_PAIRS` or :data:`REFUSE_COMPARISONS` unless forced.

* Comparisons are counted exactly from the ``ts`` columns (a ``searchsorted`` per row),
  a chunk at a time, so a stream of any length is estimated in bounded memory.
* ``scalejoin``'s match rate is exact for its uniform columns (section 8.3).
* ``hedge``'s is measured on a fixed sample of the candidate pairs within each chunk (its
  prices follow slow random walks, so no closed form holds) and applied to the chunk's
  exact comparisons. A chunk of ``stretch generate`` (2**20 trades: over two minutes even
  at hedge's peak rate) is several times longer than hedge's default window, so its own
  pairs stand for those across its edges (measured on 30 000 trades, WS 10 s, two seeds,
  against the exact count: 0.98x and 0.99x with one chunk, 0.99x with chunks twice the
  window long; 0.80x-1.00x with chunks half the window, 1.04x-1.21x with a fifth).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from stretch.generate import VALUE_HIGH, VALUE_LOW

__all__ = [
    "REFUSE_COMPARISONS",
    "REFUSE_PAIRS",
    "WARN_COMPARISONS",
    "WARN_PAIRS",
    "Chunks",
    "JoinEstimate",
    "estimate_chunks",
    "estimate_join",
]

WARN_PAIRS = 1_000_000
"""Output rows above which ``stretch generate`` warns (about 40 MB of CSV, seconds to write)."""

WARN_COMPARISONS = 10**10
"""Compared pairs above which it warns (several seconds of a compiled kernel per core)."""

REFUSE_PAIRS = 100 * WARN_PAIRS
"""Output rows above which it refuses unless ``--force`` (gigabytes, minutes)."""

REFUSE_COMPARISONS = 100 * WARN_COMPARISONS
"""Compared pairs above which it refuses unless ``--force`` (minutes to hours)."""

DEFAULT_WS_MS = {"scalejoin": 300_000, "hedge": 30_000}
"""The catalog's default WS of each join a generator feeds (docs/design.md)."""

_SAMPLE_PAIRS = 200_000
_SAMPLE_SEED = 0
_BAND = 10  # scalejoin: abs(x - a) <= 10 and abs(y - b) <= 10


@dataclass(frozen=True, slots=True)
class JoinEstimate:
    """The cost of a catalog join over generated streams.

    Attributes:
        operator: The join (``scalejoin`` or ``hedge``).
        ws_ms: The window it was estimated for.
        comparisons: Pairs of tuples within ``ws_ms`` of each other (exact).
        pairs: Expected output rows (estimated).

    """

    operator: str
    ws_ms: int
    comparisons: int
    pairs: int

    @property
    def explodes(self) -> bool:
        """Whether the join's output or work is past the warning bounds."""
        return self.pairs > WARN_PAIRS or self.comparisons > WARN_COMPARISONS

    @property
    def refused(self) -> bool:
        """Whether it is past the bounds where ``stretch generate`` needs ``--force``."""
        return self.pairs > REFUSE_PAIRS or self.comparisons > REFUSE_COMPARISONS

    def describe(self, rows: int, rate: float) -> str:
        """One line: what the join will cost over ``rows`` rows at ``rate`` and what to do."""
        return (
            f"'{self.operator}' over these {rows} rows at {rate:g} rows/s compares about "
            f"{self.comparisons:.2g} pairs and writes about {self.pairs:,} rows at its "
            f"default ws={self.ws_ms} (each row meets every row within ws of it: rows "
            f"squared until the stream spans more than ws); lower --rows or --rate, or "
            f"replay with a smaller --param ws"
        )


def estimate_join(operator: str, tables: list[pa.Table], ws_ms: int | None = None) -> JoinEstimate:
    """Estimate what ``operator`` costs over ``tables`` (a generator's output).

    Args:
        operator: ``scalejoin`` (tables L, R) or ``hedge`` (one table, fed as L and R).
        tables: The generated streams, sorted by ``ts``.
        ws_ms: The join's window; the catalog default when None.

    Returns:
        The exact comparisons and the expected output rows. O(rows log rows).

    Raises:
        ValueError: ``operator`` is not a join a generator feeds.

    """
    return estimate_chunks(operator, lambda *, ts_only: iter([tables]), ws_ms)


class Chunks(Protocol):
    """Makes generated streams from their start, a chunk (one table per stream) at a time."""

    def __call__(self, *, ts_only: bool) -> Iterator[list[pa.Table]]:
        """With ``ts_only`` the tables may hold only their ``ts`` column."""
        ...


def estimate_chunks(operator: str, chunks: Chunks, ws_ms: int | None = None) -> JoinEstimate:
    """:func:`estimate_join` over streams made a chunk at a time, in bounded memory.

    Args:
        operator: As for :func:`estimate_join`.
        chunks: Makes the streams; called three times: the left side (whole for hedge,
            whose match rate is sampled within each chunk), and the right side's ``ts``
            twice, behind and ahead of the left by the window.
        ws_ms: The join's window; the catalog default when None.

    Returns:
        As :func:`estimate_join` (the same figures when there is one chunk); memory is
        that of a few chunks whatever the rows.

    Raises:
        ValueError: ``operator`` is not a join a generator feeds.

    """
    if operator not in DEFAULT_WS_MS:
        msg = f"no join estimate for {operator!r}; known: {', '.join(sorted(DEFAULT_WS_MS))}"
        raise ValueError(msg)
    ws = DEFAULT_WS_MS[operator] if ws_ms is None else ws_ms
    scalejoin = operator == "scalejoin"
    right = 1 if scalejoin else 0

    def ts_of(stream: int) -> Iterator[NDArray[np.int64]]:
        return (chunk[stream]["ts"].to_numpy() for chunk in chunks(ts_only=True))

    up_to, below = _Rank(ts_of(right), "right"), _Rank(ts_of(right), "left")
    comparisons, matched = 0, 0.0
    for chunk in chunks(ts_only=scalejoin):
        ts = chunk[0]["ts"].to_numpy()
        pairs = int(up_to.count(ts + ws).sum()) - int(below.count(ts - ws).sum())
        comparisons += pairs
        if not scalejoin:  # hedge: the chunk's pairs at the share of its own pairs that match
            matched += pairs * _hedge_match_rate(chunk[0], ws)
    if scalejoin:
        matched = comparisons * _scalejoin_match_rate()
    return JoinEstimate(operator, ws, comparisons, round(matched))


class _Rank:
    """How many values of a sorted stream lie up to (``right``) or below (``left``) each query.

    Queries come in non-decreasing order, as arrays. The stream is read a chunk at a time
    and a chunk is let go once every later query counts all of it, so one chunk is held
    however far ahead of the last one the queries reach.
    """

    def __init__(self, chunks: Iterator[NDArray[np.int64]], side: Literal["left", "right"]) -> None:
        self._chunks = chunks
        self._side: Literal["left", "right"] = side
        self._held: NDArray[np.int64] | None = None  # the chunk the last query ended in
        self._passed = 0  # values let go: counted by every query from here on

    def count(self, queries: NDArray[np.int64]) -> NDArray[np.int64]:
        """The counts for ``queries`` (none below an earlier call's last query)."""
        counts = np.full(len(queries), self._passed, dtype=np.int64)
        if not len(queries):
            return counts
        while True:
            if self._held is None:
                self._held = next(self._chunks, None)
                if self._held is None:
                    return counts
            held = self._held
            counts += np.searchsorted(held, queries, side=self._side)
            counted = int(np.searchsorted(held, queries[-1], side=self._side))
            self._passed += counted
            if counted < len(held):
                self._held = held[counted:]
                return counts
            self._held = None


def _scalejoin_match_rate() -> float:
    """P(abs(x - a) <= 10 and abs(y - b) <= 10) for section 8.3's uniform columns."""
    n = VALUE_HIGH - VALUE_LOW + 1  # x, a: integers in [low, high]
    p_int = (n * (2 * _BAND + 1) - _BAND * (_BAND + 1)) / n**2
    width = float(VALUE_HIGH - VALUE_LOW)  # y, b: floats in [low, high)
    p_float = 1.0 - (1.0 - _BAND / width) ** 2
    return p_int * p_float


def _hedge_match_rate(trades: pa.Table, ws_ms: int) -> float:
    """The share of the candidate (L, R) pairs among ``trades`` that hedge's predicate keeps.

    Measured on a fixed sample: L uniform among the rows, R uniform among L's candidates
    within ``trades``, each pair weighted by L's candidates (so the share is that of the
    pairs, as if L were drawn in proportion to them). O(sample log rows): only the
    sampled rows are looked up.
    """
    ts: NDArray[np.int64] = trades["ts"].to_numpy()
    if not len(ts):
        return 0.0
    rng = np.random.Generator(np.random.PCG64(_SAMPLE_SEED))
    first = np.sort(rng.integers(0, len(ts), _SAMPLE_PAIRS))
    low = np.searchsorted(ts, ts[first] - ws_ms, side="left")
    window = np.searchsorted(ts, ts[first] + ws_ms, side="right") - low
    second = low + (rng.random(_SAMPLE_PAIRS) * window).astype(np.intp)
    symbol = trades["symbol"]
    other = pc.not_equal(symbol.take(first), symbol.take(second)).to_numpy()
    price: NDArray[np.float64] = trades["price"].to_numpy()
    avg: NDArray[np.float64] = trades["avg_price"].to_numpy()
    nd_left = (price[first] - avg[first]) / avg[first]
    nd_right = (price[second] - avg[second]) / avg[second]
    defined = other & (nd_left != 0)
    ratio = np.divide(nd_right, nd_left, out=np.zeros_like(nd_right), where=defined)
    matched = defined & (ratio >= -1.05) & (ratio <= -0.95)
    return float(window[matched].sum() / window.sum())
