"""The vectorized candidate tests keep every pair their exact predicates accept.

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

from stretch.operators.kernels._band_join import (
    _hedge_candidate,
    _hedge_match,
    _scalejoin_candidate,
    _scalejoin_match,
)

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


INT64 = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**63), -(2**63) + 25),
    st.integers(2**63 - 26, 2**63 - 1),
    st.integers(-30, 30),
)


@given(x=INT64, a=INT64, y=st.floats(-20, 20), b=st.floats(-20, 20))
def test_scalejoin_candidate_holds_wherever_the_exact_predicate_does(
    x: int, a: int, y: float, b: float
) -> None:
    """Exact ``|x - a| <= 10`` over all of int64; the wrapping candidate a superset."""
    left = (np.array([x], dtype=np.int64), np.array([y]))
    right = (np.array([a], dtype=np.int64), np.array([b]))
    matched = _scalejoin_match(left, 0, right, 0)
    assert matched == (abs(x - a) <= 10 and abs(y - b) <= 10)
    assert _scalejoin_candidate(left, 0, right, 0) or not matched
