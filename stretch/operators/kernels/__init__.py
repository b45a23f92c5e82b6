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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from stretch.model.oplus import KernelSpec
from stretch.operators.kernels._band_join import hedge_run, scalejoin_run

__all__ = ["HEDGE", "SCALEJOIN", "AggregateSpec", "BandJoin", "BandJoinSpec", "ForwardSpec"]


@dataclass(frozen=True)
class BandJoin:
    """A band join's compiled predicate and the columns it reads and emits.

    Attributes:
        run: The kernel entry point with the join's predicate (``_band_join``).
        reads: The columns the predicate reads of L and of R, in the order it takes them.
        payload: The output payload's columns, each as (side: 0 = L, 1 = R, column).

    """

    run: Callable[..., int]
    reads: tuple[tuple[str, ...], tuple[str, ...]]
    payload: tuple[tuple[int, str], ...]


SCALEJOIN = BandJoin(
    scalejoin_run,
    (("x", "y"), ("a", "b")),
    ((0, "x"), (0, "y"), (1, "a"), (1, "b"), (1, "c"), (1, "d")),
)
"""scalejoin's predicate: L (x, y), R (a, b, c, d)."""

HEDGE = BandJoin(
    hedge_run,
    (("symbol", "price", "avg_price"),) * 2,
    ((0, "symbol"), (0, "price"), (1, "symbol"), (1, "price")),
)
"""hedge's predicate: trades (symbol, price, avg_price) on both sides."""


@dataclass(frozen=True)
class ForwardSpec(KernelSpec):
    """Operator 15: each tuple once, owned by key ``seq % keys``."""

    keys: int


@dataclass(frozen=True)
class BandJoinSpec(KernelSpec):
    """Operator 10 over ``keys`` keys with a compiled predicate."""

    keys: int
    join: BandJoin


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
