"""``stretch warm --operators``: a user's band join compiled ahead, from its schemas alone.

``warm_operators`` replays a registered operator on rows it generates; afterwards a run on
real data (a new process's entry points, made again from the module file) loads every
kernel it needs from Numba's cache and compiles none.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import stretch
from stretch.cli import main
from stretch.generate import scalejoin
from stretch.operators.catalog import CATALOG, build, load_operators
from stretch.operators.kernels import _predicate_join
from stretch.warm import warm_operators

MODULE = """
import numba
import stretch


@numba.njit
def close(x, y, a, b):
    return (abs(x - a) <= 20) & (abs(y - b) <= 20.0)


def factory(params):
    return stretch.band_join(
        "warm_close", int(params.get("ws", 1_000)),
        left=stretch.Schema.of(x="int", y="float"),
        right=stretch.Schema.of(a="int", b="float", c="float", d="bool"),
        predicate=close, reads=(("x", "y"), ("a", "b")),
        output={"x": "left.x", "a": "right.a"}, band=("x", "a", 20),
    )


stretch.register("warm_close", factory)
"""


@pytest.fixture
def registered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The operator of ``MODULE``, registered; its join's modules under ``tmp_path``."""
    monkeypatch.setattr(_predicate_join, "FOLDER", tmp_path / "cache")
    monkeypatch.setattr(_predicate_join, "_ENTRIES", {})
    (tmp_path / "warm_user_ops.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    names = load_operators(["warm_user_ops"])
    try:
        yield names
    finally:
        CATALOG.pop("warm_close", None)


def test_a_warmed_band_join_runs_real_data_without_compiling(
    registered: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert registered == ["warm_close"]
    said: list[str] = []
    assert warm_operators(main, said.append, registered, {"ws": "2000"}) == []
    assert len(said) == 3  # one batch, four batches, every band value equal
    assert "--param ws=2000" in said[0]
    assert "-skew-" in said[2]

    monkeypatch.setattr(_predicate_join, "_ENTRIES", {})  # as in a new process
    op = build("warm_close", {"ws": "2000"})
    left, right = scalejoin(400, 1000.0, 8)
    skewed = [_all(left, "x", 7), _all(right, "a", 7)]  # one band cell: the nested loop
    for tables in ([left, right], skewed):
        assert stretch.run_vsn(op, tables, parallelism=2).equals(stretch.run_sn(op, tables))
    predicate = sys.modules["warm_user_ops"].close
    for entry in (
        _predicate_join.predicate_run(predicate, 2, 2),
        _predicate_join.predicate_indexed_run(predicate, 2, 2),
    ):
        stats = entry.stats  # type: ignore[attr-defined]
        assert sum(stats.cache_hits.values()) > 0 and not stats.cache_misses, stats


def _all(table: pa.Table, column: str, value: int) -> pa.Table:
    index = table.schema.get_field_index(column)
    return table.set_column(index, column, pa.array([value] * table.num_rows, pa.int64()))
