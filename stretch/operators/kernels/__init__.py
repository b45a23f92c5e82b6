"""Compiled kernels of the catalog operators, and the specs by which an operator names one.

The hot loops are Numba functions over arrays, private to this package: ``_band_join``
(Operator 10 with a predicate written in), ``_predicate_join`` (the same loop around a
user's ``@numba.njit`` predicate, compiled once per process), ``_aggregate`` and
``_hashing`` (the windowed counts and maxima of Operators 9 and 14). An operator declares
the kernel it runs by setting ``OPlus.kernel`` to one of the specs below, next to its
Python definition in the catalog; the VSN runtime (``stretch.vsn._compiled``) maps each
spec to the code that drives the kernel over a run of ready tuples. This package does not
know the runtime: it owns what is computed, not how instances share the work.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from stretch.model.oplus import KernelSpec
from stretch.operators.kernels._band_index import hedge_indexed_run, scalejoin_indexed_run
from stretch.operators.kernels._band_join import hedge_run, scalejoin_run

__all__ = [
    "HEDGE",
    "SCALEJOIN",
    "AggregateSpec",
    "Band",
    "BandJoin",
    "BandJoinSpec",
    "ForwardSpec",
]

BandKey = Callable[..., NDArray[np.float64]]
"""A band's key of one side: ``key(side, *columns)``, vectorized over NumPy columns."""


