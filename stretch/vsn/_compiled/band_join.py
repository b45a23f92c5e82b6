"""Operator 10 on the kernel path: an instance's keys in one band-join kernel call per run.

Implements ``stretch.vsn._instance.CompiledOperator`` for ``BandJoinSpec``: given an
instance and a run of ready nodes it handles the data tuples for the keys the instance
owns in its epoch and emits exactly the rows (and causes) the operator's Python functions
would, so the output still equals ``run_sn``'s. The ``BandJoin`` of the spec says which
compiled predicate and which columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from stretch.model.instance import UPDATED
from stretch.model.oplus import OPlus
from stretch.model.schema import ColumnType
from stretch.operators.kernels import Band, BandJoin
from stretch.operators.kernels._band_index import (
    BLOCK_SHIFT,
    INDEX_FULL,
    NOT_FINITE,
    band_cells,
    grid_build,
    grid_compact,
    grid_slots,
    run_band_cells,
    store_cells,
    store_keys,
)
from stretch.operators.kernels._band_join import (
    DONE,
    LAST,
    NEVER,
    OUT_FULL,
    PIECE,
    STORE_FULL,
    Columns,
    Fill,
    order_matches,
)
from stretch.vsn._compiled._runs import audit_groups, data_nodes, owned_groups
from stretch.vsn._ingest import SourceRows, SourceStore, column_dtype
from stretch.vsn._instance import OUTPUT_PIECE_ROWS, ReadyNodes, VSNInstance
from stretch.vsn._output_block import OutputBlock
from stretch.vsn._reconfiguration import EpochPlan

__all__ = ["GRID_BUDGET", "MIN_CAPACITY", "SMALL_WINDOW", "BandJoinKernel"]


def _joined(found: list[NDArray[np.int64]]) -> NDArray[np.int64]:
    """The kernel's matches of successive calls as one array (a row per field)."""
    return found[0] if len(found) == 1 else np.concatenate(found, axis=1)


def _gathered(
    store: SourceStore, held: SourceRows, name: str, rows: NDArray[np.int64]
) -> NDArray[Any] | pa.Array:
    """Column ``name`` of the source's ``rows``; strings decoded, as an Arrow array."""
    values = held.column(name)[rows - held.base]
    if dict(store.schema)[name] is ColumnType.STR:
        return store.dictionary.decode_arrow(values)
    return values


MIN_CAPACITY = 256
"""The fewest tuples a slab's store holds per key and side."""

FIRST_MATCHES = 1024
"""The matches an instance's match buffer holds at first; it doubles when a group's might
not fit, and is kept from run to run."""

CHUNK_PAIRS = 1 << 24
"""The most pairs (run tuples times the windows' tuples) a chunk of the nested kernel could
make. It stops between chunks once it found a piece (``OUTPUT_PIECE_ROWS``), so a call
that meets a sudden rise in matches holds at most about this many rows more than a piece.
A chunk's comparisons take about 5.6 ms at 3 G/s. Smaller chunks cost the nested loop its
cache (each key's store is read again every chunk): at 1 << 22 the nested ScaleJoin of
2 x 200k tuples took 3% longer than without chunks, at 1 << 24 0-2% (docs/vsn.md).
"""

Dtypes = tuple[tuple[np.dtype[Any], ...], tuple[np.dtype[Any], ...]]
"""The types of the columns the predicate reads, of L and of R."""

GRID_BUDGET = 8
"""A store's grid holds at most this many entries per tuple of the store's capacity
(plus ``GRID_SLACK``): the number of cells halves until the grid fits."""
GRID_SLACK = 1024
"""Grid entries a store may have beyond ``GRID_BUDGET`` per tuple."""
CELL_FILL = 4
"""Tuples of a store's capacity per grid cell, when the cells are chosen."""
MAX_CELLS = 1 << 16
"""The most cells of a store's grid."""


CELL_VISIT = 40
"""What a probe's visit to one grid cell costs, in candidates scanned: reaching a cell's
entries is a cache miss or two. Measured on 2 x 1M tuples, WS 10 s: 0.4-0.5 s for 9M
visits against 1.7 ns a candidate (docs/performance.md, "What does not split")."""
SMALL_WINDOW = 128
"""A window of at most this many tuples (all the slab's keys together) is compared by
the nested loop: a vector block or so, which its count reads about as fast as a probe
visits its cells."""
MAX_SHIFT = 20
"""The widest grid cell: 2**MAX_SHIFT band widths."""
HOT_SHARE = 0.75
"""A grid is not kept while one cell holds this share of the slab's live tuples."""
CARRIED_COMPACTIONS = 3
"""Compactions of a slab that carry its grid over (renumbered, ``grid_compact``) before
one rebuilds it (``regrid``), choosing its cells again for the data then stored."""


