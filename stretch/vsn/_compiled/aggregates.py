"""Kernel path of wordcount, paircount and longest_tweet (Operators 9 and 14).

The three are multi-window aggregates over one stream of tweets: f_MK gives a tweet's
distinct keys, f_U adds 1 (count) or raises the window's maximum to the tweet's length,
and f_O emits ``(key, value)`` when a window expires. Here:

* ``KeyTable`` computes f_MK once per input row, shared by every instance (VSN's shared
  input): each distinct key gets a number, with its key group computed once by the
  operator's own f_mu, so ownership is exactly the generic path's;
* each instance keeps, for each window start ``l``, a table of the keys it owns
  (``_Window``), updated by ``update_window`` without the GIL;
* a window whose end the watermark passed (``l + WS <= W``) emits its rows with the
  generic path's causes (its creator's ``(ts, source, seq, key index)``) and is dropped.
  The release sorts rows by ``(ts, cause)``, so when a window is emitted does not change
  the output, only its latency.

A reconfiguration (``switch``) moves each key's entries to the tables of its new owner.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from stretch.model._order_kernels import order_ties
from stretch.model.batch import compaction_due
from stretch.model.instance import EXPIRED
from stretch.model.oplus import OPlus
from stretch.operators.kernels._aggregate import (
    CREATED,
    distinct_in_rows,
    lookup_codes,
    pair_codes,
    update_window,
)
from stretch.operators.kernels._hashing import build_index, index_size, insert
from stretch.vsn._compiled._runs import audit_groups, data_nodes, owned_groups
from stretch.vsn._compiled._tokens import TokenTable
from stretch.vsn._ingest import SourceStore
from stretch.vsn._instance import ReadyNodes, VSNInstance
from stretch.vsn._output_block import OutputBlock
from stretch.vsn._reconfiguration import EpochPlan

__all__ = ["AggregateKernel", "KeyRows", "KeyTable"]

logger = logging.getLogger(__name__)

_NONE = np.empty(0, dtype=np.int64)

KEY_COST = 120
"""Bytes a key costs beside its token's: its Python string (about 70), its Arrow copy,
group, pair code and index slots."""


@dataclass(frozen=True)
class KeyRows:
    """f_MK of rows ``base..end-1``: row seq's keys, its tweet's length.

    Row seq's key numbers are ``numbers[offsets[i]:offsets[i + 1]]`` for ``i = seq -
    base``, in f_MK's order, and ``lengths[i]`` is its tweet's length in characters
    (longest_tweet's value). A snapshot: later rows are written past ``end``.
    """

    base: int
    end: int
    offsets: NDArray[np.int64]
    numbers: NDArray[np.int64]
    lengths: NDArray[np.int64]


class KeyTable:
    """f_MK of the rows read so far, as key numbers, and each key's string and group.

    ``read`` numbers the keys of new rows once, for every instance, and drops the rows
    the source dropped (no instance reads them any more). Arrays grow by doubling and
    rows are only ever appended, so a ``KeyRows`` snapshot stays valid.

    Args:
        op: The operator (its key groups and f_mu).
        kind: ``"words"``, ``"hashtags"`` or ``"pairs"``.
        b: paircount's largest distance of a pair's words.

    """

    def __init__(self, op: OPlus, kind: Literal["words", "hashtags", "pairs"], b: int = 0) -> None:
        self.op = op
        self.kind = kind
        self.b = b
        self.strings: list[str] = []
        self.groups = np.empty(0, dtype=np.int64)
        self._rows = KeyRows(0, 0, np.zeros(1, dtype=np.int64), _NONE, _NONE)
        self._words = TokenTable()  # words, or hashtags; paircount's key is a pair of them
        self._codes = np.empty(0, dtype=np.int64)  # pairs: the code of each key number
        self._code_slots = build_index(self._codes, 0, index_size(0))
        self._seen = np.empty(0, dtype=np.int64)  # words: the last row that kept each key
        self._lock = threading.Lock()
        self._arrow_strings: list[pa.Array] = []  # strings as Arrow chunks, sizes halving
        self._arrow_lock = threading.Lock()

    def key_strings(self, numbers: NDArray[np.int64]) -> pa.Array:
        """The strings of key numbers ``numbers``, as an Arrow array.

        The keys' strings are kept as Arrow chunks, each at most half the one before
        (the newest keys are appended as a chunk, then equal neighbours merge), so a key
        is copied O(log n) times in all and a lookup is one ``take``.
        """
        n = len(self.strings)
        with self._arrow_lock:
            chunks = self._arrow_strings
            held = sum(len(chunk) for chunk in chunks)
            if held < n:
                chunks.append(pa.array(self.strings[held:n], pa.string()))
                while len(chunks) > 1 and len(chunks[-2]) <= 2 * len(chunks[-1]):
                    chunks[-2:] = [pa.concat_arrays(chunks[-2:])]
            table = pa.chunked_array(list(chunks), pa.string())
        return table.take(numbers).combine_chunks()

    @property
    def held_bytes(self) -> int:
        """About what the keys cost: the tokens' bytes and ``KEY_COST`` per key."""
        return self._words.held_bytes + KEY_COST * len(self.strings)

    def renumber(self, live: NDArray[np.int64]) -> NDArray[np.int64]:
        """Keep the keys ``live`` names, numbered again 0, 1, ... in their old order.

        Called at a barrier: every instance has processed the rows read so far (they met
        after them), so their keys are needed no more and they are dropped. The keys kept
        get a new token table (paircount's: the words of the pairs kept). Returns old
        number -> new (-1: dropped); the caller renumbers the keys it holds. O(keys +
        bytes kept).
        """
        with self._lock:
            n = len(self.strings)
            keep = np.zeros(n, dtype=np.bool_)
            keep[live] = True
            kept = np.flatnonzero(keep)
            mapping = np.full(n, -1, dtype=np.int64)
            mapping[kept] = np.arange(kept.shape[0])
            self.strings = [self.strings[k] for k in kept.tolist()]
            self.groups = self.groups[kept]
            if self.kind == "pairs":
                codes = self._codes[kept]
                firsts, seconds = codes >> 31, codes & (2**31 - 1)
                words = np.unique(np.concatenate([firsts, seconds]))
                renamed = np.full(len(self._words.strings), -1, dtype=np.int64)
                renamed[words] = np.arange(words.shape[0])
                self._words = TokenTable.of([self._words.strings[w] for w in words.tolist()])
                self._codes = (renamed[firsts] << 31) | renamed[seconds]
                self._code_slots = build_index(
                    self._codes, kept.shape[0], index_size(kept.shape[0])
                )
            else:  # a key is its token: both numberings stay alike
                self._words = TokenTable.of(self.strings)
            with self._arrow_lock:
                self._arrow_strings = [pa.array(self.strings, pa.string())]
            end = self._rows.end
            self._rows = KeyRows(end, end, np.zeros(1, dtype=np.int64), _NONE, _NONE)
        return mapping

    def read(self, store: SourceStore, upto: int) -> KeyRows:
        """The keys of rows up to ``upto`` of ``store``, computing those not read yet."""
        rows = self._rows
        if upto <= rows.end:
            return rows
        with self._lock:
            rows = self._rows
            if upto <= rows.end:
                return rows
            held = store.rows()
            if rows.end == rows.base < held.base:  # nothing read yet; the source starts later
                rows = KeyRows(held.base, held.base, np.zeros(1, dtype=np.int64), _NONE, _NONE)
            start = rows.end
            texts = store.dictionary.decode_arrow(
                held.column("tweet")[start - held.base : upto - held.base]
            )
            numbers, counts = (
                self._pairs(texts) if self.kind == "pairs" else self._keys(texts, start)
            )
            rows = _dropped(rows, min(held.base, start))
            at = start - rows.base
            used = int(rows.offsets[at])
            self._rows = KeyRows(
                rows.base,
                upto,
                _put(rows.offsets, at + 1, used + np.cumsum(counts)),
                _put(rows.numbers, used, numbers),
                _put(rows.lengths, at, np.asarray(pc.utf8_length(texts), dtype=np.int64)),
            )
            return self._rows

    def _keys(self, texts: pa.Array, first_row: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Words or hashtags of rows ``first_row``, ...: numbered by kernels, repeats dropped."""
        numbers, offsets, new = self._words.numbers(texts, hashtags=self.kind == "hashtags")
        self._add_keys(new)  # the token table and the keys number them alike
        if self._seen.shape[0] < len(self.strings):
            grown = np.full(2 * len(self.strings), -1, dtype=np.int64)
            grown[: self._seen.shape[0]] = self._seen
            self._seen = grown
        return distinct_in_rows(numbers, offsets, self._seen, first_row)

    def _pairs(self, texts: pa.Array) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Pairs: tokens split and numbered, pairs built and numbered, by kernels."""
        tokens, offsets, _ = self._words.numbers(texts, hashtags=False)
        codes, code_offsets = pair_codes(tokens, offsets, self.b)
        numbers = lookup_codes(codes, self._code_slots, self._codes)
        unknown = numbers < 0
        if unknown.any():
            strings = self._words.strings
            new = np.unique(codes[unknown])
            self._add_keys(
                [f"{strings[code >> 31]} {strings[code & (2**31 - 1)]}" for code in new.tolist()]
            )
            n = len(self.strings)
            self._codes = _put(self._codes, n - new.shape[0], new)
            if index_size(n) > self._code_slots.shape[0]:
                self._code_slots = build_index(self._codes, n, 2 * index_size(n))
            else:
                insert(self._code_slots, self._codes, n - new.shape[0], n)
            numbers = lookup_codes(codes, self._code_slots, self._codes)
        return numbers, np.diff(code_offsets)

    def _add_keys(self, keys: list[str]) -> None:
        """Number new keys (the next numbers, in order); their groups by the operator's f_mu."""
        if not keys:
            return
        group_of = self.op.group_of
        groups = np.fromiter((group_of(key) for key in keys), dtype=np.int64, count=len(keys))
        self.groups = _put(self.groups, len(self.strings), groups)
        self.strings.extend(keys)


def _keys_of(rows: KeyRows, at: NDArray[np.int64]) -> NDArray[np.int64]:
    """The key numbers of rows ``at`` (indexes into ``rows``), for the ownership audit."""
    parts = [rows.numbers[rows.offsets[i] : rows.offsets[i + 1]] for i in at.tolist()]
    return np.concatenate(parts) if parts else _NONE


def _dropped(rows: KeyRows, base: int) -> KeyRows:
    """``rows`` without the rows before ``base`` (itself if there are none).

    The rows kept are copied to the front of arrays as long as the old ones, so the rows
    read next are appended without growing them again.
    """
    drop = base - rows.base
    if drop <= 0:
        return rows
    kept = rows.end - rows.base
    first, last = int(rows.offsets[drop]), int(rows.offsets[kept])
    return KeyRows(
        base,
        rows.end,
        _front(rows.offsets, drop, kept + 1, first),
        _front(rows.numbers, first, last),
        _front(rows.lengths, drop, kept),
    )


def _front(array: NDArray[np.int64], start: int, stop: int, less: int = 0) -> NDArray[np.int64]:
    """A new array as long as ``array`` that starts with ``array[start:stop] - less``."""
    front = np.empty(array.shape[0], dtype=np.int64)
    np.subtract(array[start:stop], less, out=front[: stop - start])
    return front


def _put(array: NDArray[np.int64], at: int, values: NDArray[np.int64]) -> NDArray[np.int64]:
    """Write ``values`` at ``array[at:]``; a doubled copy if ``array`` is too short."""
    stop = at + values.shape[0]
    if stop > array.shape[0]:
        grown = np.empty(max(stop, 2 * array.shape[0], 1024), dtype=np.int64)
        grown[:at] = array[:at]
        array = grown
    array[at:stop] = values
    return array


@dataclass
class _Window:
    """One instance's table of the window ``[l, l + WS)``: its owned keys' entries."""

    slots: NDArray[np.int64]
    keys: NDArray[np.int64]
    values: NDArray[np.int64]
    created: NDArray[np.int64]
    count: NDArray[np.int64]

    @classmethod
    def of(cls, entries: _Entries, capacity: int = 256) -> _Window:
        """A table holding ``entries`` (distinct keys), with room for ``capacity``."""
        n = entries.keys.shape[0]
        capacity = max(capacity, 2 * n)
        keys = np.empty(capacity, dtype=np.int64)
        values = np.empty(capacity, dtype=np.int64)
        created = np.empty((CREATED, capacity), dtype=np.int64)
        keys[:n], values[:n], created[:, :n] = entries.keys, entries.values, entries.created
        slots = build_index(keys, n, index_size(capacity))
        return cls(slots, keys, values, created, np.array([n], dtype=np.int64))

    @property
    def size(self) -> int:
        """The number of entries."""
        return int(self.count[0])

    @property
    def nbytes(self) -> int:
        """The bytes of its arrays (its room, not only its entries)."""
        arrays = (self.slots, self.keys, self.values, self.created, self.count)
        return sum(int(a.nbytes) for a in arrays)

    def grown(self) -> _Window:
        """A copy with twice the room."""
        return _Window.of(self.entries(), 2 * self.keys.shape[0])

    def entries(self, pick: NDArray[np.bool_] | slice = slice(None)) -> _Entries:
        """The entries (or those ``pick`` selects) as columns."""
        n = self.size
        return _Entries(self.keys[:n][pick], self.values[:n][pick], self.created[:, :n][:, pick])


@dataclass
class _Entries:
    """Window entries as columns: key numbers, values and creators (``CREATED`` rows)."""

    keys: NDArray[np.int64]
    values: NDArray[np.int64]
    created: NDArray[np.int64]


_NO_ENTRIES = _Entries(
    np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty((CREATED, 0), np.int64)
)


class AggregateKernel:
    """wordcount, paircount or longest_tweet on ``update_window``, one table per window.

    Args:
        op: The operator.
        keys: Its f_MK over tweets, numbered once per row.
        take_max: Keep each key's maximum (longest_tweet) rather than a count.

    """

    def __init__(self, op: OPlus, keys: KeyTable, take_max: bool) -> None:
        self.op = op
        self.keys = keys
        self.take_max = take_max
        self.windows: dict[int, dict[int, _Window]] = {}  # instance -> l -> table
        self._renumbered_bytes = 0  # the keys' held_bytes after the last renumbering

    def process(self, instance: VSNInstance, nodes: ReadyNodes, start: int, stop: int) -> int:
        """Update the owned keys' windows with the run's tuples; return the tuples seen."""
        ts, source, seq = data_nodes(nodes, start, stop)
        if ts.shape[0] == 0:
            return 0
        (store,) = instance.shared.sources
        rows = self.keys.read(store, int(seq.max()) + 1)
        at = seq - rows.base
        groups = self.keys.groups
        owned = owned_groups(instance)
        if instance.shared.audit is not None:
            touched = groups[_keys_of(rows, at)]
            audit_groups(instance, touched[owned[touched]])
        mine = self.windows.setdefault(instance.j, {})
        for l, end in self._spans(int(ts[0]), int(ts[-1])):
            lo, hi = np.searchsorted(ts, [l, end]).tolist()
            window = mine.get(l) or _Window.of(_NO_ENTRIES)
            while lo < hi:
                lo = update_window(
                    lo, hi, ts, source, seq, at, rows.offsets, rows.numbers, groups,
                    owned, rows.lengths, self.take_max, window.slots, window.keys,
                    window.values, window.created, window.count,
                )  # fmt: skip
                if lo < hi:
                    window = window.grown()
            if window.size:
                mine[l] = window
        return int(ts.shape[0])

    def _spans(self, first_ts: int, last_ts: int) -> list[tuple[int, int]]:
        """The tables ``[l, end)`` that tuples from ``first_ts`` to ``last_ts`` update.

        Here every window holding one of them: a tuple updates WS / WA tables.
        """
        op = self.op
        first, last = op.earliest_win_l(first_ts), op.latest_win_l(last_ts)
        return [(l, l + op.ws_ms) for l in range(first, last + 1, op.wa_ms)]

    def window_sets(self) -> int:
        """The window sets held: entries of every instance's tables."""
        return sum(w.size for mine in self.windows.values() for w in mine.values())

    def advance(self, instance: VSNInstance, watermark: int, budget: int) -> int:
        """Emit and drop the instance's windows that ended by ``watermark`` (L15-17).

        In order of their end, stopping before a window that ends before ``watermark``
        once ``budget`` rows went out; returns the end of the first window not out
        (``watermark`` when all are).
        """
        mine = self.windows.get(instance.j)
        if not mine:
            return watermark
        ws = self.op.ws_ms
        ended: list[tuple[int, _Entries]] = []
        rows = 0
        reached = watermark
        for l in sorted(l for l in mine if l + ws <= watermark):
            if rows >= budget and l + ws < watermark:
                reached = l + ws
                break
            entries = mine.pop(l).entries()
            ended.append((l + ws, entries))
            rows += entries.keys.shape[0]
        self._emit(instance, ended)
        return reached

    def _emit(self, instance: VSNInstance, windows: list[tuple[int, _Entries]]) -> None:
        """The rows f_O gives for windows' entries (ending at each ts), as one block.

        The block is in ``(ts, cause)`` order: one sort over every window's rows, and one
        lookup of their keys' strings, however many windows close together.
        """
        if not windows:
            return
        ends = np.repeat(
            np.array([ts for ts, _ in windows], dtype=np.int64),
            [entries.keys.shape[0] for _, entries in windows],
        )
        numbers = np.concatenate([entries.keys for _, entries in windows])
        values = np.concatenate([entries.values for _, entries in windows])
        created = np.concatenate([entries.created for _, entries in windows], axis=1)
        c_ts, c_source, c_seq, c_index = created
        order = order_ties(ends, created)  # the windows' ends ascend: each by its causes
        if order.shape[0] == 0:  # in that order already
            order = np.arange(ends.shape[0])
        keys = self.keys.key_strings(numbers[order])
        cause = (EXPIRED, c_ts[order], c_source[order], c_seq[order], c_index[order], 0, 0)
        schema = instance.shared.output_schema
        instance.emit_block(OutputBlock.of_columns(schema, ends, cause, [keys, values[order]]))

    def state_bytes(self) -> int:
        """Every instance's window tables and the key table (``KeyTable.held_bytes``).

        Reads each dict in one step (``list``): instances add and drop tables meanwhile.
        """
        tables = [w for mine in list(self.windows.values()) for w in list(mine.values())]
        return sum(w.nbytes for w in tables) + self.keys.held_bytes

    def codes_in_use(self) -> list[NDArray[np.int32]]:
        """None: the keys are numbered by the operator's own table, not by string codes."""
        return []

    def tables_due(self, limit: int) -> bool:
        """``compaction_due`` for the key table (``KeyTable.held_bytes``)."""
        return compaction_due(self.keys.held_bytes, self._renumbered_bytes, limit)

    def compact_tables(self, limit: int) -> None:
        """If due, drop the keys no table holds, renumbering the rest (``KeyTable.renumber``).

        Run at a barrier (no instance runs). The tables' entries get the new numbers and
        their indexes are rebuilt; the output does not change (rows go out in cause order
        and carry the key's string). O(keys + entries).
        """
        if not self.tables_due(limit):
            return
        tables = [(j, l, w) for j, mine in self.windows.items() for l, w in mine.items()]
        live = [w.keys[: w.size] for _, _, w in tables]
        before = len(self.keys.strings)
        mapping = self.keys.renumber(np.concatenate(live) if live else _NONE)
        logger.info(
            "operator %r: key table renumbered: %d -> %d keys",
            self.op.name,
            before,
            len(self.keys.strings),
        )
        for j, l, w in tables:
            entries = w.entries()
            entries.keys = mapping[entries.keys]
            self.windows[j][l] = _Window.of(entries, w.keys.shape[0])
        self._renumbered_bytes = self.keys.held_bytes

    def switch(self, plan: EpochPlan) -> None:
        """Move every entry to its key's owner under ``plan`` (no instance is running).

        A table whose keys all stay with its instance, and that receives none, is kept.
        """
        owner = plan.owners
        groups = self.keys.groups
        moved: dict[int, dict[int, _Window]] = {j: {} for j in range(plan.parallelism)}
        starts = sorted({l for mine in self.windows.values() for l in mine})
        for l in starts:
            parts = {j: mine[l] for j, mine in self.windows.items() if l in mine}
            dest = {j: owner[groups[w.keys[: w.size]]] for j, w in parts.items()}
            for j in range(plan.parallelism):
                sources = {i: d == j for i, d in dest.items() if (d == j).any()}
                if sources.keys() == {j} and sources[j].all():
                    moved[j][l] = parts[j]
                elif sources:
                    moved[j][l] = _gather([parts[i].entries(pick) for i, pick in sources.items()])
        self.windows = moved


def _gather(parts: list[_Entries]) -> _Window:
    """One table holding ``parts``' entries (keys are disjoint)."""
    return _Window.of(
        _Entries(
            np.concatenate([p.keys for p in parts]),
            np.concatenate([p.values for p in parts]),
            np.concatenate([p.created for p in parts], axis=1),
        )
    )
