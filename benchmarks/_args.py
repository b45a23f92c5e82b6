"""Arguments of the benchmark scripts: a bad value exits 2 with one line naming it, and
usage and errors name the command the user typed."""

from __future__ import annotations

import argparse
import math
import os

__all__ = [
    "PROG_ENV",
    "non_negative_float",
    "non_negative_int",
    "positive_float",
    "positive_int",
    "prog",
]

PROG_ENV = "STRETCH_BENCH_PROG"
"""The variable ``stretch bench NAME`` sets to its own command line's start."""


def prog() -> str | None:
    """The program name for argparse: ``stretch bench NAME`` when run by it, else None
    (argparse's default, the script's file name)."""
    return os.environ.get(PROG_ENV)


def _number(text: str, kind: type[int] | type[float], *, zero: bool) -> float:
    """``text`` as a ``kind``, finite and > 0 (>= 0 with ``zero``)."""
    bound = ">= 0" if zero else "> 0"
    noun = "an integer" if kind is int else "a finite number"
    try:
        value = kind(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        msg = f"must be {noun} {bound}, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def positive_int(text: str) -> int:
    """An integer > 0 (counts, sizes, rates, durations)."""
    return int(_number(text, int, zero=False))


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    return int(_number(text, int, zero=True))


def positive_float(text: str) -> float:
    """A finite number > 0."""
    return _number(text, float, zero=False)


def non_negative_float(text: str) -> float:
    """A finite number >= 0."""
    return _number(text, float, zero=True)