def _shift(cells: tuple[NDArray[np.int64], NDArray[np.int64]]) -> tuple[int, int]:
    """How many times to double the grid cells' width over the band's.

    ``cells`` holds each side's live band cells. Returns the shift whose cells make a
    probe cheapest, and the most cells a side occupies then (0 if nothing is stored).

    A probe reads the grid cells within a band of its key: on cells ``W = 2**shift``
    band widths wide, ``1 + 2 / W`` of them on average, each holding the live tuples
    divided by the occupied cells. Its cost is taken as its visits times ``CELL_VISIT``
    plus the tuples those cells hold: sparse data gets wider cells (fewer visits for a
    few more comparisons), dense data cells of the band's width. Widening stops once
    each side occupies one cell.
    """
    finite = [side[side != NOT_FINITE] for side in cells]
    tuples = sum(side.size for side in finite)
    if tuples == 0:
        return 0, 0
    distinct = [np.unique(side) for side in finite]
    best = (float("inf"), 0, 0)
    for shift in range(MAX_SHIFT + 1):
        # a sorted array stays sorted when shifted: count where it steps
        occupied = [
            int(np.count_nonzero(np.diff(side >> shift))) + (side.size > 0) for side in distinct
        ]
        visits = 1 + 2 / 2**shift
        cost = visits * (CELL_VISIT + tuples / sum(occupied))
        if cost < best[0]:
            best = (cost, shift, max(occupied))
        if max(occupied) == 1:
            break
    return best[1], best[2]


