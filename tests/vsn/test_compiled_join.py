"""stretch.band_join: a user's @njit predicate on the compiled kernel equals run_sn of a twin."""

from __future__ import annotations

import importlib.metadata
from dataclasses import replace
from pathlib import Path

import numba
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stretch
from stretch.errors import OperatorError
from stretch.model.oplus import Payload, StreamTuple
from stretch.model.schema import Schema
from stretch.model.sn import run_sn
from stretch.operators import joins
from stretch.operators.catalog import CATALOG, ENTRY_POINT_GROUP, TRADES, build, load_operators
from stretch.operators.kernels._band_join import STORE_FULL
from stretch.vsn._compiled import band_join as compiled_band_join
from stretch.vsn._compiled.band_join import BandJoinKernel
from tests.streams import scalejoin_streams, trades
from tests.vsn.support import run_schedule

LEFT = Schema.of(x="int", y="float")
RIGHT = Schema.of(a="int", b="float", c="float", d="bool")
WS = 40


@numba.njit
def near(x: int, y: float, a: int, b: float) -> bool:
    return abs(x - a) <= 3 and abs(y - b) <= 4.5


def near_twin(left: StreamTuple, right: StreamTuple) -> Payload | None:
    if abs(left["x"] - right["a"]) <= 3 and abs(left["y"] - right["b"]) <= 4.5:
        return (right["b"], left["x"], right["d"])
    return None


def near_join(keys: int = 4) -> stretch.OPlus:
    return stretch.band_join(
        "near",
        WS,
        left=LEFT,
        right=RIGHT,
        predicate=near,
        reads=(("x", "y"), ("a", "b")),
        output={"b": "right.b", "x": "left.x", "d": "right.d"},
        keys=keys,
    )


def near_reference(tables: list[pa.Table], keys: int = 4) -> pa.Table:
    output = Schema.of(b="float", x="int", d="bool")
    twin = joins.band_join("near", 1, WS, (LEFT, RIGHT), output, near_twin, keys)
    return run_sn(twin, tables)


@settings(max_examples=15, deadline=None)
@given(tables=scalejoin_streams(), m=st.integers(1, 4))
def test_user_predicate_equals_python_twin(tables: list[pa.Table], m: int) -> None:
    out, pipeline = run_schedule(near_join(), tables, m, 4, [])
    assert isinstance(pipeline._pool.compiled, BandJoinKernel)
    assert out.equals(near_reference(tables))


@numba.njit
def different_symbols_cheaper(symbol_l: int, price_l: float, symbol_r: int, price_r: float) -> bool:
    return symbol_l != symbol_r and price_r < price_l


@settings(max_examples=10, deadline=None)
@given(table=trades(), m=st.integers(1, 3))
def test_string_columns_compare_as_codes(table: pa.Table, m: int) -> None:
    op = stretch.band_join(
        "cheaper",
        30,
        left=TRADES,
        right=TRADES,
        predicate=different_symbols_cheaper,
        reads=(("symbol", "price"), ("symbol", "price")),
        output={"l_symbol": "left.symbol", "r_symbol": "right.symbol", "r_price": "right.price"},
        keys=3,
    )

    def twin(left: StreamTuple, right: StreamTuple) -> Payload | None:
        if left["symbol"] != right["symbol"] and right["price"] < left["price"]:
            return (left["symbol"], right["symbol"], right["price"])
        return None

    reference = joins.band_join("cheaper", 1, 30, (TRADES, TRADES), op.output, twin, 3)
    out, _ = run_schedule(op, [table, table], m, 3, [])
    assert out.equals(run_sn(reference, [table, table]))


def test_kernel_compiled_once_per_predicate() -> None:
    first, second = near_join(), near_join(keys=8)
    assert first.kernel is not None and second.kernel is not None
    run = first.kernel.join.run  # type: ignore[attr-defined]
    assert second.kernel.join.run is run  # type: ignore[attr-defined]
    tables = [
        LEFT.table([0, 5, 9], [(1, 1.0), (2, 2.0), (20, 3.0)]),
        RIGHT.table([1, 6], [(2, 1.5, 0.0, True), (21, 9.0, 0.0, False)]),
    ]
    for op in (first, second):
        out, _ = run_schedule(op, tables, 2, 2, [])
        assert out.equals(near_reference(tables, keys=op.kernel.keys))  # type: ignore[union-attr]
    assert len(run.signatures) == 1


@settings(max_examples=10, deadline=None)
@given(tables=scalejoin_streams(), m=st.integers(1, 3))
def test_stores_compacted_and_grown(tables: list[pa.Table], m: int) -> None:
    """With one-tuple stores the kernel stops on full stores and the slabs compact often."""
    op = build("scalejoin", {"ws": 25, "keys": 2})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compiled_band_join, "MIN_CAPACITY", 1)
        out, _ = run_schedule(op, tables, m, 3, [(10, 3, None), (30, 1, None)])
    assert out.equals(run_sn(op, tables))


