"""Registered operators: ``wa``/``ws`` like the catalog's, declared ``Param``s (issue 23)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numba
import pyarrow as pa
import pytest

import stretch
from stretch.model.oplus import OPlus, Windows, WindowType
from stretch.operators.catalog import CATALOG, Param

READINGS = stretch.Schema.of(sensor="str", value="float")
LEFT = stretch.Schema.of(x="int")
RIGHT = stretch.Schema.of(a="int")


def _mean(w: Windows) -> list[tuple[Any, ...]]:
    values = [t["value"] for t in w.states[0]]
    return [(w.key, sum(values) / len(values))]


def mean_op(wa_ms: int = 5_000, ws_ms: int = 10_000) -> OPlus:
    return OPlus(
        "mean",
        wa_ms=wa_ms,
        ws_ms=ws_ms,
        inputs=(READINGS,),
        multi_key=lambda t: [t["sensor"]],
        window_type=WindowType.MULTI,
        output=stretch.Schema.of(sensor="str", mean="float"),
        output_fn=_mean,
    )


@numba.njit
def _equal(x: int, a: int) -> bool:
    return x == a


def equal_join(ws_ms: int) -> OPlus:
    return stretch.band_join(
        "eq",
        ws_ms,
        left=LEFT,
        right=RIGHT,
        predicate=_equal,
        reads=(("x",), ("a",)),
        output={"x": "left.x", "a": "right.a"},
    )


@pytest.fixture
def registered() -> Iterator[list[str]]:
    """Names registered by a test, removed from the catalog after it."""
    names: list[str] = []
    yield names
    for name in names:
        CATALOG.pop(name, None)


def register(
    names: list[str],
    name: str,
    factory: Any,
    params: Mapping[str, Param] | None = None,
) -> None:
    stretch.register(name, factory, params=params)
    names.append(name)


def readings() -> pa.Table:
    ts = list(range(0, 60_000, 700))
    rows = [(f"s{i % 3}", float(i % 11)) for i in range(len(ts))]
    return READINGS.table(ts, rows)


def test_a_windowed_operator_takes_wa_and_ws(registered: list[str]) -> None:
    """The README's 'mean' registered as `lambda params: op` takes wa/ws like the catalog."""
    op = mean_op()
    register(registered, "user-mean", lambda params: op)
    default = stretch.build("user-mean")
    assert (default.wa_ms, default.ws_ms, default.output_fn) == (5000, 10_000, op.output_fn)
    built = stretch.build("user-mean", {"wa": "2000", "ws": 6000})
    assert (built.wa_ms, built.ws_ms, built.name) == (2000, 6000, "user-mean")
    table = readings()
    expected = stretch.run_sn(mean_op(2000, 6000), [table])
    assert stretch.run_sn(built, [table]).equals(expected)
    assert stretch.run_vsn(built, [table], 2).equals(expected)
    only_ws = stretch.build("user-mean", {"ws": 20_000})
    assert (only_ws.wa_ms, only_ws.ws_ms) == (5000, 20_000)


def test_bad_window_values_and_unknown_params_are_refused(registered: list[str]) -> None:
    register(registered, "user-mean", lambda params: mean_op())
    with pytest.raises(stretch.OperatorError, match=r"parameter ws='0'.*1\.\."):
        stretch.build("user-mean", {"ws": "0"})
    with pytest.raises(stretch.OperatorError, match=r"no parameter 'b' \(known: wa, ws\)"):
        stretch.build("user-mean", {"b": 3})
    with pytest.raises(stretch.OperatorError, match="at most 1024"):
        stretch.build("user-mean", {"wa": 1, "ws": 5000})  # 5000 windows per tuple


def test_a_join_factory_reads_ws_or_is_refused(registered: list[str]) -> None:
    """A join holds WS in its functions: the catalog cannot set it; its factory must."""
    register(registered, "eq-fixed", lambda params: equal_join(10_000))
    register(registered, "eq", lambda params: equal_join(params.get("ws", 10_000)))
    with pytest.raises(stretch.OperatorError) as refused:
        stretch.build("eq-fixed", {"ws": 500})
    assert "builds the same windows whatever ws=500 says" in str(refused.value)
    assert "params.get('ws')" in str(refused.value)
    assert "10001" not in str(refused.value)  # the join's O+ WS (ws + 1) is not the user's
    tables = [LEFT.table([0, 1000, 2000], [(1,), (1,), (2,)]), RIGHT.table([1400], [(1,)])]
    narrow = stretch.build("eq", {"ws": 500})
    assert stretch.run_sn(narrow, tables).equals(stretch.run_sn(equal_join(500), tables))
    assert stretch.run_sn(narrow, tables).num_rows == 1  # only ts 1000 is within 500 ms
    assert stretch.run_sn(stretch.build("eq"), tables).num_rows == 2


def test_declared_params_are_parsed_and_default(registered: list[str]) -> None:
    seen: list[Mapping[str, Any]] = []

    def factory(params: Mapping[str, Any]) -> OPlus:
        seen.append(dict(params))
        return mean_op(ws_ms=params["span"])

    span = Param(int, 10_000, "the window size in ms")
    register(registered, "spanned", factory, params={"span": span})
    assert stretch.build("spanned").ws_ms == 10_000
    assert stretch.build("spanned", {"span": "4000"}).ws_ms == 4000
    assert seen == [{"span": 10_000}, {"span": 4000}]
    with pytest.raises(stretch.OperatorError, match="parameter span='x'"):
        stretch.build("spanned", {"span": "x"})
    assert stretch.build("spanned", {"ws": 3000}).ws_ms == 3000  # wa/ws come along


def test_an_operator_declaring_ws_keeps_its_own(registered: list[str]) -> None:
    window = Param(int, 7000, "window size")
    register(registered, "own", lambda params: mean_op(ws_ms=params["ws"]), {"ws": window})
    assert stretch.build("own").ws_ms == 7000
    with pytest.raises(stretch.OperatorError, match=r"no parameter 'wa' \(known: ws\)"):
        stretch.build("own", {"wa": 1000})


def test_param_is_public() -> None:
    assert stretch.Param is Param
    assert "Param" in stretch.__all__
