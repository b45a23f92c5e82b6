"""VSN output equals the SN reference for every catalog operator (docs/design.md decision 2)."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stretch
from stretch import generate
from stretch.model.oplus import OPlus
from stretch.model.sn import run_sn
from stretch.operators.catalog import TRADES, build
from stretch.vsn._compiled import compile_operator
from stretch.vsn._compiled.band_join import BandJoinKernel
from tests.streams import (
    AVG_PRICES,
    DEVIATIONS,
    forward_streams,
    scalejoin_streams,
    trades,
    tweets,
    typed_streams,
)
from tests.vsn.support import TIMEOUT_S, Step, no_thread_leak, run_schedule

__all__ = ["no_thread_leak"]

PARAMS = {
    "wordcount": {"wa": 10, "ws": 30},
    "paircount": {"wa": 10, "ws": 30, "b": 2},
    "longest_tweet": {"wa": 25, "ws": 100},
    "scalejoin": {"ws": 40, "keys": 4},
    "hedge": {"ws": 50, "keys": 3},
}
MAX_PARALLELISM = 4


def inputs_for(name: str) -> st.SearchStrategy[list[pa.Table]]:
    if name == "scalejoin":
        return scalejoin_streams()
    if name == "hedge":
        return trades().map(lambda t: [t, t])
    return tweets().map(lambda t: [t])


@st.composite
def schedules(draw: st.DrawFn, op: OPlus, tables: list[pa.Table]) -> list[Step]:
    """Provision, decommission and rebalance steps at event times within the input."""
    times = [t for table in tables for t in table.column("ts").to_pylist()] or [0]
    steps: list[Step] = []
    for _ in range(draw(st.integers(1, 4))):
        ts = draw(st.sampled_from(times))
        m = draw(st.integers(1, MAX_PARALLELISM))
        if draw(st.booleans()):
            mapping = draw(
                st.lists(st.integers(0, m - 1), min_size=op.key_groups, max_size=op.key_groups)
            )
            steps.append((ts, m, mapping))
        else:
            steps.append((ts, m, None))
        if draw(st.booleans()):  # issued while the previous one is still in flight
            steps.append((ts, draw(st.integers(1, MAX_PARALLELISM)), None))
    return steps


@pytest.mark.parametrize("name", sorted(PARAMS))
@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_vsn_equals_sn_static(name: str, data: st.DataObject) -> None:
    op = build(name, PARAMS[name])
    tables = data.draw(inputs_for(name))
    reference = run_sn(op, tables)
    for m in (1, 2, 3, 4):
        out, pipeline = run_schedule(op, tables, m, MAX_PARALLELISM, [])
        assert out.equals(reference), m
        assert pipeline._pool.audit is not None
        assert not pipeline._pool.audit.violations


@pytest.mark.parametrize("name", sorted(PARAMS))
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_vsn_equals_sn_with_reconfigurations(name: str, data: st.DataObject) -> None:
    op = build(name, PARAMS[name])
    tables = data.draw(inputs_for(name))
    schedule = data.draw(schedules(op, tables))
    m = data.draw(st.integers(1, MAX_PARALLELISM))
    out, pipeline = run_schedule(op, tables, m, MAX_PARALLELISM, schedule)
    assert out.equals(run_sn(op, tables))
    assert pipeline._pool.audit is not None
    assert not pipeline._pool.audit.violations


@settings(max_examples=10, deadline=None)
@given(tables=forward_streams(), data=st.data())
def test_forward_equals_sn(tables: list[pa.Table], data: st.DataObject) -> None:
    op = build("forward", {"columns": "v:int", "inputs": str(len(tables)), "keys": 8})
    schedule = data.draw(schedules(op, tables))
    out, _ = run_schedule(op, tables, data.draw(st.integers(1, 4)), 4, schedule)
    assert out.equals(run_sn(op, tables))


@settings(max_examples=6, deadline=None)
@given(tables=typed_streams(), data=st.data())
def test_forward_copies_every_column_type(tables: list[pa.Table], data: st.DataObject) -> None:
    op = build("forward", {"columns": "i:int,f:float,b:bool,s:str", "inputs": "2", "keys": 8})
    schedule = data.draw(schedules(op, tables))
    out, _ = run_schedule(op, tables, data.draw(st.integers(1, 4)), 4, schedule)
    assert out.equals(run_sn(op, tables))


@pytest.mark.parametrize("name", ["scalejoin", "hedge", "forward"])
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_generic_path_equals_compiled_path(name: str, data: st.DataObject) -> None:
    if name == "forward":
        tables = data.draw(forward_streams())
        op = build("forward", {"columns": "v:int", "inputs": str(len(tables)), "keys": 8})
    else:
        op = build(name, PARAMS[name])
        tables = data.draw(inputs_for(name))
    schedule = data.draw(schedules(op, tables))
    compiled, _ = run_schedule(op, tables, 2, 4, schedule, compiled=True)
    generic, _ = run_schedule(op, tables, 2, 4, schedule, compiled=False)
    assert compiled.equals(generic)
    assert compiled.equals(run_sn(op, tables))


@pytest.mark.parametrize("name", ["scalejoin", "hedge"])
def test_band_joins_run_compiled(name: str) -> None:
    for params in (PARAMS[name], {}):
        assert isinstance(compile_operator(build(name, params)), BandJoinKernel)


@settings(max_examples=20, deadline=None)
@given(table=trades(), ws=st.integers(1, 60), data=st.data())
def test_hedge_kernel_equals_sn(table: pa.Table, ws: int, data: st.DataObject) -> None:
    """Small bands over trades with ties and repeated symbols, static and reconfigured."""
    op = build("hedge", {"ws": ws, "keys": 3})
    tables = [table, table]
    reference = run_sn(op, tables)
    for m in (1, 2, 3):
        out, pipeline = run_schedule(op, tables, m, 3, [])
        assert isinstance(pipeline._pool.compiled, BandJoinKernel)
        assert out.equals(reference), m
    schedule = data.draw(schedules(op, tables))
    out, _ = run_schedule(op, tables, data.draw(st.integers(1, 3)), MAX_PARALLELISM, schedule)
    assert out.equals(reference)


def test_hedge_kernel_edge_cases() -> None:
    """ND = 0 on either side, equal symbols, pairs exactly WS and WS + 1 apart (WS 10)."""
    table = TRADES.table(
        [0, 0, 4, 10, 21, 31],
        [
            ("GOOG", 50.0, 50.0),  # ND 0: no pair as L (ND_L = 0) or as R (ratio -0.0)
            ("FB", 105.0, 100.0),  # +5 %
            ("FB", 95.0, 100.0),  # -5 %, but the same symbol as the +5 % FB
            ("VOD", 23.75, 25.0),  # -5 %, exactly WS after the +5 % FB: a hedge
            ("MA", 105.0, 100.0),  # +5 %, WS + 1 after VOD: none
            ("GOOG", 190.0, 200.0),  # -5 %, exactly WS after MA: a hedge
        ],
    )
    op = build("hedge", {"ws": 10, "keys": 3})
    expected = [
        (10, "VOD", 23.75, "FB", 105.0),  # the tuple arrives as L (source 0) first
        (10, "FB", 105.0, "VOD", 23.75),
        (31, "GOOG", 190.0, "MA", 105.0),
        (31, "MA", 105.0, "GOOG", 190.0),
    ]
    reference = run_sn(op, [table, table])
    assert [tuple(row.values()) for row in reference.to_pylist()] == expected
    for m in (1, 2, 3):
        out, _ = run_schedule(op, [table, table], m, 3, [(10, 1 + m % 3, None)])
        assert out.equals(reference), m


def test_hedge_kernel_ratios_round_as_the_reference() -> None:
    """Every pair of generated deviations, within WS: the same floats decide each ratio."""
    rows = [
        (symbol, avg + deviation, avg)
        for symbol in ("GOOG", "FB")
        for avg in AVG_PRICES
        for deviation in DEVIATIONS
    ]
    table = TRADES.table(list(range(len(rows))), rows)
    op = build("hedge", {"ws": len(rows), "keys": 3})
    reference = run_sn(op, [table, table])
    for m in (1, 2):
        out, _ = run_schedule(op, [table, table], m, 2, [])
        assert out.equals(reference), m


def test_the_runtime_runs_the_kernel_an_operator_declares() -> None:
    """A catalog operator names its kernel; a user operator without one runs generic."""
    scalejoin = build("scalejoin", PARAMS["scalejoin"])
    assert scalejoin.kernel is not None
    left, right = generate.scalejoin(200, 1000.0, 3)
    for op, path in ((scalejoin, "compiled"), (replace(scalejoin, kernel=None), "generic")):
        with stretch.setup(op, 1, 2) as pipeline:
            pipeline.add(0, left)
            pipeline.add(1, right)
            pipeline.close()
            pipeline.join(timeout_s=TIMEOUT_S)
            assert pipeline.status().path == path
            assert (compile_operator(op) is None) == (path == "generic")
            table, _ = pipeline.output()
        assert table.equals(run_sn(scalejoin, [left, right]))
