"""The kernels' open-addressing hash index against a dict."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from stretch.operators.kernels._hashing import build_index, find, index_size, insert

KEYS = st.integers(-(2**62), 2**62)


@given(first=st.lists(KEYS, unique=True), later=st.lists(KEYS, unique=True), probes=st.lists(KEYS))
def test_find_agrees_with_a_dict(first: list[int], later: list[int], probes: list[int]) -> None:
    later = [k for k in later if k not in set(first)]
    keys = np.array(first + later, dtype=np.int64)
    slots = build_index(keys, len(first), index_size(len(keys)))
    insert(slots, keys, len(first), len(keys))
    model = {k: e for e, k in enumerate(keys.tolist())}
    for key in [*model, *probes]:
        found = find(slots, keys, key)
        if key in model:
            assert found == model[key]
        else:
            assert found < 0
            assert slots[-1 - found] == -1  # the empty slot a new key would take


def test_index_size_is_a_power_of_two_with_room() -> None:
    for n in (0, 1, 2, 31, 32, 33, 1000):
        size = index_size(n)
        assert size & (size - 1) == 0
        assert size >= 2 * n
