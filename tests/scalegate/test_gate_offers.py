"""Adds that never wait (offer_*) and waits that stop (issue 10, class 1)."""

from __future__ import annotations

import numpy as np
import pytest

from scalegate import ElasticScaleGate
from stretch.errors import StoppedError


def _gate() -> ElasticScaleGate:
    """Two sources, one reader; source 1 stays behind, so source 0 fills half the gate."""
    gate = ElasticScaleGate(sources=[0, 1], readers=[0], capacity=64, max_sources=2)
    gate.add_tuple(1, 0)
    return gate


def test_offer_batch_adds_the_prefix_that_fits_and_never_waits() -> None:
    gate = _gate()
    ts = np.arange(1, 101, dtype=np.int64)
    added = gate.offer_batch(0, ts, ts)
    assert 0 < added < 100
    for _ in range(4):  # flow control settles within a node or two
        added += gate.offer_batch(0, ts[added:], ts[added:])
    assert added < 100
    assert gate.offer_batch(0, ts[added:], ts[added:]) == 0
    assert not gate.offer_control(0, 7)
    assert not gate.offer_watermark(0, 1000)
    assert gate.offer_control(1, 7)  # the source that holds back readiness still fits
    gate._check()


def test_a_blocked_add_gives_up_when_told_to_stop() -> None:
    gate = _gate()
    ts = np.arange(1, 101, dtype=np.int64)
    calls: list[int] = []

    def stop() -> bool:
        calls.append(1)
        return len(calls) > 3

    with pytest.raises(StoppedError, match="stopped while waiting for room"):
        gate.add_batch(0, ts, ts, stop)
    with pytest.raises(StoppedError):
        gate.add_watermark(0, 1000, lambda: True)
    assert len(calls) == 4