@dataclass(frozen=True)
class Band:
    """What bounds a band join's matches, for its index (``_band_index``).

    Every pair the join's predicate accepts (or raises on) has ``|key_L - key_R| <=
    width``; the predicate still decides each pair the index finds, so the band may be
    looser than the predicate (a superset) but never tighter. A key that is not finite
    (NaN, infinite) is allowed: such a tuple is compared with every tuple of the window.

    Attributes:
        width: The band's width, finite and positive.
        left: The columns the key reads of L.
        right: The columns the key reads of R.
        key: ``key(side, *columns) -> float64 array`` (side 0 = L, 1 = R), or None when
            each side reads one numeric column and the key is its value.

    """

    width: float
    left: tuple[str, ...]
    right: tuple[str, ...]
    key: BandKey | None = None

    def __post_init__(self) -> None:
        """Check the width and that a plain band reads one column a side."""
        if not (math.isfinite(self.width) and self.width > 0):
            msg = f"a band's width must be finite and positive, got {self.width!r}"
            raise ValueError(msg)
        if self.key is None and (len(self.left) != 1 or len(self.right) != 1):
            msg = f"a band without a key function reads one column a side, got {self.reads}"
            raise ValueError(msg)

    @property
    def reads(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The columns the key reads of L and of R."""
        return self.left, self.right

    def keys(self, side: int, columns: tuple[NDArray[Any], ...]) -> NDArray[np.float64]:
        """The keys of one side's tuples, given the columns ``reads`` names of that side."""
        if self.key is None:
            return np.asarray(columns[0], dtype=np.float64)
        return np.asarray(self.key(side, *columns), dtype=np.float64)


@dataclass(frozen=True)
class BandJoin:
    """A band join's compiled predicate and the columns it reads and emits.

    Attributes:
        run: The kernel entry point with the join's predicate (``_band_join``).
        reads: The columns the predicate reads of L and of R, in the order it takes them.
        payload: The output payload's columns, each as (side: 0 = L, 1 = R, column).
        band: The band bounding the matches, or None: every probe scans its window
            (the nested loop).
        indexed: The entry point of the same predicate through the band's index
            (``_band_index``); used when ``band`` is set.

    """

    run: Callable[..., int]
    reads: tuple[tuple[str, ...], tuple[str, ...]]
    payload: tuple[tuple[int, str], ...]
    band: Band | None = None
    indexed: Callable[..., int] | None = None


HEDGE_SIGN_OFFSET = 4096.0
"""Added to the key of L trades with ND > 0 and of R trades with ND < 0 (log|ND| of a
double lies within +-745), so only opposite deviations meet within a band."""
HEDGE_BAND = 0.06
"""``-1.05 <= ND_R / ND_L <= -0.95`` bounds ``log|ND_R| - log|ND_L|`` by ``-log 0.95``
(0.0513) either way; 0.06 leaves room for rounding of the ratio and the logarithms."""


def _hedge_key(side: int, price: NDArray[Any], avg_price: NDArray[Any]) -> NDArray[np.float64]:
    """hedge's band key: ``log|ND|``, moved by ``HEDGE_SIGN_OFFSET`` by the sign of ND.

    ND is computed as the predicate computes it, so a pair within [-1.05, -0.95] has
    keys within ``HEDGE_BAND``. ND = 0, a zero ``avg_price`` or a NaN give a key that is
    not finite, and the tuple is compared with every tuple (as the reference compares it).
    """
    with np.errstate(all="ignore"):
        nd = (price - avg_price) / avg_price
        key = np.log(np.abs(nd))
    moved = nd > 0 if side == 0 else nd < 0
    return np.asarray(key + HEDGE_SIGN_OFFSET * moved, dtype=np.float64)


SCALEJOIN = BandJoin(
    scalejoin_run,
    (("x", "y"), ("a", "b")),
    ((0, "x"), (0, "y"), (1, "a"), (1, "b"), (1, "c"), (1, "d")),
    band=Band(10.0, ("x",), ("a",)),
    indexed=scalejoin_indexed_run,
)
"""scalejoin's predicate: L (x, y), R (a, b, c, d); indexed on ``|x - a| <= 10``."""

HEDGE = BandJoin(
    hedge_run,
    (("symbol", "price", "avg_price"),) * 2,
    ((0, "symbol"), (0, "price"), (1, "symbol"), (1, "price")),
    band=Band(HEDGE_BAND, ("price", "avg_price"), ("price", "avg_price"), _hedge_key),
    indexed=hedge_indexed_run,
)
"""hedge's predicate: trades (symbol, price, avg_price) on both sides; indexed on the
logarithm of |ND|, split by sign (``_hedge_key``)."""


@dataclass(frozen=True)
class ForwardSpec(KernelSpec):
    """Operator 15: each tuple once, owned by key ``seq % keys``."""

    keys: int


@dataclass(frozen=True)
class BandJoinSpec(KernelSpec):
    """Operator 10 over ``keys`` keys with a compiled predicate.

    ``by_band``: each tuple is stored by the key of its band's block (``store_keys``),
    not round robin; the join then has a band (``join.band``).
    """

    keys: int
    join: BandJoin
    by_band: bool = False


@dataclass(frozen=True)
class AggregateSpec(KernelSpec):
    """A windowed count (Operator 14) or maximum of tweet lengths (Operator 9) per key.

    Attributes:
        keys: f_MK: the distinct ``"words"``, ``"hashtags"`` or word ``"pairs"`` of a tweet.
        b: For pairs, the largest distance of a pair's words.
        take_max: Keep the largest tweet length (Operator 9) instead of counting.
        combine: How two partial values of one key combine, when that is associative:
            ``"sum"`` for counts, ``"max"`` for maxima (it must agree with ``take_max``).
            Declared, the runtime keeps one partial value per key per pane of
            gcd(WA, WS) ms and combines a window's panes when it closes (Enorm's panes),
            so a tuple is folded once instead of WS / WA times; None keeps one table per
            window.

    """

    keys: Literal["words", "hashtags", "pairs"]
    b: int = 0
    take_max: bool = False
    combine: Literal["sum", "max"] | None = None

    def __post_init__(self) -> None:
        if self.combine is not None and (self.combine == "max") != self.take_max:
            kept = "maxima" if self.take_max else "counts"
            msg = f"an aggregate of {kept} cannot combine its panes by {self.combine!r}"
            raise ValueError(msg)
