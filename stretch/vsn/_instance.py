"""One pool thread of the VSN runtime: an O+ instance running processVSN (Alg. 4).

Each of the n pool threads owns an ``OPlusInstance`` over the ONE shared state sigma (a
list of G ``WindowStore``s) whose ``owns(g)`` is ``mapping[g] == j`` for the epoch the
thread is in. A connected thread reads every ready tuple of ESG_in (it is one of its
readers) and, per tuple (Alg. 4):

* the first control tuple of the next epoch makes the thread meet the instances of the
  epoch at the barrier (L7, L10-11), where the last to arrive connects or disconnects
  instances exactly once (L12-13); then every instance switches mapping (L14). Every
  reader sees the merged stream in the same order, so all switch at the same node; see
  ``stretch.vsn._reconfiguration`` for why this point, and not the paper's first tuple
  beyond gamma;
* then windows that expired at W and belong to the thread's key groups are output and
  shifted (L15-17), and the tuple updates the windows of the keys the thread owns (L18).

Output rows are buffered per thread (a kernel's as ``OutputBlock``s, the generic path's as
``OutputRow``s) and released to ESG_out (the thread is one of its sources) as one sorted
block: its rows before W in ``(ts, cause)`` order, followed by the watermark W (Lemma 2).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from scalegate import CONTROL, DATA
from stretch.errors import StoppedError
from stretch.model.instance import OPlusInstance, OutputRow
from stretch.model.mapping import groups_of
from stretch.model.oplus import END_OF_INPUT, OPlus
from stretch.model.windows import WindowStore
from stretch.vsn._audit import OwnershipAudit
from stretch.vsn._output_block import OutputBlock
from stretch.vsn._reconfiguration import EpochBarrier, EpochPlan

__all__ = ["CompiledOperator", "ReadyNodes", "SharedPool", "StartPackage", "VSNInstance"]

logger = logging.getLogger(__name__)

MIN_RUN = 4096
"""The ready tuples an instance takes from ESG_in at once, at the least (if ready)."""

MAX_RUN = 65536
"""The most ready tuples an instance takes from ESG_in at once. Each run costs a fixed
amount of Python under the GIL (``RUN_TARGET_NS``); the indexed ScaleJoin at p16 on two
cores made 2,397 runs in all of at most 16,384 tuples (5.7 s) and 877 of at most 65,536
(4.6 s), on 2 x 1M tuples with ``partition=band``."""

FULL_LOG_WAIT_S = 0.05
"""How long an instance waiting for room in ESG_out parks at once while the log is full."""

OUTPUT_PIECE_ROWS = 1 << 17
"""Rows a kernel's expiry emits before the instance releases them (``_expire``); windows
go out whole, so a piece is this plus one window at most."""

FIRST_PIECE = 64
"""The nodes an instance's kernel gets in its first call; the pieces then grow at most
twofold a call (``_next_piece``), so a join whose window fills with matching tuples does
not make a whole run's matches at once."""

RUN_TARGET_NS = 20_000_000
"""How long a run should take: an instance takes as many tuples as fit in this much of its
thread's CPU time at its last run's pace, from ``MIN_RUN`` to ``MAX_RUN``. CPU time, not
wall time: a run's wall time also counts the waits for the GIL and for a core, which
grow with the instances, and runs shortened by them paid their fixed Python more often
and waited longer still (16 instances of the indexed ScaleJoin on two cores: 374 runs
each paced by wall time, 152 by CPU time, 2 x 1M tuples).

Each run costs the instance a fixed amount of Python under the GIL (taking the batch, the
kernel call's dispatch, building the output block, the release to ESG_out), which the
instances pay one after another: with 2 x 1M tuples of the indexed ScaleJoin, four
instances held the GIL for 1.54 s in all at 4096 tuples a run and 0.72 s at 16,384
(``py-spy record --gil``). Cheap tuples (forward, the indexed join, aggregates) so take
longer runs; expensive ones (the nested loop over a long window) keep runs of ``MIN_RUN``,
so that a run still ends well inside a controller period (its busy time is counted at
its end) and its output is not held back. A run never passes a control tuple, so the
barrier of a reconfiguration waits for no more input either way, and under light load a
run is as short as what is ready.
"""


