"""The instance pool: the n O+ instances of a VSN operator and what they share.

``setup(O+, m, n)`` (section 7) creates n instances sharing the state sigma and connects
m of them to ESG_in and ESG_out; the rest wait in the pool. The pool holds sigma, the
gates, the input sources, the plans of every epoch and the epoch barrier, and performs
the switch of Alg. 4 L12-13 on behalf of the one instance that runs it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stretch.errors import ReconfigurationError, StretchError
from stretch.model.oplus import END_OF_INPUT, OPlus
from stretch.model.windows import WindowStore
from stretch.vsn._audit import AuditedState, OwnershipAudit
from stretch.vsn._instance import CompiledOperator, ReadyNodes, StartPackage, VSNInstance
from stretch.vsn._output_block import OutputBlock
from stretch.vsn._reconfiguration import EpochBarrier, EpochPlan, ReconfigurationRecord

__all__ = ["InstancePool"]

logger = logging.getLogger(__name__)


class InstancePool:
    """The n instances of one operator, the shared state sigma and the epoch machinery.

    Args:
        op: The operator.
        esg_in: The gate the instances read (one source per input stream).
        esg_out: The gate the instances write (one source per connected instance).
        sources: The input sources' stores, by source index (for payload lookups).
        parallelism: m, the instances connected at start.
        max_parallelism: n, the pool size.
        compiled: The operator's kernel path, if it has one.
        audit: If given, every key-group access is checked against Theorem 3.
        at_barrier: Run by the last instance at each epoch barrier, before the switch,
            while no instance runs (the pipeline compacts its string dictionary there).
        on_switch: Run after each switch, with the plan switched to.

    """

    def __init__(
        self,
        op: OPlus,
        esg_in: Any,
        esg_out: Any,
        sources: Sequence[Any],
        first_plan: EpochPlan,
        max_parallelism: int,
        compiled: CompiledOperator | None = None,
        audit: OwnershipAudit | None = None,
        at_barrier: Callable[[], None] | None = None,
        on_switch: Callable[[EpochPlan], None] | None = None,
    ) -> None:
        self.op = op
        self.esg_in = esg_in
        self.esg_out = esg_out
        self.sources = sources
        self.compiled = compiled
        self.audit = audit
        self.sigma = [WindowStore() for _ in range(op.key_groups)]
        self.plans: dict[int, EpochPlan] = {first_plan.epoch: first_plan}
        self.records: dict[int, ReconfigurationRecord] = {}
        self.barrier = EpochBarrier()
        self.stopping = False
        self.error: BaseException | None = None
        self.drainer_wake = threading.Event()
        self.output_room = threading.Event()  # cleared while the output log is full
        self.output_room.set()
        self.drained_ts = -END_OF_INPUT  # the output log's watermark D (set by the drainer)
        self.current = first_plan
        self._at_barrier = at_barrier
        self._on_switch = on_switch
        self.output_schema = op.output.arrow()
        self._blocks: dict[int, OutputBlock] = {}  # by their first row id, increasing
        self._untaken: dict[int, int] = {}  # rows of each block the drainer has not taken
        self._row_lock = threading.Lock()
        self._next_row = 0
        self.instances = [VSNInstance(j, self) for j in range(max_parallelism)]

    def state_for(self, instance: VSNInstance) -> Sequence[WindowStore]:
        """sigma as ``instance`` accesses it (audited if an audit is set)."""
        if self.audit is None:
            return self.sigma
        return AuditedState(self.sigma, self.audit, instance)

    def start(self) -> None:
        """Start every pool thread and connect instances ``0..m-1`` (epoch 0)."""
        first = self.current
        for instance in self.instances:
            instance.thread.start()
        empty = ReadyNodes.empty()
        for j in range(first.parallelism):
            self.instances[j].provision(StartPackage(first, -(2**63 - 1), empty))

    def stop(self, timeout_s: float) -> None:
        """Stop every pool thread and join each for up to ``timeout_s``."""
        self.stopping = True
        self.barrier.stop()
        self.output_room.set()
        for instance in self.instances:
            instance.wake.set()
        deadline = time.monotonic() + timeout_s
        for instance in self.instances:
            if instance.thread.is_alive():
                instance.thread.join(max(0.0, deadline - time.monotonic()))
            if instance.thread.is_alive():
                logger.warning("pool thread %s did not stop in time", instance.thread.name)

    def fail(self, exc: BaseException) -> None:
        """Record an instance's failure and stop the others."""
        if self.error is None:
            self.error = exc
        self.stopping = True
        self.barrier.stop()
        self.drainer_wake.set()
        self.output_room.set()

    def raise_failure(self) -> None:
        """Raise the first failure of an instance, if any.

        Raises:
            StretchError: wrapping the instance's exception.

        """
        if self.error is not None:
            msg = f"operator {self.op.name!r}: an instance failed: {self.error!r}"
            raise StretchError(msg) from self.error

    def wake_all(self) -> None:
        """Wake the connected instances and those about to connect (new input is ready)."""
        for instance in self.instances:
            if instance.connected or instance.reading_from() is not None:
                instance.wake.set()

    def backlog(self) -> bool:
        """Whether a source has input waiting for room in ESG_in (read without locks)."""
        return any(source.has_backlog() for source in self.sources)

    def trim_horizon(self) -> int | None:
        """The ts below which no instance will look up an input row again, if known.

        An instance reads rows at or after its watermark (the tuples it has yet to take
        from ESG_in), and a join looks back one window (WS + 1) from there; a provisioned
        instance not started yet reads from its start watermark. One window and one
        advance more are kept as a margin. The output log's watermark D counts too: a
        snapshot keeps the rows from D - WS - WA - 1 on (``stretch.vsn.snapshot``).
        """
        marks = [i.reading_from() for i in self.instances]
        known = [m for m in marks if m is not None] + [self.drained_ts]
        if min(known) <= -END_OF_INPUT:
            return None
        return min(known) - self.op.ws_ms - self.op.wa_ms - 1

    def store_blocks(self, blocks: Sequence[OutputBlock]) -> int:
        """Keep blocks until the drainer takes their rows; return the first row's id.

        The rows, block after block, get the consecutive ids (ESG_out payloads) ``first ..
        first + n - 1``.
        """
        with self._row_lock:
            first = self._next_row
            for block in blocks:
                if len(block):
                    self._blocks[self._next_row] = block
                    self._untaken[self._next_row] = len(block)
                    self._next_row += len(block)
        return first

    def take_rows(self, row_ids: NDArray[np.int64]) -> list[OutputBlock]:
        """The rows of ESG_out payloads ``row_ids``, given in ``ts`` order (each once).

        Consecutive ids (one instance's rows, in ``(ts, cause)`` order) are slices of the
        blocks holding them, returned as they are, in that order: no row is copied.
        Otherwise the rows are gathered from those blocks into one block, each run of
        equal ``ts`` by cause (several instances' rows interleave there). A block is
        dropped once every row of it was taken. O(len(row_ids) log(blocks held) + blocks
        held), plus, when gathering, the rows of each block's span the ids reach.
        """
        n = len(row_ids)
        if n == 0:
            return []
        with self._row_lock:
            firsts = np.fromiter(self._blocks, dtype=np.int64, count=len(self._blocks))
            which = np.searchsorted(firsts, row_ids, side="right") - 1
            counts = np.bincount(which, minlength=len(firsts))
            used = np.flatnonzero(counts)
            blocks = [(first, self._blocks[first]) for first in firsts[used].tolist()]
            for first, count in zip(firsts[used].tolist(), counts[used].tolist(), strict=True):
                self._untaken[first] -= count
                if self._untaken[first] == 0:
                    del self._blocks[first], self._untaken[first]
        low, high = int(row_ids[0]), int(row_ids[-1]) + 1
        if high - low == n and bool(np.all(np.diff(row_ids) == 1)):
            return [
                block.slice(max(low - first, 0), min(high - first, len(block)))
                for first, block in blocks
            ]
        block_of = np.zeros(len(firsts), dtype=np.int64)
        block_of[used] = np.arange(len(used))
        gathered = [block for _, block in blocks]
        return [OutputBlock.gather(gathered, block_of[which], row_ids - firsts[which])]

    def switch(
        self,
        leader: VSNInstance,
        left: EpochPlan,
        target: EpochPlan,
        backlog: ReadyNodes,
        trigger_ts: int,
    ) -> None:
        """Alg. 4 L12-13, run once by the last instance at the barrier of ``target``.

        Provisioning adds the new instances first to ESG_out (as sources starting at the
        leader's frontier, Lemma 3) and then to ESG_in (as readers at the leader's
        handle), and gives them ``backlog``: what the leader had already taken after the
        control tuple at ``trigger_ts``. Decommissioning removes the leaving instances
        first from ESG_in and then from ESG_out; their unreleased rows go to instance 0,
        which every epoch has.

        Raises:
            ReconfigurationError: a gate refused the change.

        """
        old, new = left.parallelism, target.parallelism
        if self._at_barrier is not None:
            self._at_barrier()
        if self.compiled is not None:
            self.compiled.switch(target)
        if new > old:
            ids = list(range(old, new))
            if not self.esg_out.add_sources(ids, leader.j):
                msg = f"epoch {target.epoch}: ESG_out refused sources {ids}"
                raise ReconfigurationError(msg)
            if not self.esg_in.add_readers(ids, leader.j):
                msg = f"epoch {target.epoch}: ESG_in refused readers {ids}"
                raise ReconfigurationError(msg)
            for j in ids:
                self.instances[j].provision(StartPackage(target, leader.oplus.watermark, backlog))
        elif new < old:
            ids = list(range(new, old))
            if not self.esg_in.remove_readers(ids, leader.j):
                msg = f"epoch {target.epoch}: ESG_in refused to remove readers {ids}"
                raise ReconfigurationError(msg)
            for j in ids:
                self.instances[0].adopt_output(self.instances[j].take_output())
            if not self.esg_out.remove_sources(ids, leader.j):
                msg = f"epoch {target.epoch}: ESG_out refused to remove sources {ids}"
                raise ReconfigurationError(msg)
        self.current = target
        self.drainer_wake.set()  # removed sources may have made ESG_out rows ready
        for epoch in list(self.plans):  # no instance looks up an earlier plan any more
            if epoch < target.epoch:
                self.plans.pop(epoch, None)
        record = self.records.get(target.epoch)
        if record is not None:
            record.completed_ns = time.perf_counter_ns()
            record.trigger_ts = trigger_ts
        if self._on_switch is not None:
            self._on_switch(target)
