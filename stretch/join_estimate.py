"""What joining generated streams will cost, told before the files are written.

A band join's output grows with the pairs of tuples that share a window: at a steady rate
``r`` and window ``WS`` every tuple meets about ``2 * r * WS`` others, so until the stream
is longer than the window the pairs grow with the square of its rows (20 000 trades in
20 s of event time are 4 * 10**8 candidate pairs under hedge's 30 s window). ``stretch
generate`` estimates, for the catalog join a generated stream feeds, the comparisons it
costs and the rows it writes, warns above :data:`WARN_PAIRS` or :data:`WARN_COMPARISONS`
and refuses above :data:`REFUSE_PAIRS` or :data:`REFUSE_COMPARISONS` unless forced.

* Comparisons are counted exactly from the ``ts`` columns (a ``searchsorted`` per row).
* ``scalejoin``'s match rate is exact for its uniform columns (section 8.3).
* ``hedge``'s is measured on a fixed sample of the candidate pairs (its prices follow
  slow random walks, so no closed form holds).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from stretch.generate import VALUE_HIGH, VALUE_LOW

__all__ = [
    "REFUSE_COMPARISONS",
    "REFUSE_PAIRS",
    "WARN_COMPARISONS",
    "WARN_PAIRS",
    "JoinEstimate",
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
    if operator not in DEFAULT_WS_MS:
        msg = f"no join estimate for {operator!r}; known: {', '.join(sorted(DEFAULT_WS_MS))}"
        raise ValueError(msg)
    ws = DEFAULT_WS_MS[operator] if ws_ms is None else ws_ms
    left = tables[0]
    right = tables[1] if operator == "scalejoin" else tables[0]
    ts_left: NDArray[np.int64] = left["ts"].to_numpy()
    ts_right: NDArray[np.int64] = right["ts"].to_numpy()
    low = np.searchsorted(ts_right, ts_left - ws, side="left")
    high = np.searchsorted(ts_right, ts_left + ws, side="right")
    window = high - low
    comparisons = int(window.sum())
    if operator == "scalejoin":
        rate = _scalejoin_match_rate()
    else:
        rate = _hedge_match_rate(left, low, window)
    return JoinEstimate(operator, ws, comparisons, round(comparisons * rate))


def _scalejoin_match_rate() -> float:
    """P(abs(x - a) <= 10 and abs(y - b) <= 10) for section 8.3's uniform columns."""
    n = VALUE_HIGH - VALUE_LOW + 1  # x, a: integers in [low, high]
    p_int = (n * (2 * _BAND + 1) - _BAND * (_BAND + 1)) / n**2
    width = float(VALUE_HIGH - VALUE_LOW)  # y, b: floats in [low, high)
    p_float = 1.0 - (1.0 - _BAND / width) ** 2
    return p_int * p_float


def _hedge_match_rate(trades: pa.Table, low: NDArray[np.intp], window: NDArray[np.intp]) -> float:
    """The share of candidate (L, R) pairs hedge's predicate keeps, on a fixed sample."""
    total = int(window.sum())
    if total == 0:
        return 0.0
    rng = np.random.Generator(np.random.PCG64(_SAMPLE_SEED))
    # A row is drawn as L in proportion to its candidates, its R uniformly among them.
    first = np.searchsorted(np.cumsum(window), rng.integers(0, total, _SAMPLE_PAIRS), "right")
    second = low[first] + (rng.random(_SAMPLE_PAIRS) * window[first]).astype(np.intp)
    symbol = trades["symbol"].combine_chunks().dictionary_encode().indices.to_numpy()
    price = trades["price"].to_numpy()
    avg = trades["avg_price"].to_numpy()
    nd = (price - avg) / avg
    nd_left, nd_right = nd[first], nd[second]
    defined = (symbol[first] != symbol[second]) & (nd_left != 0)
    ratio = np.divide(nd_right, nd_left, out=np.zeros_like(nd_right), where=defined)
    matched = defined & (ratio >= -1.05) & (ratio <= -0.95)
    return float(matched.mean())