def _next_run_limit(tuples: int, took_ns: int) -> int:
    """The tuples to take next, from the last run's ``tuples`` and time (``RUN_TARGET_NS``)."""
    return int(min(MAX_RUN, max(MIN_RUN, RUN_TARGET_NS * tuples // max(took_ns, 1))))


def _next_piece(piece: int, nodes: int, rows: int) -> int:
    """The nodes a kernel gets at once next, from the last call's ``nodes`` and output ``rows``.

    A join makes its output while it processes a run (an aggregate's goes out in pieces at
    expiry, ``_expire``), so the instance hands it as many nodes as, at the last call's
    rows per node, make ``OUTPUT_PIECE_ROWS`` rows: a join where most pairs match holds
    about one piece of output at a time, not a run's matches. It grows at most twofold a
    call (to ``MAX_RUN``), so while the rows per node hold it stays within two pieces. A
    sudden rise in rows per node within one call: the band join then releases its matches
    whenever it found a piece (``release_before``), the indexed kernel between groups of
    the call's tuples, the nested one between chunks of them (``CHUNK_PAIRS``).
    """
    at_rate = nodes * OUTPUT_PIECE_ROWS // max(rows, 1)
    return int(max(1, min(at_rate, 2 * piece, MAX_RUN)))


@dataclass(frozen=True)
class ReadyNodes:
    """Ready ESG_in nodes as columns (a copy of a ``ReadyBatch``, or a slice of one)."""

    ts: NDArray[np.int64]
    source: NDArray[np.int64]
    kind: NDArray[np.int64]
    payload: NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    def tail(self, start: int) -> ReadyNodes:
        """Nodes ``start..`` as a copy."""
        return ReadyNodes(
            self.ts[start:].copy(),
            self.source[start:].copy(),
            self.kind[start:].copy(),
            self.payload[start:].copy(),
        )

    @classmethod
    def empty(cls) -> ReadyNodes:
        """No nodes."""
        none = np.empty(0, dtype=np.int64)
        return cls(none, none, none, none)

    @classmethod
    def of(cls, batch: Any) -> ReadyNodes:
        """Columns of a ``scalegate.ReadyBatch``."""
        return cls(
            np.asarray(batch.ts, dtype=np.int64),
            np.asarray(batch.source, dtype=np.int64),
            np.asarray(batch.kind, dtype=np.int64),
            np.asarray(batch.payload, dtype=np.int64),
        )


@dataclass(frozen=True)
class StartPackage:
    """What a provisioned instance starts from (Lemma 3).

    Attributes:
        plan: The epoch it joins.
        watermark: W-bar, the watermark at the control tuple that triggered the switch.
        backlog: The ready tuples after that control tuple that the instance that
            connected it had already taken from ESG_in.

    """

    plan: EpochPlan
    watermark: int
    backlog: ReadyNodes


class CompiledOperator(Protocol):
    """A catalog operator's kernel path: L15-18 of Alg. 4 over a run of ready nodes."""

    def process(self, instance: VSNInstance, nodes: ReadyNodes, start: int, stop: int) -> int:
        """Handle the data nodes ``start..stop`` for the instance's keys; return their count."""

    def advance(self, instance: VSNInstance, watermark: int, budget: int) -> int:
        """Expire the instance's windows that ended by ``watermark`` (Alg. 4 L15-17).

        Windows go out in order of their end, and once ``budget`` rows went out the rest
        wait: returns the watermark up to which every window is out (``watermark`` when
        all are), and the caller releases those rows before asking again.
        """

    def switch(self, plan: EpochPlan) -> None:
        """Re-partition the kernel's state for ``plan``'s mapping (no instance is running)."""

    def codes_in_use(self) -> list[NDArray[np.int32]]:
        """The string codes its state keeps (no instance is running), for a compaction."""

    def tables_due(self, limit: int) -> bool:
        """Whether its own tables (numbered keys) are due a compaction at ``limit`` bytes.

        Due: they take ``limit`` bytes and twice what their last compaction kept. Read
        while instances run.
        """

    def compact_tables(self, limit: int) -> None:
        """Compact those tables if due (no instance is running)."""

    def state_bytes(self) -> int:
        """The bytes of the arrays that hold its windows, every instance's together.

        Read while instances run (a snapshot that may be a run behind).
        """


class SharedPool(Protocol):
    """What an instance uses of the pool it belongs to (``stretch.vsn._pool.InstancePool``).

    Attributes:
        op: The operator.
        esg_in: The gate the instances read.
        esg_out: The gate the instances write.
        sources: The input sources' stores, by source index.
        compiled: The operator's kernel path, or None for the generic path.
        audit: The ownership audit, if one is on.
        plans: The plan of the epoch in force and of every epoch announced after it.
        barrier: The epoch barrier (Alg. 4 L10-11).
        stopping: Set when the pipeline stops or an instance failed.
        drainer_wake: Wakes the drainer of ESG_out.
        output_room: Cleared while the output log is full (the drainer takes nothing).
        output_schema: The Arrow schema of the output payload.

    """

    op: OPlus
    esg_in: Any
    esg_out: Any
    sources: Sequence[Any]
    compiled: CompiledOperator | None
    audit: OwnershipAudit | None
    plans: dict[int, EpochPlan]
    barrier: EpochBarrier
    stopping: bool
    drainer_wake: threading.Event
    output_room: threading.Event
    output_schema: pa.Schema

    def state_for(self, instance: VSNInstance) -> Sequence[WindowStore]:
        """sigma as ``instance`` accesses it."""

    def fail(self, exc: BaseException) -> None:
        """Record an instance's failure and stop the others."""

    def switch(
        self,
        leader: VSNInstance,
        left: EpochPlan,
        target: EpochPlan,
        backlog: ReadyNodes,
        trigger_ts: int,
    ) -> None:
        """Alg. 4 L12-13, run once by the last instance at the barrier."""

    def store_blocks(self, blocks: Sequence[OutputBlock]) -> int:
        """Keep blocks until the drainer takes their rows; return the first row's id."""

    def backlog(self) -> bool:
        """Whether a source has input waiting for room in ESG_in."""


class VSNInstance:
    """Pool thread j: idle in the pool, or connected and running processVSN.

    Args:
        j: The instance id (its ESG_in reader id and ESG_out source id).
        shared: What all pool threads share.

    """

    def __init__(self, j: int, shared: SharedPool) -> None:
        self.j = j
        self.shared = shared
        self.plan = min(shared.plans.values(), key=lambda plan: plan.epoch)
        self.connected = False
        self.busy_ns = 0
        self.parked_ns = 0  # parked on a full output log (``_waiting_for_room``): not busy
        self.tuples_in = 0
        self.tuples_out = 0
        self.wake = threading.Event()
        self._start: StartPackage | None = None
        self._pending_from: int | None = None  # a provisioned instance's start watermark
        self._rows: list[OutputRow] = []
        self._blocks: list[OutputBlock] = []
        self._released = -END_OF_INPUT
        self._run_limit = MIN_RUN
        self._piece = FIRST_PIECE  # nodes a kernel gets at once (_next_piece)
        self.oplus = OPlusInstance(
            shared.op, shared.state_for(self), owns=self._owns, emit=self.emit_row
        )
        self.thread = threading.Thread(
            target=self._run, name=f"vsn-{shared.op.name}-{j}", daemon=True
        )

    def provision(self, package: StartPackage) -> None:
        """Hand the thread what it starts from; it connects on its next loop (Cond. 1)."""
        self._pending_from = package.watermark  # first: reading_from() never sees a gap
        self._start = package
        self.wake.set()

    def reading_from(self) -> int | None:
        """The watermark from which the instance reads input, or None if it reads none."""
        pending = self._pending_from
        if pending is not None:
            return pending
        return self.oplus.watermark if self.connected else None

    def take_output(self) -> list[OutputBlock]:
        """Remove and return the rows not yet released (a decommissioned instance's)."""
        self._seal_rows()
        blocks, self._blocks = self._blocks, []
        return blocks

    def adopt_output(self, blocks: list[OutputBlock]) -> None:
        """Take over unreleased rows of a decommissioned instance."""
        self._blocks.extend(blocks)

    def emit_row(self, row: OutputRow) -> None:
        """Buffer an output row until the watermark passes its ts (the generic path's output)."""
        self._rows.append(row)

    def emit_block(self, block: OutputBlock) -> None:
        """Buffer a block of output rows until the watermark passes them (a kernel's output).

        Its rows must be in ``(ts, cause)`` order. Blocks are merged at release: joined
        when each starts after the end of the one before (a kernel's blocks of successive
        runs do), else sorted together.
        """
        if len(block):
            self._blocks.append(block)

    def release_before(self, ts: int) -> None:
        """Release the rows made so far before ``ts`` now, in the middle of a run.

        For a kernel whose run makes more than a piece of output (``OUTPUT_PIECE_ROWS``):
        it promises that no later row of the run is before ``ts``, which becomes the
        instance's watermark in ESG_out. Waits for room there as every release does, so
        the instance holds about a piece of a run's rows while the readers catch up.
        """
        self._release(ts)

    def _owns(self, group: int) -> bool:
        return self.plan.mapping[group] == self.j

    def _seal_rows(self) -> None:
        """Turn the buffered ``OutputRow``s into a sorted block."""
        if self._rows:
            self._blocks.append(OutputBlock.of_rows(self.shared.op.output, self._rows).sorted())
            self._rows = []

    def _run(self) -> None:
        """The pool thread's loop: it parks on ``wake`` while idle or nothing is ready.

        ``wake`` is set by producers after they add to ESG_in, by ``provision`` and by
        stop; it is cleared before looking for work, so no wake-up is lost. After taking
        nodes (which frees room in ESG_in) the thread wakes the drainer if input waits
        for room.
        """
        shared = self.shared
        try:
            while not shared.stopping:
                self.wake.clear()
                package = self._start
                if package is not None:
                    self._start = None
                    self._begin(package)
                    continue
                if self.connected:
                    batch = shared.esg_in.get_ready_batch(self.j, self._run_limit)
                    if batch is not None and len(batch.ts) > 0:
                        if shared.backlog():
                            shared.drainer_wake.set()
                        started, parked = time.perf_counter_ns(), self.parked_ns
                        cpu = time.thread_time_ns()
                        self._process(ReadyNodes.of(batch), 0)
                        took = time.perf_counter_ns() - started - (self.parked_ns - parked)
                        self.busy_ns += took
                        cpu = time.thread_time_ns() - cpu
                        self._run_limit = _next_run_limit(len(batch.ts), cpu)
                        continue
                self.wake.wait()
        except BaseException as exc:  # surfaced by Pipeline.join / stats
            if isinstance(exc, StoppedError) and shared.stopping:
                return
            logger.exception("instance %d of %r failed", self.j, shared.op.name)
            shared.fail(exc)

    def _begin(self, package: StartPackage) -> None:
        """Connect with the state Lemma 3 gives, then process the backlog."""
        self.plan = package.plan
        self.oplus.watermark = package.watermark
        self.oplus.set_owned_groups(groups_of(self.plan.mapping, self.j))
        self._released = package.watermark
        self.connected = True
        self._pending_from = None  # before any barrier: no later provision is cleared
        if len(package.backlog):
            self._process(package.backlog, 0)

    def _process(self, nodes: ReadyNodes, start: int) -> None:
        """processVSN (Alg. 4) for each node from ``start``, then release output up to W.

        A compiled operator takes runs of nodes at once, up to the next control tuple. No
        node of such a run can reconfigure, so the per-node steps reduce to L15-18: the
        kernel updates the run's windows (L18), then expires those that ended by the run's
        last ts (L15-17; no tuple of the run falls in a window that ended before it, so
        this gives the same rows). Control tuples go through the steps one by one.
        """
        compiled = self.shared.compiled
        i, n = start, len(nodes)
        while i < n:
            stop = self._run_end(nodes, i) if compiled is not None else i
            if stop > i:
                assert compiled is not None
                stop = min(stop, i + self._piece)
                before = self.tuples_out + self._buffered_rows()
                self.tuples_in += compiled.process(self, nodes, i, stop)
                made = self.tuples_out + self._buffered_rows() - before
                self._piece = _next_piece(self._piece, stop - i, made)
                self.oplus.watermark = max(self.oplus.watermark, int(nodes.ts[stop - 1]))
                self._expire(compiled, self.oplus.watermark)
                if self._buffered_rows() >= OUTPUT_PIECE_ROWS:
                    self._release()
                i = stop
                continue
            stop = n if compiled is None else i + 1
            if not self._steps(nodes, i, stop):
                return
            i = stop
        self._release()

    def _buffered_rows(self) -> int:
        """Output rows made and not released yet."""
        return len(self._rows) + sum(len(block) for block in self._blocks)

    def _expire(self, compiled: CompiledOperator, watermark: int) -> None:
        """L15-17 on the kernel, its rows released every ``OUTPUT_PIECE_ROWS`` or so.

        A release may wait for room in ESG_out, which stays full while the output log is
        (``RuntimeSettings.max_uncommitted_rows``): however many rows the windows ending
        now hold, the instance keeps about one piece of them while the readers catch up.
        """
        while (reached := compiled.advance(self, watermark, OUTPUT_PIECE_ROWS)) < watermark:
            self._release(reached)

    def _run_end(self, nodes: ReadyNodes, i: int) -> int:
        """The end of the run from node ``i`` in which no node can reconfigure."""
        controls = np.flatnonzero(nodes.kind[i:] == CONTROL)
        return i + int(controls[0]) if controls.size else len(nodes)

    def _steps(self, nodes: ReadyNodes, start: int, stop: int) -> bool:
        """Alg. 4 node by node; return whether the instance is still connected."""
        shared = self.shared
        oplus = self.oplus
        compiled = shared.compiled
        ts_col, kind_col = nodes.ts[start:stop].tolist(), nodes.kind[start:stop].tolist()
        source_col = nodes.source[start:stop].tolist()
        payload_col = nodes.payload[start:stop].tolist()
        for offset, (kind, ts) in enumerate(zip(kind_col, ts_col, strict=True)):
            i = start + offset
            if kind == CONTROL:  # L7-14 at the first control tuple of the next epoch
                target = shared.plans.get(payload_col[offset])  # None: in force, dropped
                if (
                    target is not None
                    and target.epoch > self.plan.epoch
                    and not self._reconfigure(nodes, i, target)
                ):
                    return False
                continue
            if ts > oplus.watermark:  # L9-10: W grows
                oplus.advance(ts)  # L15-17
                if compiled is not None:
                    self._expire(compiled, ts)
            if kind != DATA:
                continue
            if compiled is not None:
                self.tuples_in += compiled.process(self, nodes, i, i + 1)
            else:  # L18
                source = shared.sources[source_col[offset]]
                oplus.handle_input_tuple(source.tuple_at(payload_col[offset]))
                self.tuples_in += 1
        return True

    def _reconfigure(self, nodes: ReadyNodes, i: int, target: EpochPlan) -> bool:
        """Alg. 4 L10-14 at control node ``i``: barrier, the switch (by one), the new mapping.

        Returns:
            Whether this instance is still connected afterwards.

        """
        shared = self.shared
        self._release()
        left = self.plan
        trigger_ts = int(nodes.ts[i])

        def switch(leader: int) -> None:
            shared.switch(self, left, target, nodes.tail(i + 1), trigger_ts)

        if not shared.barrier.arrive(target.epoch, left.parallelism, self.j, switch):
            self.connected = False
            return False
        self.plan = target
        if self.j >= target.parallelism:
            self.connected = False
            return False
        self.oplus.set_owned_groups(groups_of(target.mapping, self.j))
        return True

    def _release(self, watermark: int | None = None) -> None:
        """Move buffered rows with ``ts < W`` to ESG_out, then the watermark W (Lemma 2).

        W is the instance's watermark, or ``watermark`` (below it) when a kernel's
        expiry went out in pieces (``_expire``): every row before it is out then.

        The buffered blocks are merged here, once per run of nodes, if they are not in
        order one after the other already (a kernel's blocks of successive runs are: they
        then go out as they are, not joined); the rows released get consecutive ESG_out
        payloads (the pool's row ids), the rest stay buffered.

        Rows at exactly W stay buffered until W grows (or input ends): ESG_out makes a
        node ``(W, j)`` ready only once every lower-indexed instance has passed W, and
        the drainer completes a ts only once a later node is ready, so releasing them
        earlier would not show them sooner. Released earlier, they could wait for room
        forever: at an epoch barrier the instances that arrived have W as their ESG_out
        frontier and stop there, so a higher-indexed instance that released a window's
        thousands of rows at W (paircount closes windows with that many), before or at
        the barrier, found ESG_out full of rows that could not become ready. Rows before
        W are ready once the lower-indexed instances reach W, so every add ends.
        """
        shared = self.shared
        watermark = self.oplus.watermark if watermark is None else watermark
        self._seal_rows()
        if self._blocks:
            ready, self._blocks = OutputBlock.split(OutputBlock.ordered(self._blocks), watermark)
            if ready:
                n = sum(len(block) for block in ready)
                first = shared.store_blocks(ready)
                shared.esg_out.add_batch(
                    self.j,
                    np.concatenate([block.ts for block in ready]),
                    np.arange(first, first + n, dtype=np.int64),
                    self._waiting_for_room,
                )
                self.tuples_out += n
                shared.drainer_wake.set()
        if watermark > self._released:
            shared.esg_out.add_watermark(self.j, watermark, self._waiting_for_room)
            self._released = watermark
            shared.drainer_wake.set()

    def _waiting_for_room(self) -> bool:
        """Called while an add to ESG_out waits for room: return whether to give up.

        Wakes the drainer, which frees the room (the part of the add already in may have
        made other instances' rows ready); while the output log is full (the drainer
        takes nothing until a reader commits) it parks on that instead of retrying every
        millisecond; that time is not counted as busy (the load an autoscaler sees: a slow
        reader is not a busy operator). Gives up when the pipeline stops.
        """
        shared = self.shared
        shared.drainer_wake.set()
        if not shared.output_room.is_set():
            parked = time.perf_counter_ns()
            shared.output_room.wait(FULL_LOG_WAIT_S)
            self.parked_ns += time.perf_counter_ns() - parked
        return shared.stopping
