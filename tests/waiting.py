"""Bounded waits on a condition, for tests that watch threads they do not control."""

from __future__ import annotations

import threading
from collections.abc import Callable

TIMEOUT_S = 60.0


def wait_until(condition: Callable[[], bool], timeout_s: float = TIMEOUT_S) -> bool:
    """Poll ``condition`` every 10 ms until it holds or ``timeout_s`` passed; return it."""
    tick = threading.Event()
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return True
        tick.wait(0.01)
    return condition()
