"""Band joins through their index equal run_sn: catalog scalejoin and hedge, user bands.

Values are drawn to hit the index's edges: negative and float keys, pairs exactly on the
band's edge and on cell boundaries (multiples of the width), every key in one cell,
duplicates, non-finite hedge keys (ND = 0); at parallelism 1-4 with reconfigurations,
and with stores and grids so small that the kernel stops and rebuilds them often.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numba
import numpy as np
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
from stretch.operators.catalog import SCALEJOIN_L, SCALEJOIN_R, TRADES, build
from stretch.operators.kernels._band_index import BLOCK_SHIFT, _probes_here, grid_slots
from stretch.operators.kernels._band_join import order_matches
from stretch.vsn import run_vsn
from stretch.vsn._compiled import band_join as compiled_band_join
from stretch.vsn._compiled.band_join import BandJoinKernel
from tests.streams import sorted_ts, trades
from tests.vsn.support import Step, run_schedule

COMPILE_S = 900.0
"""A deadline for the first run of each kernel, which compiles it (Numba, a loaded machine)."""


@pytest.fixture(autouse=True)
def index_every_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """Index every key's window, however short (the kernel compares short ones nested)."""
    monkeypatch.setattr(compiled_band_join, "SMALL_WINDOW", 0)


@pytest.fixture(scope="module", autouse=True)
def compiled_kernels() -> None:
    """Compile the indexed kernels once, under a deadline for compiling, not for running."""
    sj = [SCALEJOIN_L.table([0, 1], [(1, 1.0), (5, 2.0)]),
          SCALEJOIN_R.table([0, 1], [(2, 1.0, 0.0, True), (30, 1.0, 0.0, False)])]  # fmt: skip
    trade = TRADES.table([0, 1], [("A", 95.0, 100.0), ("B", 105.0, 100.0)])
    run_vsn(build("scalejoin", {"ws": 5, "keys": 2}), sj, 1, timeout_s=COMPILE_S)
    run_vsn(build("hedge", {"ws": 5, "keys": 2}), [trade, trade], 1, timeout_s=COMPILE_S)
    tables = [LEFT.table([0], [(1.0, 1.0)]), RIGHT.table([1], [(1.0, 1.0)])]
    for width in WIDTHS:  # a user's predicate compiles in each process, on first use
        run_vsn(near_join(width, width), tables, 1, timeout_s=COMPILE_S)


EDGES = [-20, -11, -10, -9, -1, 0, 1, 9, 10, 11, 19, 20, 21, 30]
"""Integers on and beside the cells' boundaries and the band's edge (width 10)."""
BLOCK_EDGES = [-170, -161, -160, -159, -150, 150, 159, 160, 161, 170, 319, 320, 321, 490]
"""Integers on and beside the edges of ``partition=band``'s blocks (16 cells of 10)."""
PARTITIONS = st.sampled_from(["seq", "band"])


def _values(draw: st.DrawFn, skew: bool, n: int) -> list[int]:
    if skew:
        return [7] * n
    ints = st.one_of(
        st.sampled_from(EDGES),
        st.integers(-45, 45),
        st.sampled_from(BLOCK_EDGES),
        st.integers(-500, 500),
    )
    return [draw(ints) for _ in range(n)]


@st.composite
def scalejoin_edges(draw: st.DrawFn) -> list[pa.Table]:
    """L (x, y) and R (a, b, c, d) with keys at the edges of the band and of its cells."""
    skew = draw(st.booleans())
    floats = st.one_of(st.sampled_from([-10.0, -0.5, 0.0, 0.5, 10.0, 10.5]), st.floats(-25, 25))
    left_ts, right_ts = draw(sorted_ts(25, 60)), draw(sorted_ts(25, 60))
    xs, as_ = _values(draw, skew, len(left_ts)), _values(draw, skew, len(right_ts))
    left = SCALEJOIN_L.table(left_ts, [(x, draw(floats)) for x in xs])
    right = SCALEJOIN_R.table(
        right_ts, [(a, draw(floats), draw(floats), draw(st.booleans())) for a in as_]
    )
    return [left, right]


@st.composite
def schedules(draw: st.DrawFn, n: int = 4) -> tuple[int, list[Step]]:
    """A starting parallelism and reconfigurations at random points of the input."""
    m = draw(st.integers(1, n))
    steps = draw(st.lists(st.tuples(st.integers(-50, 600), st.integers(1, n)), max_size=3))
    return m, [(ts, parallelism, None) for ts, parallelism in steps]