def test_predicate_must_be_compiled() -> None:
    with pytest.raises(OperatorError, match="@numba.njit"):
        stretch.band_join(
            "slow", 10, left=LEFT, right=RIGHT, predicate=near.py_func, output={"x": "left.x"}
        )
    with pytest.raises(OperatorError, match="ws must be >= 0 ms, got -1"):
        stretch.band_join(
            "back", -1, left=LEFT, right=RIGHT, predicate=near, output={"x": "left.x"}
        )
    with pytest.raises(ValueError, match="parallelism must be >= 1, got 0"):
        stretch.run_sn(stretch.build("scalejoin", {}), [], parallelism=0)


@pytest.mark.parametrize(
    ("reads", "output", "message"),
    [
        (None, {"x": "left.z"}, "output column 'x' = 'left.z'"),
        (None, {"x": "middle.x"}, "output column 'x' = 'middle.x'"),
        ((("x",), ("q",)), {"x": "left.x"}, "reads \\['q'\\] of right"),
        (None, {"x": "left.x", "ts": "right.a"}, "output column 'ts' is the event time"),
    ],
)
def test_bad_columns_are_named(
    reads: tuple[tuple[str, ...], tuple[str, ...]] | None, output: dict[str, str], message: str
) -> None:
    with pytest.raises(OperatorError, match=message):
        stretch.band_join(
            "bad", 10, left=LEFT, right=RIGHT, predicate=near, reads=reads, output=output
        )


def test_operators_load_from_modules_and_entry_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "user_joins.py").write_text(
        "import numba, stretch\n"
        "@numba.njit\n"
        "def close(x, a):\n"
        "    return abs(x - a) <= 1\n"
        "L = stretch.Schema.of(x='int')\n"
        "R = stretch.Schema.of(a='int')\n"
        "def factory(params):\n"
        "    return stretch.band_join('close', int(params.get('ws', 5)), left=L, right=R,\n"
        "                             predicate=close, output={'x': 'left.x', 'a': 'right.a'})\n"
        "stretch.register('user_close', factory)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = importlib.metadata.EntryPoint("entry_close", "user_joins:factory", ENTRY_POINT_GROUP)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [entry])
    monkeypatch.delitem(CATALOG, "user_close", raising=False)
    monkeypatch.delitem(CATALOG, "entry_close", raising=False)
    try:
        assert load_operators(["user_joins"]) == ["user_close", "entry_close"]
        assert load_operators() == []  # the entry point is loaded once
        for name in ("user_close", "entry_close"):
            op = build(name, {})
            assert isinstance(BandJoinKernel(op, 16, op.kernel.join), BandJoinKernel)  # type: ignore[union-attr]
    finally:
        CATALOG.pop("user_close", None)
        CATALOG.pop("entry_close", None)


def test_unknown_module_is_an_operator_error() -> None:
    with pytest.raises(OperatorError, match="no_such_module_of_operators"):
        load_operators(["no_such_module_of_operators"])


def test_full_store_stops_the_kernel_and_grows() -> None:
    """A store without room makes the kernel stop (STORE_FULL) and go on once it grew.

    The round robin by sequence number fills each key's store evenly, so the room reserved
    per run always suffices; here the first reservation of each run is skipped to take
    the path that grows a full store.
    """
    op = build("scalejoin", {"ws": 10, "keys": 3, "index": "off"})  # the nested loop's run
    assert op.kernel is not None
    join = op.kernel.join  # type: ignore[attr-defined]
    statuses: list[int] = []

    def spy(*args: object) -> int:
        status: int = join.run(*args)
        statuses.append(status)
        return status

    op = replace(op, kernel=replace(op.kernel, join=replace(join, run=spy)))
    ts = list(range(0, 6000, 100))
    left = LEFT.table(ts, [(k % 7, float(k % 5)) for k in range(len(ts))])
    right = RIGHT.table([ts[-1] + 5], [(len(ts) % 7 - 1, 4.0, 0.0, True)])
    reserve = compiled_band_join._Slab.reserve
    skipped: list[int] = []

    def reserve_late(
        slab: compiled_band_join._Slab, extra: int, keep: bool | None = None
    ) -> compiled_band_join._Slab:
        if len(skipped) < len(statuses) + 1 and extra < 2 * (len(ts) // 3 + 2):
            skipped.append(extra)  # the run's first reservation: none
            return slab
        return reserve(slab, extra, keep)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compiled_band_join, "MIN_CAPACITY", 1)
        patch.setattr(compiled_band_join._Slab, "reserve", reserve_late)
        out, _ = run_schedule(op, [left, right], 1, 1, [])
    assert STORE_FULL in statuses
    assert out.num_rows > 0
    assert out.equals(run_sn(op, [left, right]))
