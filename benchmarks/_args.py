"""Argument types of the benchmark scripts: a bad value exits 2 with one line naming it."""

from __future__ import annotations

import argparse
import math

__all__ = ["non_negative_float", "non_negative_int", "positive_float", "positive_int"]


def _checked(value: float, text: str, *, zero: bool) -> None:
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        bound = ">= 0" if zero else "> 0"
        msg = f"must be {bound}, got {text!r}"
        raise argparse.ArgumentTypeError(msg)


def positive_int(text: str) -> int:
    """An integer > 0 (counts, sizes, rates, durations)."""
    value = int(text)
    _checked(value, text, zero=False)
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    value = int(text)
    _checked(value, text, zero=True)
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = float(text)
    _checked(value, text, zero=False)
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0."""
    value = float(text)
    _checked(value, text, zero=True)
    return value