def nested_groups(pipeline: stretch.Pipeline) -> int:
    kernel = pipeline._pool.compiled
    assert isinstance(kernel, BandJoinKernel)
    return sum(kernel.nested_groups.values())


@settings(max_examples=40, deadline=None)
@given(
    tables=scalejoin_edges(),
    plan=schedules(),
    ws=st.sampled_from([1, 7, 40, 300]),
    partition=PARTITIONS,
)
def test_scalejoin_indexed_equals_run_sn(
    tables: list[pa.Table], plan: tuple[int, list[Step]], ws: int, partition: str
) -> None:
    m, schedule = plan
    op = build("scalejoin", {"ws": ws, "keys": 4, "partition": partition})
    assert op.kernel is not None and op.kernel.join.band is not None  # type: ignore[attr-defined]
    out, _ = run_schedule(op, tables, m, 4, schedule)
    assert out.equals(run_sn(op, tables))


@st.composite
def crowded(draw: st.DrawFn) -> list[pa.Table]:
    """L and R of 20-80 tuples in 100 ms, most pairs matching, over a few cells."""
    xs = st.sampled_from([-3, 0, 4, 9, 15, 22])
    ys = st.floats(-4, 4)
    tables = []
    for schema, extra in ((SCALEJOIN_L, ()), (SCALEJOIN_R, (0.0, True))):
        ts = sorted(draw(st.lists(st.integers(0, 100), min_size=20, max_size=80)))
        tables.append(schema.table(ts, [(draw(xs), draw(ys), *extra) for _ in ts]))
    return tables


@settings(max_examples=40, deadline=None)
@given(
    tables=crowded(),
    plan=schedules(),
    piece=st.integers(1, 8),
    chunk=st.integers(1, 400),
    index=st.sampled_from(["on", "off"]),
    partition=PARTITIONS,
)
def test_matches_released_a_few_at_a_time_equal_run_sn(
    tables: list[pa.Table],
    plan: tuple[int, list[Step]],
    piece: int,
    chunk: int,
    index: str,
    partition: str,
) -> None:
    """A kernel's matches go out each time it found ``piece`` of them.

    The indexed kernel stops between groups of run tuples, the nested one between chunks
    of ``chunk`` pairs (from a tuple a chunk to the whole run); the match buffer starts at
    two, so either also stops every few matches where no release may happen (the nested
    one in the middle of a chunk, some keys ahead of others).
    """
    m, schedule = plan
    if index == "off":
        partition = "seq"  # a band partition needs the index
    op = build("scalejoin", {"ws": 40, "keys": 4, "partition": partition, "index": index})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compiled_band_join, "OUTPUT_PIECE_ROWS", piece)
        patch.setattr(compiled_band_join, "CHUNK_PAIRS", chunk)
        patch.setattr(compiled_band_join, "FIRST_MATCHES", 2)
        out, _ = run_schedule(op, tables, m, 4, schedule)
    assert out.equals(run_sn(op, tables))


def test_the_nested_kernel_releases_only_where_every_key_stands() -> None:
    """Every pair matches and the match buffer starts at two: the nested kernel stops in
    the middle of chunks, keys ahead of others, and its chunks shrink as the stores grow.
    A piece may go out only once every key reached the same tuple (one chunk size of
    these, 97 pairs, released a key's matches before the others' and failed)."""
    left = SCALEJOIN_L.table([0] * 40, [(-3, 0.0)] * 40)
    right = SCALEJOIN_R.table([0] * 10 + [1] * 30, [(-3, 0.0, 0.0, True)] * 40)
    op = build("scalejoin", {"ws": 40, "keys": 4, "index": "off"})
    expected = run_sn(op, [left, right])
    for chunk in range(1, 120):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(compiled_band_join, "OUTPUT_PIECE_ROWS", 1)
            patch.setattr(compiled_band_join, "CHUNK_PAIRS", chunk)
            patch.setattr(compiled_band_join, "FIRST_MATCHES", 2)
            assert run_vsn(op, [left, right], 1).equals(expected), chunk


INT64 = np.iinfo(np.int64)


