"""hedge's vectorized candidate test keeps every pair its exact predicate accepts.

The kernel scans only blocks holding a candidate, so a pair the candidate test missed
would be a lost match. Floats here include zero averages (no ND: never a match),
infinities, NaN, subnormals and values whose products overflow.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray

from stretch.operators.kernels._band_join import _hedge_candidate, _hedge_match

ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)
PRICE = st.one_of(ANY_FLOAT, st.floats(0.5, 2000.0), st.just(0.0))


def side(symbol: int, price: float, avg_price: float) -> tuple[NDArray[Any], ...]:
    return (
        np.array([symbol], dtype=np.int64),
        np.array([price], dtype=np.float64),
        np.array([avg_price], dtype=np.float64),
    )


@given(
    symbols=st.tuples(st.integers(0, 2), st.integers(0, 2)),
    left=st.tuples(PRICE, PRICE),
    right=st.tuples(PRICE, PRICE),
)
def test_candidate_holds_wherever_the_predicate_does(
    symbols: tuple[int, int], left: tuple[float, float], right: tuple[float, float]
) -> None:
    l_cols, r_cols = side(symbols[0], *left), side(symbols[1], *right)
    matched = _hedge_match(l_cols, 0, r_cols, 0)  # never raises, a zero average included
    assert _hedge_candidate(l_cols, 0, r_cols, 0) or not matched, "a match was not a candidate"
    if left[1] == 0 or right[1] == 0:
        assert not matched, "a trade with no average (no ND) matched"


@given(
    avg=st.tuples(st.floats(0.5, 2000.0), st.floats(0.5, 2000.0)),
    deviation=st.floats(1e-6, 0.2),
    ratio=st.floats(-1.0499, -0.9501),
)
def test_candidate_holds_for_matches_up_to_the_band_edges(
    avg: tuple[float, float], deviation: float, ratio: float
) -> None:
    """Pairs built to match, with ratios to within 1e-4 of the band's edges."""
    l_cols = side(0, avg[0] * (1 + deviation), avg[0])
    r_cols = side(1, avg[1] * (1 + ratio * deviation), avg[1])
    assert _hedge_match(l_cols, 0, r_cols, 0)
    assert _hedge_candidate(l_cols, 0, r_cols, 0)
