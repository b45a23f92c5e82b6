"""The band-join kernels' comparison loops compile to SIMD code (Numba's LLVM IR, inspected).

Each entry point is compiled again without the disk cache (Numba cannot inspect cached
code) for the signature a real run gave it, unless this process compiled it, and its
optimised IR must hold two vector loops (LLVM's ``vector.body`` blocks), one per probing
side (the indexed kernels: those two, for groups that take the nested loop, and the
counts over a grid cell's two contiguous parts per side; without those counts its IR
holds three), each comparing vectors (``icmp``/``fcmp`` on ``<N x i64>`` / ``<N x
double>``) and gathering none (on a signed index Numba adds a wraparound select, and
LLVM then gathers). A predicate that divides by a value of either side (a zero check that
raises: a branch in both loops) is the control: the same check finds no vector loop in
its kernel.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numba
import pyarrow as pa
import pytest
from numba.core.dispatcher import Dispatcher

import stretch
from stretch.generate import hedge, scalejoin
from stretch.model.schema import Schema
from stretch.operators.catalog import build
from stretch.operators.kernels._band_index import hedge_indexed_run, scalejoin_indexed_run
from stretch.operators.kernels._band_join import hedge_run, scalejoin_run
from stretch.operators.kernels._predicate_join import predicate_run
from stretch.vsn import run_vsn

LEFT = Schema.of(x="int", y="float")
RIGHT = Schema.of(a="int", b="float", c="float", d="bool")
VECTOR_COMPARE = re.compile(r"= (?:icmp|fcmp) \w+ <(\d+) x (?:i64|double)>")
LABEL = re.compile(r"^([\w.]+):", re.MULTILINE)


@numba.njit
def near(x: int, y: float, a: int, b: float) -> bool:
    """Branch-free: the shape a user predicate takes to vectorize."""
    return (abs(x - a) <= 3) & (abs(y - b) <= 4.5)


@numba.njit
def ratios_near_one(x: int, y: float, a: int, b: float) -> bool:
    """Divides by L's and by R's value: Numba checks each for zero and raises, a branch."""
    return abs(y / b - b / y) <= 0.02


def vector_loops(ir: str) -> list[int]:
    """Per vector loop body of ``ir`` that compares vectors it loads, its widest lanes.

    A body that gathers does not count: a loop whose loads were meant to be contiguous
    is not, and a gathered vector loop is no faster than the scalar one.
    """
    labels = list(LABEL.finditer(ir))
    loops = []
    for label, after in zip(labels, [*labels[1:], None], strict=True):
        if not label.group(1).startswith("vector.body"):
            continue
        body = ir[label.end() : after.start() if after else len(ir)]
        lanes = [int(n) for n in VECTOR_COMPARE.findall(body)]
        if lanes and "llvm.masked.gather" not in body:
            loops.append(max(lanes))
    return loops


def compiled_ir(entry: Callable[..., int]) -> str:
    """The optimised IR of ``entry`` for the signature it ran with.

    Compiled afresh where it came from the disk cache (Numba keeps no IR of cached code);
    as it is where this process compiled it (a user's join on a machine's first run).
    """
    assert isinstance(entry, Dispatcher)
    assert entry.signatures, "the entry point never ran"
    signature = entry.signatures[0]
    if not entry.stats.cache_hits:
        ir_here: str = entry.inspect_llvm(signature)
        return ir_here
    fresh = numba.njit(nogil=True)(entry.py_func)
    fresh.compile(signature)
    ir: str = fresh.inspect_llvm(signature)
    return ir


def user_join(predicate: Dispatcher) -> Callable[..., int]:
    """Run ``predicate`` through ``stretch.band_join``; its kernel entry point."""
    op = stretch.band_join(
        predicate.py_func.__name__,
        50,
        left=LEFT,
        right=RIGHT,
        predicate=predicate,
        reads=(("x", "y"), ("a", "b")),
        output={"x": "left.x", "a": "right.a"},
        keys=4,
    )
    run_vsn(op, scalejoin(300, 1000.0, 3), 1)
    return predicate_run(predicate, 2, 2)


def catalog_join(name: str, tables: list[pa.Table], index: str = "off") -> None:
    run_vsn(build(name, {"ws": 100, "keys": 4, "index": index}), tables, 1)


@pytest.mark.parametrize(
    ("entry", "run", "want"),
    [
        (scalejoin_run, lambda: catalog_join("scalejoin", scalejoin(300, 1000.0, 1)), 2),
        (hedge_run, lambda: catalog_join("hedge", hedge(300, 1000.0, 2) * 2), 2),
        (None, lambda: user_join(near), 2),
        # The nested loop's two, and per side the count over a cell's two ring parts.
        (
            scalejoin_indexed_run,
            lambda: catalog_join("scalejoin", scalejoin(300, 1000.0, 1), "on"),
            6,
        ),
        (hedge_indexed_run, lambda: catalog_join("hedge", hedge(300, 1000.0, 2) * 2, "on"), 6),
    ],
    ids=["scalejoin", "hedge", "user_predicate", "scalejoin_indexed", "hedge_indexed"],
)
def test_comparison_loop_is_a_vector_loop(entry: Any, run: Callable[[], Any], want: int) -> None:
    ran = run()
    loops = vector_loops(compiled_ir(entry if entry is not None else ran))
    assert len(loops) >= want, f"vector comparison loops {loops}: want {want}"
    assert min(loops) >= 4


def test_a_dividing_predicate_stays_scalar() -> None:
    """The control: the check above tells a scalar comparison loop from a vector one."""
    assert vector_loops(compiled_ir(user_join(ratios_near_one))) == []