@pytest.mark.parametrize("index", ["on", "off"])
def test_scalejoin_values_2_63_apart_do_not_match(index: str) -> None:
    """``x - a`` wraps in int64 beyond 2**63 apart; the kernels compare exactly, as Python."""
    left = SCALEJOIN_L.table([0] * 4, [(x, 1.0) for x in (0, 500, 9000, INT64.max)])
    right = SCALEJOIN_R.table(
        [0, 0, 1],
        [(INT64.min, 1.0, 0.0, True), (-5, 1.0, 0.0, True), (INT64.max - 3, 1.0, 0.0, True)],
    )
    op = build("scalejoin", {"ws": 10, "keys": 2, "index": index})
    expected = run_sn(op, [left, right])
    assert expected.column("a").to_pylist() == [-5, INT64.max - 3]  # x = 0 and x = max
    for m in (1, 2):
        assert run_vsn(op, [left, right], m).equals(expected)


@settings(max_examples=15, deadline=None)
@given(
    tables=scalejoin_edges(),
    plan=schedules(3),
    partition=PARTITIONS,
    carried=st.sampled_from([0, 3, 1 << 30]),
)
def test_small_stores_and_grids_rebuild(
    tables: list[pa.Table], plan: tuple[int, list[Step]], partition: str, carried: int
) -> None:
    """One-tuple stores and grids of a few entries: STORE_FULL and INDEX_FULL all along.

    A compaction rebuilds the grid every time (``carried`` 0), carries it over three
    times in four (the default) or always.
    """
    m, schedule = plan
    op = build("scalejoin", {"ws": 60, "keys": 2, "partition": partition})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compiled_band_join, "MIN_CAPACITY", 1)
        patch.setattr(compiled_band_join, "GRID_BUDGET", 1)
        patch.setattr(compiled_band_join, "GRID_SLACK", 0)
        patch.setattr(compiled_band_join, "CARRIED_COMPACTIONS", carried)
        out, pipeline = run_schedule(op, tables, m, 3, schedule)
    assert out.equals(run_sn(op, tables))
    for slab in slabs(pipeline):
        assert_grid_indexes_the_stores(slab)


def slabs(pipeline: stretch.Pipeline) -> list[compiled_band_join._Slab]:
    kernel = pipeline._pool.compiled
    assert isinstance(kernel, BandJoinKernel)
    return list(kernel.slabs.values())