def _worth_keeping(cells: tuple[NDArray[np.int64], NDArray[np.int64]]) -> bool:
    """Whether a grid over the live tuples of these band cells (each side's) would serve.

    Not when one band cell (or the cell of keys that are not finite, which every probe
    reads) holds ``HOT_SHARE`` of the live tuples of both sides (every ``x`` equal, say):
    the probes of that cell, most of them, would read most of the window however the
    grid's cells are drawn, and run the nested loop; keeping the grid would only add its
    upkeep. A cell holding over half the tuples holds their median, so one selection and
    one count tell, O(tuples). A window of at most ``SMALL_WINDOW`` tuples keeps its grid:
    too few to tell.
    """
    values = np.concatenate(cells)
    if values.size == 0 or values.size <= SMALL_WINDOW:
        return True
    middle = np.partition(values, values.size // 2)[values.size // 2]
    return int(np.count_nonzero(values == middle)) < HOT_SHARE * values.size


def _power_of_two(n: int) -> int:
    """The least power of two >= n (and >= 1)."""
    return 1 << max(0, int(n) - 1).bit_length()


def _live(slab: _Slab, side: int) -> NDArray[np.int64]:
    """A side's live tuples over every key of the slab, as store indices ``s * capacity + p``."""
    position = np.arange(slab.capacity)
    live = (position >= slab.bounds[:, 2 * side, None]) & (
        position < slab.bounds[:, 2 * side + 1, None]
    )
    return np.flatnonzero(live)


def _arrival(slab: _Slab, side: int, entries: NDArray[np.int64]) -> NDArray[np.int64]:
    """The order that puts a side's store indices in arrival order: by ts, then seq.

    The run brings tuples in that order, whatever their keys, and a grid cell must hold
    its entries in ts order for expiry to drop them from its head.
    """
    ts, seq = (column[:, side].reshape(-1)[entries] for column in (slab.ts, slab.seq))
    return np.lexsort((seq, ts))


class _Grid:
    """The index of a slab's stores: per side, ``cells`` ring buffers over all its keys.

    ``cells[side, c]`` holds the store indices of the tuples of cell c (the last cell:
    keys that are not finite) in arrival order, from ``head[side, c]``, ``count[side, c]``
    of them; see ``stretch.operators.kernels._band_index``. Built over ``live``, each
    side's live tuples (``_live``), on cells ``2**shift`` band cells wide, the most of
    them a side occupies being ``occupied`` (``_shift``).
    """

    def __init__(
        self,
        slab: _Slab,
        extra: int,
        live: tuple[tuple[NDArray[np.int64], NDArray[np.int64]], ...],
        shift: int,
        occupied: int,
    ) -> None:
        self.shift = shift
        self.carried = 0  # compactions it was carried over since it was built
        stored = slab.capacity * len(slab.slot_keys)
        budget = GRID_BUDGET * stored + GRID_SLACK
        # As many cells as a side has occupied ones (or its capacity suggests, empty).
        wanted = 2 * occupied if occupied else stored // CELL_FILL
        cells_n = min(MAX_CELLS, _power_of_two(max(1, wanted)))
        while True:
            slots = (
                grid_slots(live[0][1], cells_n, self.shift),
                grid_slots(live[1][1], cells_n, self.shift),
            )
            most = max((int(np.bincount(c).max()) for c in slots if c.size), default=0)
            room = _power_of_two(max(8, most + most // 2, most + extra))
            if cells_n == 1 or (cells_n + 1) * room <= budget:
                break
            cells_n //= 2
        self.cells = np.empty((2, cells_n + 1, room), dtype=np.int64)
        self.head = np.zeros((2, cells_n + 1), dtype=np.int64)
        self.count = np.zeros((2, cells_n + 1), dtype=np.int64)
        entries = (cells_n + 1) * room
        # A copy of the predicate's columns per entry: a cell is scanned in memory order.
        self.columns = tuple(
            tuple(np.empty(entries, dtype=dtype) for dtype in side) for side in slab.dtypes
        )
        left, right = (
            tuple(zip(self.columns[side], slab.columns[side], strict=True)) for side in (0, 1)
        )
        grid_build((live[0][0], live[1][0]), slots, self.cells, self.count, left, right)

    @property
    def nbytes(self) -> int:
        """The bytes the grid's arrays take."""
        arrays = (self.cells, self.head, self.count, *self.columns[0], *self.columns[1])
        return sum(int(a.nbytes) for a in arrays)

    def carry(self, old: _Slab, new: _Slab) -> _Grid:
        """Move the grid from ``old`` to its compacted copy ``new`` (``grid_compact``)."""
        grid_compact(self.cells, self.head, self.count, old.capacity, new.capacity, old.bounds)
        self.carried += 1
        return self


class _Slab:
    """The stored L and R tuples of the keys one instance owns, one slot per key.

    Slot s keeps, per side, the stored tuples' ts and seq (``ts[s, side]``,
    ``seq[s, side]``) and the columns the predicate reads
    (``columns[side][c][s * capacity + p]``), all in insertion order between the bounds'
    head and tail. Only its instance changes a slab between two switches, so it may grow
    or be compacted at any time; after a switch that changes an instance's keys, the
    instance gathers them from the slabs that held them into a new slab (others may read
    the same old slabs meanwhile; nobody changes them any more).
    """

    def __init__(
        self, slot_keys: NDArray[np.int64], dtypes: Dtypes, capacity: int, band: Band | None
    ) -> None:
        self.slot_keys = slot_keys
        self.dtypes = dtypes
        self.capacity = capacity
        self.band = band
        self.ts = np.empty((len(slot_keys), 2, capacity), dtype=np.int64)
        self.seq = np.empty((len(slot_keys), 2, capacity), dtype=np.int64)
        self.columns = tuple(
            tuple(np.empty(len(slot_keys) * capacity, dtype=dtype) for dtype in side)
            for side in dtypes
        )
        self.bounds = np.zeros((len(slot_keys), LAST + 1), dtype=np.int64)
        self.bounds[:, LAST] = NEVER
        # The band's cell of each stored tuple, and the grid over them (an indexed join).
        self.cell = np.empty((len(slot_keys), 2, capacity if band else 0), dtype=np.int64)
        self.grid: _Grid | None = None
        self.undecided = False
        self.regrid(0)

    def regrid(self, extra: int, keep: bool | None = None) -> None:
        """Rebuild the grid from the stores, with room for ``extra`` more tuples a cell.

        Or drop it: ``keep`` None decides by ``_worth_keeping``; ``False`` (a compaction
        in a run the nested loop joins) drops it and leaves the choice to the next run
        (``undecided``). A slab with a band and no grid is joined by the nested loop.
        """
        if self.band is None:
            return
        self.undecided = keep is False
        entries = (_live(self, 0), _live(self, 1))
        cells = (self._cells(0, entries[0]), self._cells(1, entries[1]))
        self.grid = None
        if _worth_keeping(cells) if keep is None else keep:
            order = (_arrival(self, 0, entries[0]), _arrival(self, 1, entries[1]))
            live = tuple((entries[side][o], cells[side][o]) for side, o in enumerate(order))
            self.grid = _Grid(self, extra, live, *_shift(cells))

    def _cells(self, side: int, entries: NDArray[np.int64]) -> NDArray[np.int64]:
        """The band cells of a side's stored tuples, given as store indices."""
        return self.cell[:, side].reshape(-1)[entries]

    @property
    def nbytes(self) -> int:
        """The bytes the slab's stores and grid take (its state)."""
        arrays = (self.ts, self.seq, self.bounds, self.cell, *self.columns[0], *self.columns[1])
        return sum(int(a.nbytes) for a in arrays) + (self.grid.nbytes if self.grid else 0)

    @classmethod
    def gather(
        cls,
        slot_keys: NDArray[np.int64],
        dtypes: Dtypes,
        where: dict[int, tuple[_Slab, int]],
        extra: int,
        band: Band | None,
        keep: bool | None = None,
        grid: bool = True,
    ) -> _Slab:
        """A slab for ``slot_keys`` with room for ``extra`` more tuples per key and side.

        Each key's live tuples and last ts come from ``where[key]`` (a slab and slot),
        compacted to the start of its new slot; keys not in ``where`` start empty. Its
        grid as ``regrid(0, keep)`` builds it (none with ``grid`` False: the caller's).
        """
        sizes = [
            int(old.bounds[o, 2 * side + 1] - old.bounds[o, 2 * side])
            for old, o in where.values()
            for side in (0, 1)
        ]
        capacity = max(MIN_CAPACITY, 2 * (max(sizes, default=0) + extra))
        new = cls(slot_keys, dtypes, capacity, None)
        new.band = band
        if band is not None:
            new.cell = np.empty((len(slot_keys), 2, capacity), dtype=np.int64)
        for s, key in enumerate(slot_keys.tolist()):
            if key not in where:
                continue
            old, o = where[key]
            new.bounds[s, LAST] = old.bounds[o, LAST]
            for side in (0, 1):
                head, tail = old.bounds[o, 2 * side], old.bounds[o, 2 * side + 1]
                live = tail - head
                new.ts[s, side, :live] = old.ts[o, side, head:tail]
                new.seq[s, side, :live] = old.seq[o, side, head:tail]
                if band is not None:
                    new.cell[s, side, :live] = old.cell[o, side, head:tail]
                at, was = s * new.capacity, o * old.capacity
                for to, of in zip(new.columns[side], old.columns[side], strict=True):
                    to[at : at + live] = of[was + head : was + tail]
                new.bounds[s, 2 * side + 1] = live
        if grid:
            new.regrid(0, keep)
        return new

    def reserve(self, extra: int, keep: bool | None = None) -> _Slab:
        """Itself if every store has room for ``extra`` more tuples, else a compacted copy.

        ``keep`` as ``regrid``'s; with None an undecided slab decides now. The copy takes
        this slab's grid along, renumbered, unless ``keep`` is False or the grid was
        carried ``CARRIED_COMPACTIONS`` times: then it builds one anew (a compaction
        changes no tuple's cell, only where it is stored, and a rebuild costs sorting the
        window).
        """
        tails = self.bounds[:, [1, 3]]
        if tails.size == 0 or int(tails.max()) + extra <= self.capacity:
            if keep is None and self.undecided:
                self.regrid(0)
            return self
        mine = {key: (self, s) for s, key in enumerate(self.slot_keys.tolist())}
        grid = self.grid
        if grid is None or keep is False or grid.carried >= CARRIED_COMPACTIONS:
            return _Slab.gather(self.slot_keys, self.dtypes, mine, extra, self.band, keep)
        new = _Slab.gather(self.slot_keys, self.dtypes, mine, extra, self.band, grid=False)
        new.grid = grid.carry(self, new)
        return new


@dataclass
class _Run:
    """A run's arguments to the kernels (``BandJoinKernel.process``) and their progress.

    Attributes:
        window: Keys, the band (WS), WA, each slot's progress and the run's ts, source,
            seq and storing keys (``store_keys``): the kernels' arguments in that order.
        reads: The input columns the predicate reads, of L and of R.
        bases: The sequence number of each side's first held row.
        cells: Each run tuple's band cells (``band_cells``), for a join with a band.
        out: The kernels' match buffer.
        stats: Matches in ``out``, comparisons made, groups run nested.
        unnoted: Where the nested kernel started storing tuples whose cells are not
            noted yet (each slot's progress and tails), or None.

    """

    window: tuple[Any, ...]
    reads: tuple[Columns, ...]
    bases: NDArray[np.int64]
    cells: NDArray[np.int64] | None
    out: NDArray[np.int64]
    stats: NDArray[np.int64]
    unnoted: tuple[NDArray[np.int64], NDArray[np.int64]] | None = None


class BandJoinKernel:
    """Operator 10 with a catalog predicate: an instance's keys in one kernel call per run."""

    def __init__(self, op: OPlus, keys: int, join: BandJoin, by_band: bool = False) -> None:
        self.op = op
        self.keys = keys
        self.join = join
        self.by_band = by_band
        self.groups = np.array([op.group_of(k) for k in range(keys)], dtype=np.int64)
        left, right = (dict(schema) for schema in op.inputs)
        self.dtypes: Dtypes = (
            tuple(column_dtype(left[name]) for name in join.reads[0]),
            tuple(column_dtype(right[name]) for name in join.reads[1]),
        )
        self.strings = tuple(  # the predicate's string columns (codes), by side
            tuple(c for c, name in enumerate(join.reads[side]) if schema[name] is ColumnType.STR)
            for side, schema in enumerate((left, right))
        )
        self.slabs: dict[int, _Slab] = {}
        # An instance whose keys changed at the last switch: its keys and where each one's
        # tuples lie (a slab and slot), gathered into its new slab on its next run.
        self.pending: dict[int, tuple[NDArray[np.int64], dict[int, tuple[_Slab, int]]]] = {}
        # Each instance's match buffer, kept from run to run: it grows (to what one group
        # of probes may find) once, not from its first size in every run.
        self.outs: dict[int, NDArray[np.int64]] = {}
        self.comparisons: dict[int, int] = {}
        self.nested_groups: dict[int, int] = {}
        self.band = join.band if join.indexed is not None else None

    def advance(self, instance: VSNInstance, watermark: int, budget: int) -> int:
        """Nothing to emit: a key purges its stored tuples when its next tuple arrives."""
        return watermark

    def switch(self, plan: EpochPlan) -> None:
        """Give every key's stored tuples to its owner under ``plan``, copying nothing.

        An instance whose keys do not change keeps its slab. Every other instance notes
        where its keys' tuples lie; it gathers them into a new slab on its next run, so
        the instances do that in parallel after the barrier rather than one of them for
        all while the others wait. The slabs it reads from stay as they are until then:
        their former owners have new slabs or left.
        """
        where = self._locations()
        owner = plan.owners[self.groups]
        slabs, pending = {}, {}
        for j in range(plan.parallelism):
            mine = np.flatnonzero(owner == j)
            kept = self.slabs.get(j)
            if kept is not None and np.array_equal(kept.slot_keys, mine):
                slabs[j] = kept
            else:
                pending[j] = (mine, {k: where[k] for k in mine.tolist() if k in where})
        self.slabs, self.pending = slabs, pending

    def _locations(self) -> dict[int, tuple[_Slab, int]]:
        """Where each key's stored tuples lie: a slab and its slot.

        Reads each dict in one step (``list``), so a caller outside the barrier (the
        state's bytes) never sees one change size as it goes.
        """
        where = {
            key: (slab, s)
            for slab in list(self.slabs.values())
            for s, key in enumerate(slab.slot_keys.tolist())
        }
        for _, at in list(self.pending.values()):
            where.update(at)
        return where

    def _all_slabs(self) -> list[_Slab]:
        """Every slab that holds a key's tuples, once each (built or still to gather from)."""
        slabs = {id(slab): slab for slab, _ in self._locations().values()}
        return list(slabs.values())

    def codes_in_use(self) -> list[NDArray[np.int32]]:
        """The string codes the slabs keep for their live tuples (the predicate compares them).

        A grid's copies are of live tuples too, or of expired ones its probes purge first.
        """
        found = []
        for slab in self._all_slabs():
            for side in (0, 1):
                if self.strings[side]:
                    live = _live(slab, side)
                    found += [slab.columns[side][c][live] for c in self.strings[side]]
        return found

    def tables_due(self, limit: int) -> bool:
        """Never: the stores hold a window's tuples; their codes go with the dictionary."""
        return False

    def compact_tables(self, limit: int) -> None:
        """Nothing to compact (``tables_due``)."""

    def process(self, instance: VSNInstance, nodes: ReadyNodes, start: int, stop: int) -> int:
        """Join the run's tuples for the instance's keys; return the data tuples seen."""
        ts, source, seq = data_nodes(nodes, start, stop)
        n = int(ts.shape[0])
        if n == 0:
            return 0
        owned = np.flatnonzero(owned_groups(instance)[self.groups])
        # Round robin: a key stores about one in K of the run's tuples per side (by band
        # more or fewer: a store that fills stops the kernel, which then grows it).
        extra = n // self.keys + 2
        if instance.j in self.pending:  # its keys changed at the last switch
            mine, where = self.pending.pop(instance.j)
            slab = _Slab.gather(mine, self.dtypes, where, extra, self.band)
        else:  # before the first switch nothing is stored yet, so a slab starts empty
            slab = self.slabs.get(instance.j) or _Slab(owned, self.dtypes, MIN_CAPACITY, self.band)
        assert np.array_equal(slab.slot_keys, owned), "a slab out of step with the mapping"
        slab = self.slabs[instance.j] = slab.reserve(extra)
        audit_groups(instance, self.groups[owned])
        held = tuple(store.rows() for store in instance.shared.sources)
        bases = np.array([held[0].base, held[1].base], dtype=np.int64)
        cells = None if self.band is None else self._run_cells(held, bases, source, seq)
        run_key = store_keys(seq, seq if cells is None else cells[0], self.keys, self.by_band)
        run = _Run(
            # The band: the join's O+ window is one tick longer than WS.
            (self.keys, self.op.ws_ms - 1, self.op.wa_ms, np.zeros(len(owned), np.int64), ts,
             source, seq, run_key),
            tuple(tuple(held[side].column(c) for c in self.join.reads[side]) for side in (0, 1)),
            bases,
            cells,
            self.outs.get(instance.j, np.empty((4, FIRST_MATCHES), dtype=np.int64)),
            np.zeros(3, dtype=np.int64),  # matches in out, comparisons, nested groups
        )  # fmt: skip
        found: list[NDArray[np.int64]] = []
        found_rows = 0
        status = OUT_FULL
        room = 8
        # The index serves the run if the slab keeps a grid as it starts; a rebuild may
        # drop the grid during the run (the nested loop then goes on from where the
        # indexed kernel stopped), but not start one: the nested loop walks key by key.
        indexed = slab.grid is not None
        while status != DONE:
            indexed = indexed and slab.grid is not None
            if indexed:
                status = self._indexed(slab, run)
            else:
                status = self._nested(slab, run, OUTPUT_PIECE_ROWS - found_rows)
            if run.stats[0]:
                found.append(run.out[:, : run.stats[0]].copy())
                found_rows += int(run.stats[0])
            if status == PIECE or (indexed and status != DONE and found_rows >= OUTPUT_PIECE_ROWS):
                # The indexed kernel stops between groups, the nested one between chunks,
                # every slot at the same run tuple, so what it found are all the matches
                # of the tuples before it: they go out now, however many more the rest of
                # the run makes.
                done = int(run.window[3][0])
                self._emit(instance, held, ts, source, seq, order_matches(_joined(found), n))
                instance.release_before(int(ts[done]))
                found, found_rows = [], 0
            if status == OUT_FULL and run.stats[0] < run.out.shape[1] // 2:
                # The kernel stops when a group's matches might not fit (at most the
                # window's size each): grow the buffer instead of calling it per window.
                run.out = np.empty((4, 2 * run.out.shape[1]), dtype=np.int64)
            if status == STORE_FULL:
                extra = 2 * extra
                slab = self.slabs[instance.j] = slab.reserve(extra, None if indexed else False)
            elif status == INDEX_FULL:
                slab.regrid(room)
                room = 2 * room
            run.stats[0] = 0
        self.outs[instance.j] = run.out
        self.comparisons[instance.j] = self.comparisons.get(instance.j, 0) + int(run.stats[1])
        self.nested_groups[instance.j] = self.nested_groups.get(instance.j, 0) + int(run.stats[2])
        if found:
            self._emit(instance, held, ts, source, seq, order_matches(_joined(found), n))
        return n

    def _nested(self, slab: _Slab, run: _Run, piece: int) -> int:
        """The nested kernel (``join.run``) from where the run is; its status.

        It goes in chunks that could make ``CHUNK_PAIRS`` pairs, and stops after a chunk,
        every key at the same run tuple (``PIECE``), once it found ``piece`` matches (at
        the next chunk's end if ``piece`` <= 0).

        With a band, the tuples it stores get their cells (``store_cells``) when it stops
        for the slab to be compacted or ends, so that a later grid can index them.
        """
        progress = run.window[3]
        if run.cells is not None and run.unnoted is None:
            run.unnoted = (progress.copy(), slab.bounds[:, [1, 3]].copy())
        status: int = self.join.run(
            slab.slot_keys, *run.window, slab.ts, slab.seq, slab.bounds, slab.columns[0],
            slab.columns[1], *self._fill(slab.columns, run.reads), *run.reads, run.bases,
            run.out, run.stats, piece, CHUNK_PAIRS,
        )  # fmt: skip
        if run.cells is not None and run.unnoted is not None and status in (STORE_FULL, DONE):
            before, tails = run.unnoted
            store_cells(
                slab.slot_keys, self.keys, run.window[5], run.window[7], run.cells, before,
                progress, tails, slab.cell,
            )  # fmt: skip
            run.unnoted = None
        return status

    def _indexed(self, slab: _Slab, run: _Run) -> int:
        """The indexed kernel (``join.indexed``) from where the run is; its status."""
        assert self.join.indexed is not None and slab.grid is not None
        grid = slab.grid
        status: int = self.join.indexed(
            slab.slot_keys, *run.window, run.cells, slab.ts, slab.seq, slab.cell, slab.bounds,
            slab.columns[0], slab.columns[1], *self._fill(slab.columns, run.reads), *run.reads,
            run.bases, grid.cells, grid.head, grid.count, grid.shift, SMALL_WINDOW,
            BLOCK_SHIFT if self.by_band else -1,
            *grid.columns, *self._fill(grid.columns, run.reads), run.out, run.stats,
        )  # fmt: skip
        return status

    @staticmethod
    def _fill(to: tuple[Columns, ...], reads: tuple[Columns, ...]) -> tuple[Fill, Fill]:
        """Per side, each column of ``to`` (a store's or a grid's) paired with its input."""
        left, right = (tuple(zip(to[side], reads[side], strict=True)) for side in (0, 1))
        return left, right

    def _run_cells(
        self,
        held: tuple[SourceRows, ...],
        bases: NDArray[np.int64],
        source: NDArray[np.int64],
        seq: NDArray[np.int64],
    ) -> NDArray[np.int64]:
        """Each run tuple's cell and its probe's first and last cells (``band_cells``).

        ``bases``: the sequence number of each side's first held row.
        """
        assert self.band is not None
        if self.band.key is None:  # each side's key is a column's value
            (left,), (right,) = self.band.reads
            return run_band_cells(
                source, seq, bases, held[0].column(left), held[1].column(right), self.band.width
            )
        keys = np.empty(source.shape[0], dtype=np.float64)
        for side in (0, 1):
            mine = (source == 0) if side == 0 else (source != 0)
            rows = seq[mine] - bases[side]
            columns = tuple(held[side].column(name)[rows] for name in self.band.reads[side])
            keys[mine] = self.band.keys(side, columns)
        return band_cells(keys, self.band.width)

    def state_bytes(self) -> int:
        """The bytes of every slab's stores and grids: the join's window state."""
        return sum(slab.nbytes for slab in self._all_slabs())

    def _emit(
        self,
        instance: VSNInstance,
        held: tuple[SourceRows, ...],
        ts: NDArray[np.int64],
        source: NDArray[np.int64],
        seq: NDArray[np.int64],
        matches: NDArray[np.int64],
    ) -> None:
        """Rows of the matches, given in the reference's order: by tuple, key, then j."""
        index, key, partner, j = matches
        t, s, q = ts[index], source[index], seq[index]
        arrived_left = s == 0
        rows = (np.where(arrived_left, q, partner), np.where(arrived_left, partner, q))
        pool = instance.shared
        payload = [
            _gathered(pool.sources[side], held[side], name, rows[side])
            for side, name in self.join.payload
        ]
        cause = (UPDATED, t, s, q, key, 0, j)
        instance.emit_block(OutputBlock.of_columns(pool.output_schema, t, cause, payload))
