"""An instance takes longer runs of cheap tuples; the output never depends on run lengths."""

from __future__ import annotations

import pytest

from stretch.generate import scalejoin, tweets
from stretch.model.sn import run_sn
from stretch.operators.catalog import build
from stretch.vsn import _instance
from stretch.vsn._instance import MAX_RUN, MIN_RUN, RUN_TARGET_NS, _next_run_limit
from tests.vsn.support import no_thread_leak, run_schedule

__all__ = ["no_thread_leak"]


def test_cheap_runs_grow_to_the_most_and_expensive_ones_stay_at_the_least() -> None:
    assert _next_run_limit(MIN_RUN, RUN_TARGET_NS // 100) == MAX_RUN
    assert _next_run_limit(MIN_RUN, RUN_TARGET_NS * 10) == MIN_RUN
    # between the bounds: the tuples that take RUN_TARGET_NS at the last run's pace
    assert _next_run_limit(1000, RUN_TARGET_NS // 10) == 10_000
    assert _next_run_limit(5, 0) == MAX_RUN  # a run too short to time


@pytest.mark.parametrize(("least", "most"), [(1, 1), (3, 50), (MIN_RUN, MAX_RUN)])
@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("scalejoin", {"ws": 300, "keys": 4}),
        ("scalejoin", {"ws": 300, "keys": 4, "index": "off"}),
        ("forward", {"columns": "x:int,y:float"}),
        ("wordcount", {"ws": 200, "wa": 50}),
    ],
)
def test_the_output_is_the_references_whatever_the_run_lengths(
    monkeypatch: pytest.MonkeyPatch, least: int, most: int, name: str, params: dict[str, object]
) -> None:
    monkeypatch.setattr(_instance, "MIN_RUN", least)
    monkeypatch.setattr(_instance, "MAX_RUN", most)
    op = build(name, params)
    if name == "wordcount":
        tables = tweets(3000, 1000.0, seed=5)
    else:
        left, right = scalejoin(3000, 1000.0, 5)
        tables = [left, right] if name == "scalejoin" else [left, left.slice(0, 2000)]
    expected = run_sn(op, tables)
    schedule = [(800, 3, None), (1600, 1, None), (2400, 2, None)]
    out, _ = run_schedule(op, tables, 2, 3, schedule)
    assert out.equals(expected)