def assert_grid_indexes_the_stores(slab: compiled_band_join._Slab) -> None:
    """Each live stored tuple is once in its grid cell, in arrival order, its columns copied.

    Entries of tuples that expired stay until their cell's head drops them, so they are
    left out (their position is below their store's head).
    """
    grid = slab.grid
    if grid is None:
        return
    capacity, width = slab.capacity, grid.cells.shape[2]
    for side in (0, 1):
        found = []
        for c in range(grid.cells.shape[1]):
            at = [(int(grid.head[side, c]) + i) % width for i in range(grid.count[side, c])]
            live = [
                (e, int(grid.cells[side, c, e]))
                for e in at
                if grid.cells[side, c, e] % capacity
                >= slab.bounds[grid.cells[side, c, e] // capacity, 2 * side]
            ]
            stored = np.array([entry for _, entry in live], dtype=np.int64)
            band_cells = slab.cell[:, side].reshape(-1)[stored]
            assert (grid_slots(band_cells, grid.cells.shape[1] - 1, grid.shift) == c).all()
            arrival = [(slab.ts[:, side].reshape(-1)[i], slab.seq[:, side].reshape(-1)[i])
                       for i in stored]  # fmt: skip
            assert arrival == sorted(arrival), f"cell {c} of side {side} out of arrival order"
            for copy, column in zip(grid.columns[side], slab.columns[side], strict=True):
                positions = [c * width + e for e, _ in live]
                assert np.array_equal(copy[positions], column[stored], equal_nan=True)
            found += stored.tolist()
        assert sorted(found) == compiled_band_join._live(slab, side).tolist()


def test_a_carried_grid_holds_what_a_rebuild_would() -> None:
    """Compactions that carry the grid over (renumbered) leave it indexing the stores.

    2,000 tuples a side over a window of 300, stores of one tuple to start with: the
    stores fill and are compacted again and again, the grid carried over each time
    (never rebuilt), expired entries still at the cells' heads dropped as it goes.
    """
    rng = np.random.default_rng(11)
    n = 2000
    ts = sorted(rng.integers(0, 20_000, n).tolist())
    left = SCALEJOIN_L.table(ts, [(int(x), 1.0) for x in rng.integers(-300, 300, n)])
    right = SCALEJOIN_R.table(ts, [(int(a), 1.0, 0.0, True) for a in rng.integers(-300, 300, n)])
    op = build("scalejoin", {"ws": 300, "keys": 2})
    carried = []
    carry = compiled_band_join._Grid.carry

    def counted(grid: compiled_band_join._Grid, *args: Any) -> compiled_band_join._Grid:
        carried.append(grid)
        return carry(grid, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compiled_band_join, "MIN_CAPACITY", 1)
        patch.setattr(compiled_band_join, "CARRIED_COMPACTIONS", 1 << 30)
        patch.setattr(compiled_band_join._Grid, "carry", counted)
        out, pipeline = run_schedule(op, [left, right], 1, 2, [])
    assert out.equals(run_sn(op, [left, right]))
    assert len(carried) >= 5
    (slab,) = slabs(pipeline)
    assert slab.grid is not None and slab.grid.carried >= 5
    assert_grid_indexes_the_stores(slab)


def grids(pipeline: stretch.Pipeline) -> list[bool]:
    """Whether each instance's slab keeps a grid (else the nested loop joins it)."""
    return [slab.grid is not None for slab in slabs(pipeline)]


def test_one_cell_runs_the_nested_loop_with_the_same_output() -> None:
    """Every x equal: the cells hold the whole window, so groups take the nested loop.

    A rebuild then drops the grid, and the nested kernel alone joins from then on.
    """
    n = 400
    ts = list(range(n))
    left = SCALEJOIN_L.table(ts, [(5, float(i % 30)) for i in ts])
    right = SCALEJOIN_R.table(ts, [(5, float(i % 17), 0.0, True) for i in ts])
    op = build("scalejoin", {"ws": 50, "keys": 2})
    out, pipeline = run_schedule(op, [left, right], 2, 2, [])
    assert out.equals(run_sn(op, [left, right]))
    assert out.num_rows > n
    assert nested_groups(pipeline) > 0
    assert grids(pipeline) == [False, False]


def test_a_dropped_grid_comes_back_when_the_data_spreads() -> None:
    """One cell for a while (the grid is dropped), then spread keys: a grid again.

    A rebuild (a compaction, the switch) takes the index up again; the output stays
    run_sn's throughout.
    """
    rng = np.random.default_rng(3)
    n = 3000
    ts = list(range(n))
    xs = np.where(np.arange(n) < n // 3, 5, rng.integers(0, 100_000, n))
    left = SCALEJOIN_L.table(ts, [(int(x), float(i % 30)) for i, x in enumerate(xs)])
    right = SCALEJOIN_R.table(ts, [(int(x) + 3, 1.0, 0.0, True) for x in xs[::-1]][::-1])
    op = build("scalejoin", {"ws": 40, "keys": 2})
    head = [left.slice(0, n // 3), right.slice(0, n // 3)]
    out, pipeline = run_schedule(op, head, 1, 2, [])
    assert out.equals(run_sn(op, head))
    assert grids(pipeline) == [False]
    out, pipeline = run_schedule(op, [left, right], 1, 2, [(n // 2, 2, None)])
    assert out.equals(run_sn(op, [left, right]))
    assert grids(pipeline) == [True, True]


@pytest.mark.parametrize("index", ["on", "off"])
def test_switches_back_to_back_gather_each_key_from_where_it_lies(index: str) -> None:
    """Switches with no input between them: an instance whose keys changed gathers them on
    its next run, from slabs that earlier switches had not gathered yet either."""
    rng = np.random.default_rng(11)
    n = 2000
    ts = np.sort(rng.integers(0, 2000, n)).tolist()
    left = SCALEJOIN_L.table(ts, [(int(v), 0.0) for v in rng.integers(0, 400, n)])
    right = SCALEJOIN_R.table(ts, [(int(v), 1.0, 0.0, False) for v in rng.integers(0, 400, n)])
    op = build("scalejoin", {"ws": 200, "keys": 6, "index": index})
    groups = op.key_groups
    shuffled = [int(g) for g in rng.integers(0, 3, groups)]
    schedule: list[Step] = [
        (700, 3, None),
        (700, 2, None),
        (700, 3, shuffled),  # the same ts: none of the three ran in between
        (1400, 1, None),
        (1400, 3, [2 - g for g in shuffled]),
        (1400, 2, None),
    ]
    out, pipeline = run_schedule(op, [left, right], 1, 3, schedule)
    assert out.equals(run_sn(op, [left, right]))
    assert out.num_rows > 0
    kernel = pipeline._pool.compiled
    assert isinstance(kernel, BandJoinKernel)
    held = sorted(key for slab in kernel.slabs.values() for key in slab.slot_keys.tolist())
    waiting = sorted(key for mine, _ in kernel.pending.values() for key in mine.tolist())
    assert sorted(held + waiting) == list(range(6))  # every key in one place


def test_partition_band_stores_each_block_at_its_key() -> None:
    """``partition=band``: a slab's stores hold the tuples of its keys' blocks alone.

    The matches are the round robin's, as a multiset; at any parallelism the output is
    run_sn's with the same partition.
    """
    rng = np.random.default_rng(7)
    n = 3000
    ts = np.sort(rng.integers(0, 3000, n)).tolist()
    left = SCALEJOIN_L.table(ts, [(int(v), 0.0) for v in rng.integers(-3000, 3000, n)])
    right = SCALEJOIN_R.table(ts, [(int(v), 1.0, 0.0, False) for v in rng.integers(-3000, 3000, n)])
    tables = [left, right]
    keys = 5
    by_seq = run_sn(build("scalejoin", {"ws": 300, "keys": keys}), tables)
    op = build("scalejoin", {"ws": 300, "keys": keys, "partition": "band"})
    expected = run_sn(op, tables)
    assert sorted(expected.to_pylist(), key=str) == sorted(by_seq.to_pylist(), key=str)
    assert not expected.equals(by_seq)  # a tuple's matches by block, not round robin
    for m in (1, 2, 3):
        out, pipeline = run_schedule(op, tables, m, 3, [(1500, 4 - m, None)])
        assert out.equals(expected)
        kernel = pipeline._pool.compiled
        assert isinstance(kernel, BandJoinKernel)
        for slab in kernel.slabs.values():
            for s, key in enumerate(slab.slot_keys.tolist()):
                for side in (0, 1):
                    head, tail = slab.bounds[s, 2 * side], slab.bounds[s, 2 * side + 1]
                    blocks = slab.cell[s, side, head:tail] >> BLOCK_SHIFT
                    assert tail > head and np.all(blocks % keys == key)


@pytest.mark.parametrize(
    ("low", "high", "owned", "block", "wild", "probes"),
    [
        (0, 2, [], -1, 0, True),  # round robin: every slab probes
        (0, 2, [0], 4, 0, True),  # cells 0-2: block 0, key 0
        (0, 2, [1, 2], 4, 0, False),
        (0, 2, [1, 2], 4, 1, True),  # the wild cell holds a tuple
        (1, 0, [1], 4, 0, True),  # a key that is not finite reads the window
        (15, 17, [1], 4, 0, True),  # blocks 0 and 1
        (-3, -1, [4], 4, 0, True),  # block -1 is key 4 of 5
        (-3, -1, [0, 1, 2, 3], 4, 0, False),
        (0, 100, [3], 4, 0, True),  # more blocks than keys
    ],
)
def test_a_probe_reads_a_slab_only_if_it_owns_a_block_of_its_band(
    low: int, high: int, owned: list[int], block: int, wild: int, probes: bool
) -> None:
    keys = 5
    key_slot = np.full(keys, -1, dtype=np.int64)
    key_slot[owned] = np.arange(len(owned))
    cells = np.array([[0], [low], [high]], dtype=np.int64)
    assert _probes_here(cells, 0, key_slot, keys, block, wild) is probes


def test_partition_param() -> None:
    with pytest.raises(OperatorError, match="partition='blocks'"):
        build("scalejoin", {"partition": "blocks"})
    with pytest.raises(OperatorError, match="partition 'band' needs a band"):
        build("scalejoin", {"partition": "band", "index": "off"})
    with pytest.raises(OperatorError, match="band join 'x': partition 'band' needs a band"):
        stretch.band_join(
            "x",
            10,
            left=LEFT,
            right=RIGHT,
            predicate=within(1.0),
            output={"x": "left.x"},
            partition="band",
        )


@st.composite
def kernel_matches(draw: st.DrawFn) -> tuple[np.ndarray, int]:
    """Matches (tuple, key, partner, stored position); some tuples with many. In any order,
    or as the band index writes them: cell by cell (here ``p % cells``), each cell's in
    stored order."""
    n = draw(st.integers(1, 6))
    keys = draw(st.integers(1, 80))
    pairs = sorted(
        draw(
            st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, keys - 1), st.integers(0, 60)))
        )
    )
    cells = draw(st.integers(0, 4))
    if cells:
        pairs.sort(key=lambda pair: (pair[2] % cells, pair[0], pair[1], pair[2]))
    else:
        pairs = draw(st.permutations(pairs))
    rows = [(t, k, 100_000 * t + 100 * k + p, p) for t, k, p in pairs]
    return np.array(rows, dtype=np.int64).reshape(-1, 4).T.copy(), n


@settings(max_examples=150, deadline=None)
@given(found=kernel_matches())
def test_order_matches_sorts_and_numbers_like_a_lexsort(found: tuple[np.ndarray, int]) -> None:
    matches, n = found
    order = np.lexsort((matches[3], matches[1], matches[0]))
    expected = matches[:, order].copy()
    for a in range(expected.shape[1]):  # the rank within (tuple, key)
        same = a > 0 and tuple(expected[:2, a]) == tuple(expected[:2, a - 1])
        expected[3, a] = expected[3, a - 1] + 1 if same else 0
    assert np.array_equal(order_matches(matches, n), expected)


def test_spread_keys_take_the_index_and_compare_less() -> None:
    """Keys spread over many cells: the index serves the probes and compares far less.

    Only a probe meeting a window of a few tuples, one of them in its cells (a quarter of
    that window), takes the nested loop.
    """
    rng = np.random.default_rng(5)
    n = 2000
    ts = np.sort(rng.integers(0, 1000, n)).tolist()
    left = SCALEJOIN_L.table(ts, [(int(v), 0.0) for v in rng.integers(0, 5000, n)])
    right = SCALEJOIN_R.table(ts, [(int(v), 1.0, 0.0, False) for v in rng.integers(0, 5000, n)])
    comparisons = {}
    for index in ("on", "off"):
        op = build("scalejoin", {"ws": 500, "keys": 2, "index": index})
        out, pipeline = run_schedule(op, [left, right], 1, 2, [])
        assert out.equals(run_sn(op, [left, right]))
        kernel = pipeline._pool.compiled
        assert isinstance(kernel, BandJoinKernel)
        comparisons[index] = sum(kernel.comparisons.values())
        if index == "on":
            assert nested_groups(pipeline) <= 10
            assert kernel.state_bytes() > sum(
                s.grid.nbytes for s in kernel.slabs.values() if s.grid
            )
    assert comparisons["on"] * 20 < comparisons["off"]


@settings(max_examples=30, deadline=None)
@given(table=trades(), plan=schedules(3), ws=st.sampled_from([1, 20, 200]), partition=PARTITIONS)
def test_hedge_indexed_equals_run_sn(
    table: pa.Table, plan: tuple[int, list[Step]], ws: int, partition: str
) -> None:
    m, schedule = plan
    op = build("hedge", {"ws": ws, "keys": 3, "partition": partition})
    assert op.kernel is not None and op.kernel.join.band is not None  # type: ignore[attr-defined]
    out, _ = run_schedule(op, [table, table], m, 3, schedule)
    assert out.equals(run_sn(op, [table, table]))


@cache
def within(width: float) -> Any:
    """An @njit predicate: |x - a| <= width and y, b of one sign (0 counts as both)."""

    @numba.njit
    def near(x: float, y: float, a: float, b: float) -> bool:
        return abs(x - a) <= width and y * b >= 0

    return near


LEFT = Schema.of(x="float", y="float")
RIGHT = Schema.of(a="float", b="float")
WIDTHS = [0.25, 1e6]


def near_join(width: float, band: float, partition: str = "seq") -> stretch.OPlus:
    """A user band join with ``within(width)`` as its predicate, indexed on ``band``."""
    return stretch.band_join(
        "near",
        30,
        left=LEFT,
        right=RIGHT,
        predicate=within(width),
        output={"x": "left.x", "a": "right.a", "b": "right.b"},
        keys=3,
        band=("x", "a", band),
        partition=partition,
    )


@st.composite
def float_streams(draw: st.DrawFn, width: float) -> list[pa.Table]:
    """Float keys with duplicates, negatives and values exactly ``k * width`` apart."""
    edge = st.integers(-6, 6).map(lambda k: k * width)
    values = st.one_of(edge, st.floats(-8 * width, 8 * width), st.just(0.0))
    tables = []
    for schema in (LEFT, RIGHT):
        ts = draw(sorted_ts(20, 40))
        tables.append(schema.table(ts, [(draw(values), draw(st.floats(-1, 1))) for _ in ts]))
    return tables


@settings(max_examples=30, deadline=None)
@given(
    data=st.data(),
    width=st.sampled_from(WIDTHS),
    plan=schedules(3),
    loose=st.booleans(),
    partition=PARTITIONS,
)
def test_user_band_join_equals_run_sn(
    data: st.DataObject, width: float, plan: tuple[int, list[Step]], loose: bool, partition: str
) -> None:
    """A user's band (declared exactly or looser than the predicate) gives run_sn's rows."""
    tables = data.draw(float_streams(width))
    m, schedule = plan
    op = near_join(width, 3 * width if loose else width, partition)

    def twin(left: StreamTuple, right: StreamTuple) -> Payload | None:
        if abs(left["x"] - right["a"]) <= width and left["y"] * right["b"] >= 0:
            return (left["x"], right["a"], right["b"])
        return None

    kernel = op.kernel.join if partition == "band" else None  # type: ignore[union-attr]
    reference = joins.band_join("near", 1, 30, (LEFT, RIGHT), op.output, twin, 3, kernel, partition)
    out, _ = run_schedule(op, tables, m, 3, schedule)
    assert out.equals(run_sn(reference, tables))


@pytest.mark.parametrize(
    ("band", "message"),
    [
        (("y", "a", 1.0), "band column 'y' is not a numeric column of left"),
        (("x", "q", 1.0), "band column 'q'"),
        (("x", "a", 0.0), "finite and positive"),
        (("x", "a", float("nan")), "finite and positive"),
        (("x", "a"), "band must be"),
    ],
)
def test_bad_bands_are_named(band: tuple[str, str, float], message: str) -> None:
    with pytest.raises(OperatorError, match=message):
        stretch.band_join(
            "bad",
            10,
            left=Schema.of(x="int", y="str"),
            right=Schema.of(a="float"),
            predicate=within(1.0),
            output={"x": "left.x"},
            band=band,
        )


def test_index_param() -> None:
    on, off = build("scalejoin", {}), build("scalejoin", {"index": "off"})
    assert on.kernel.join.indexed is not None  # type: ignore[union-attr]
    assert off.kernel.join.band is None  # type: ignore[union-attr]
    with pytest.raises(OperatorError, match="index='maybe'"):
        build("hedge", {"index": "maybe"})


@pytest.mark.parametrize(
    ("per_band_cell", "widths"),
    [(100.0, {1}), (25.0, {2}), (0.25, {8, 16, 32})],
)
def test_grid_cells_widen_as_the_data_thins(per_band_cell: float, widths: set[int]) -> None:
    """Cells as wide as the band on dense data, wider (fewer visits a probe) on sparse data.

    On ``d`` tuples per band width the cost rule's best width is about ``sqrt(2 *
    CELL_VISIT / d)`` band widths: 1 at d = 100, 2 at d = 25, about 18 at d = 0.25.
    """
    spread = 4000
    count = int(spread * per_band_cell)
    rng = np.random.default_rng(3)
    cells = tuple(np.sort(rng.integers(0, spread, count)) for _ in range(2))
    shift, occupied = compiled_band_join._shift(cells)
    assert 2**shift in widths
    assert occupied == max(len(np.unique(side >> shift)) for side in cells)


def test_grid_cells_of_no_or_one_cell() -> None:
    empty = np.array([], dtype=np.int64)
    assert compiled_band_join._shift((empty, empty)) == (0, 0)
    one = np.full(50, 7, dtype=np.int64)
    assert compiled_band_join._shift((one, one)) == (0, 1)
