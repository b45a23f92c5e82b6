"""The runtime's front door: a running VSN operator (Fig. 5) behind one typed interface.

``Pipeline`` is what ``stretch.setup(op, m, n)`` returns, and everything outside
``stretch.vsn`` (the service, the controller, the CLI) uses only its methods: ``add``
(admission: bounds, lateness, dropping late rows, decided here under the source's lock),
``watermark``, ``close``, ``set_allowed_lateness``, ``reconfigure``, ``output``,
``commit``, ``status``, ``load``. Inside, ESG_in, the instance pool, ESG_out and the output
log are private. Producers' rows go through each source's reorder buffer into ESG_in
(``addSTRETCH``, Alg. 5: a source's pending control tuples go in first, at its last ts);
``reconfigure`` queues an epoch plan and puts its control tuple in every source; a drainer
thread reads ESG_out and appends its rows, gathered from the instances' output blocks, to
the output log, sorting rows of different instances by ``(ts, cause)`` so that the log
equals ``run_sn`` row for row.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from scalegate import DATA, ElasticScaleGate
from stretch.errors import (
    CapacityError,
    ClosedError,
    InputError,
    OperatorError,
    ReconfigurationError,
    StoppedError,
)
from stretch.model.batch import StringDictionary
from stretch.model.mapping import Shard, default_mapping
from stretch.model.oplus import END_OF_INPUT, OPlus
from stretch.model.schema import CAUSE, TS, conform
from stretch.operators.kernels import BandJoinSpec, ForwardSpec
from stretch.vsn._audit import OwnershipAudit
from stretch.vsn._compiled import compile_operator
from stretch.vsn._feeding import Feeder
from stretch.vsn._ingest import SourceStore
from stretch.vsn._output_block import CAUSE_WIDTH, OutputBlock
from stretch.vsn._output_log import OutputLog
from stretch.vsn._pool import InstancePool
from stretch.vsn._reconfiguration import EpochPlan, ReconfigurationRecord, plan
from stretch.vsn.settings import MAX_LATENESS_MS, MAX_PARALLELISM, RuntimeSettings
from stretch.vsn.snapshot import PipelineSnapshot
from stretch.vsn.status import (
    Admission,
    GateStatus,
    InstanceStatus,
    LoadCounters,
    OutputStatus,
    PipelineStatus,
    ReconfigurationStatus,
    SourceStatus,
)

__all__ = ["CAUSE", "Pipeline"]

logger = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 10.0
"""How long ``shutdown`` waits for each thread."""
DRAIN_NODES = 1 << 14
"""The most ESG_out nodes the drainer takes at once."""
FULL_LOG_CHECK_S = 0.05
"""How often the drainer, waiting for room in a full output log, still moves backlogs and
checks for a stop."""


class Pipeline:
    """One O+ operator run with VSN parallelism: n pool threads, m of them connected.

    Args:
        op: The operator.
        parallelism: m, the instances connected at start (1 <= m <= n).
        max_parallelism: n, the pool threads.
        settings: Buffers, bounds and checks (``RuntimeSettings``; default settings if
            None).

    Raises:
        ReconfigurationError: m is outside ``1..n`` or n exceeds the gates' limits.

    """

    def __init__(
        self,
        op: OPlus,
        parallelism: int,
        max_parallelism: int,
        settings: RuntimeSettings | None = None,
        *,
        resume: PipelineSnapshot | None = None,
    ) -> None:
        if not 1 <= parallelism <= max_parallelism <= MAX_PARALLELISM:
            msg = (
                f"operator {op.name!r}: need 1 <= parallelism ({parallelism}) <= "
                f"max_parallelism ({max_parallelism}) <= {MAX_PARALLELISM}"
            )
            raise ReconfigurationError(msg)
        settings = settings or RuntimeSettings()
        _check_shard(op, settings.shard)
        self.op = op
        self.max_parallelism = max_parallelism
        self.settings = settings
        self._dictionary = StringDictionary()
        self._sources = [
            SourceStore(
                i,
                schema,
                f"source {i} of {op.name!r}",
                self._dictionary,
                settings.allowed_lateness_ms,
                0 if resume is None else resume.sources[i].first_seq,
            )
            for i, schema in enumerate(op.inputs)
        ]
        self._esg_in = ElasticScaleGate(
            sources=range(op.n_inputs),
            readers=range(parallelism),
            capacity=settings.capacity,
            max_sources=max(op.n_inputs, 1),
            max_readers=max_parallelism,
            block=True,
        )
        self._esg_out = ElasticScaleGate(
            sources=range(parallelism),
            readers=[0],
            capacity=settings.capacity,
            max_sources=max_parallelism,
            max_readers=1,
            block=True,
        )
        first = (
            EpochPlan(
                0, parallelism, tuple(default_mapping(op.key_groups, parallelism, settings.shard))
            )
            if resume is None
            else EpochPlan(resume.epoch, resume.parallelism, resume.mapping)
        )
        self._switched = threading.Condition()
        self._pool = InstancePool(
            op,
            self._esg_in,
            self._esg_out,
            self._sources,
            first,
            max_parallelism,
            compile_operator(op) if settings.compiled else None,
            OwnershipAudit() if settings.audit else None,
            at_barrier=self._compact,
            on_switch=self._on_switch,
        )
        self._feeder = Feeder(self._esg_in, self._pool, self._sources)
        self._feeder.trim_rows = settings.trim_rows
        schema = self._pool.output_schema
        if settings.shard is not None:
            schema = schema.append(pa.field(CAUSE, pa.list_(pa.int64(), CAUSE_WIDTH)))
        self._log = OutputLog(schema)
        self._resume_ts: int | None = None  # output rows before it are in the log already
        if resume is not None:
            self._log.restore(resume.output)
            self._resume_ts = resume.output.complete_before
            # The snapshot kept the input from D on (less a window): trim from there.
            self._pool.drained_ts = resume.output.complete_before
        self._latest = first
        self._reconfigure_lock = threading.Lock()
        self._compaction_epoch = -1  # the epoch of the latest compaction requested
        self._chain_threads: list[threading.Thread] = []
        self._drainer = threading.Thread(target=self._drain, name=f"vsn-{op.name}-out", daemon=True)
        self._pool.start()
        self._drainer.start()

    # -- input (Alg. 5) ------------------------------------------------------------------

    def add(
        self,
        source: int,
        batch: pa.Table | pa.RecordBatch,
        late: Literal["fail", "drop"] = "fail",
        *,
        on_admit: Callable[[pa.Table], None] | None = None,
        bounded: bool = True,
        watermark: int | None = None,
    ) -> Admission:
        """Admit a batch (any order) to input ``source``; say what was added and dropped.

        Rows go through the source's reorder buffer (docs/design.md decision 8): they reach
        ESG_in in ``ts`` order once the source's released watermark passes them. Never
        waits for room in ESG_in: rows that do not fit now wait in the source (its
        backlog) and go in as readers free room. Admission is decided here, under the
        source's lock: the bounds of ``settings`` first, then lateness.

        Args:
            source: The input source.
            batch: Rows in the source's schema, any order.
            late: Rows older than the released watermark: ``"fail"`` refuses the batch,
                ``"drop"`` adds the rest and reports them as dropped.
            on_admit: Called, under the source's lock, with the rows admitted (conformed,
                late ones dropped) before they go in: a journal writes them ahead. If it
                raises, nothing is added.
            bounded: Apply the bounds of ``settings`` (False: re-adding rows admitted
                before, e.g. from a journal).
            watermark: Then promise no tuple before this ``ts``, as ``watermark()`` does,
                in the same release of the reorder buffer.

        Raises:
            InputError: unknown source.
            ClosedError: the source is closed.
            StoppedError: the pipeline was stopped.
            StretchError: an instance failed.
            SchemaError: the batch does not match the source's schema.
            CapacityError: a bound of ``settings`` would be passed (retry later).
            LateTupleError: ``late="fail"`` and a row is older than the source's
                released watermark (its ``rows`` says how many); nothing was added.

        """
        store = self._source(source)
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        with store.lock:
            self._check_open(store)
            data = conform(table, store.schema, store.where)
            if bounded:
                self._admit(store, data, watermark)
            ts = data.column(TS).to_numpy()
            dropped = 0
            if late == "drop":
                keep = ts >= store.reorder.released
                dropped = int(len(keep) - keep.sum())
                if dropped:
                    data, ts = data.filter(pa.array(keep)), ts[keep]
            else:
                store.reorder.check(ts)
            if on_admit is not None:
                on_admit(data)
            self._release(store, store.reorder.push(data, watermark))
        self._pool.wake_all()
        self._feeder.help(store)
        self._request_compaction()
        return Admission(len(ts), dropped, int(ts.min()) if len(ts) else None)

    def _admit(self, store: SourceStore, data: pa.Table, watermark: int | None) -> None:
        """Refuse a batch that would pass a bound of ``settings`` (the caller holds the lock).

        ``watermark`` is the add's: the rows it frees do not count as held.

        Raises:
            CapacityError: rows of earlier batches still wait for ESG_in (with
                ``refuse_behind_backlog``), the output log holds ``max_uncommitted_rows``,
                or the reorder buffer would hold more than ``max_held_rows``.

        """
        settings = self.settings
        if settings.refuse_behind_backlog:
            if self._feeder.feed(store):
                self._pool.wake_all()
            if store.unfed:
                msg = (
                    f"{store.where}: {store.unfed} rows of earlier batches still wait for "
                    "room in the ingest gate (for readers, or for the other sources to catch "
                    "up); retry later"
                )
                raise CapacityError(msg)
        limit = settings.max_uncommitted_rows
        if limit is not None:
            uncommitted = self._log.uncommitted
            if uncommitted >= limit:
                msg = (
                    f"{store.where}: the output log holds {uncommitted} rows not committed "
                    f"(limit {limit}); read the output and commit it, then retry"
                )
                raise CapacityError(msg)
        limit = settings.max_held_rows
        if limit is not None:
            held = store.reorder.held_after(data.column(TS).to_numpy(), watermark)
            if held > limit:
                msg = (
                    f"{store.where}: its reorder buffer would hold {held} rows (limit "
                    f"{limit}) waiting for the released watermark (largest ts - allowed "
                    f"lateness {store.reorder.allowed_lateness_ms} ms); send a watermark "
                    "to release them, then retry"
                )
                raise CapacityError(msg)

    def set_allowed_lateness(self, source: int, allowed_lateness_ms: int) -> None:
        """From now on, let rows of ``source`` arrive this far behind its largest ``ts``.

        Raises:
            InputError: unknown source.
            OperatorError: a lateness outside ``0..MAX_LATENESS_MS``.

        """
        store = self._source(source)
        if not 0 <= allowed_lateness_ms <= MAX_LATENESS_MS:
            msg = (
                f"{store.where}: allowed lateness must be in 0..{MAX_LATENESS_MS} ms, "
                f"got {allowed_lateness_ms}"
            )
            raise OperatorError(msg)
        with store.lock:
            store.reorder.allowed_lateness_ms = allowed_lateness_ms

    def watermark(self, source: int, ts: int) -> None:
        """Promise that ``source`` adds no tuple before ``ts`` (a lower one is ignored).

        Raises:
            InputError: unknown source.
            ClosedError: the source is closed.
            StoppedError: the pipeline was stopped.

        """
        store = self._source(source)
        with store.lock:
            self._check_open(store)
            self._release(store, store.reorder.advance(ts))
        self._pool.wake_all()
        self._feeder.help(store)
        self._request_compaction()

    def close(self, source: int | None = None) -> None:
        """End of input for ``source`` (or every source): flushes every window.

        Rows still waiting for room go in as readers free it (``Feeder.help`` waits a
        little for them).
        """
        stores = self._sources if source is None else [self._source(source)]
        for store in stores:
            with store.lock:
                if not store.input_closed:
                    self._release(store, store.reorder.flush())
        self._pool.wake_all()
        for store in stores:
            self._feeder.help(store)
        self._request_compaction()

    def backlog(self, source: int) -> int:
        """Rows of ``source`` released but waiting for room in ESG_in (read without locks).

        Raises:
            InputError: unknown source.

        """
        return self._source(source).unfed

    def _release(self, store: SourceStore, rows: pa.Table | None) -> None:
        """Store the rows the reorder buffer freed and move what fits into ESG_in."""
        if rows is not None:
            store.append(rows)
        self._feeder.feed(store)

    # -- reconfiguration (Alg. 5-6) --------------------------------------------------------

    def reconfigure(
        self,
        parallelism: int | None = None,
        mapping: Sequence[int] | None = None,
        *,
        cause: str = "manual",
        reason: str | None = None,
    ) -> int:
        """Queue a reconfiguration; return its epoch. It completes asynchronously.

        Its control tuple enters every open source at the source's last ts; the instances
        switch at the first of them in the merged stream (Alg. 4 L10-14), without waiting
        for more input. Requests made before an earlier one completes are applied after
        it, in order. Never waits for room in ESG_in: a control tuple that does not fit
        waits in its source and goes in before the source's next rows.

        Args:
            parallelism: m*, 1..n (None keeps the latest requested count).
            mapping: f_mu* over the G key groups into ``0..m*-1`` (None: round robin).
            cause: Who asks, for the record: ``"manual"`` or ``"autoscale"`` (the
                pipeline itself asks with ``"compaction"``, see ``_request_compaction``).
            reason: Why, for the record (an autoscale decision's reason).

        Raises:
            ReconfigurationError: an invalid request, or every source is closed; nothing
                changed.
            CapacityError: ``max_pending_reconfigurations`` (if set) are still pending.
            StoppedError: the pipeline was stopped.

        """
        with self._reconfigure_lock:
            epoch = self._queue(parallelism, mapping, cause, reason)
        self._pool.wake_all()
        return epoch

    def _queue(
        self,
        parallelism: int | None,
        mapping: Sequence[int] | None,
        cause: str,
        reason: str | None,
        *,
        limited: bool = True,
    ) -> int:
        """``reconfigure`` under ``_reconfigure_lock``, without the wake-up.

        ``limited``: count against ``max_pending_reconfigurations`` (a compaction does not).
        """
        epoch = self._latest.epoch + 1
        pending = self._latest.epoch - self._pool.current.epoch
        limit = self.settings.max_pending_reconfigurations
        if limited and limit is not None and pending >= limit:
            msg = (
                f"operator {self.op.name!r}: {pending} reconfigurations are pending "
                f"(epoch {self._pool.current.epoch} is in force); each completes once "
                "the instances have processed the input before it; retry later"
            )
            raise CapacityError(msg)
        try:
            target = plan(
                epoch,
                self._latest.parallelism,
                self.max_parallelism,
                self.op.key_groups,
                parallelism,
                mapping,
                self.settings.shard,
            )
        except ReconfigurationError as exc:
            msg = f"operator {self.op.name!r}: {exc}"
            raise ReconfigurationError(msg) from exc
        open_sources = [s for s in self._sources if not s.closed]
        if not open_sources:
            msg = f"operator {self.op.name!r}: epoch {epoch}: every input is closed"
            raise ReconfigurationError(msg)
        self._check_running()
        self._pool.records[epoch] = ReconfigurationRecord(
            epoch,
            self._latest.parallelism,
            target.parallelism,
            target.requested_ns,
            cause=cause,
            reason=reason,
        )
        self._pool.plans[epoch] = target
        for old in sorted(self._pool.records)[: -self.settings.kept_reconfigurations]:
            del self._pool.records[old]
        self._latest = target
        for store in open_sources:
            with store.lock:
                if not store.closed:
                    store.controls.append(epoch)
                    self._feeder.feed(store)
        return epoch

    def wait_epoch(self, epoch: int, timeout_s: float | None = None) -> bool:
        """Block until epoch ``epoch`` is in force; return whether it is."""
        with self._switched:
            return (
                self._switched.wait_for(
                    lambda: self._pool.current.epoch >= epoch or self._pool.error is not None,
                    timeout_s,
                )
                and self._pool.current.epoch >= epoch
            )

    def _request_compaction(self) -> None:
        """Queue a barrier at the latest plan when a compaction is due.

        Due: the string dictionary's (``StringDictionary.due``) or the kernel's tables'
        (``CompiledOperator.tables_due``). One at a time; it runs at that barrier, or at
        an earlier one (``_compact``). Nothing is queued once every input is closed.
        """
        limit = self.settings.compact_dictionary_bytes
        if limit is None or not self._compaction_due(limit):
            return
        with self._reconfigure_lock:
            if self._pool.current.epoch < self._compaction_epoch:
                return  # one is pending
            latest = self._latest
            reason = (
                f"the string dictionary holds {self._dictionary.nbytes} bytes"
                if self._dictionary.due(limit)
                else "the operator's key table is due a compaction"
            )
            try:
                self._compaction_epoch = self._queue(
                    latest.parallelism, latest.mapping, "compaction", reason, limited=False
                )
            except (ReconfigurationError, StoppedError):
                return  # every input is closed, or the pipeline stops: nothing to encode
        self._pool.wake_all()

    def _compaction_due(self, limit: int) -> bool:
        compiled = self._pool.compiled
        return self._dictionary.due(limit) or (compiled is not None and compiled.tables_due(limit))

    def _compact(self) -> None:
        """At an epoch barrier (no instance runs): drop the keys and strings nothing uses.

        First the kernel compacts its own tables (``compact_tables``), if due. Then, if
        due, the string dictionary keeps the codes of the rows the sources hold and those
        the kernel's state keeps (``CompiledOperator.codes_in_use``); the generic path
        keeps strings. The sources' locks keep producers from encoding meanwhile.
        """
        limit = self.settings.compact_dictionary_bytes
        if limit is None:
            return
        compiled = self._pool.compiled
        if compiled is not None:
            compiled.compact_tables(limit)
        if not self._dictionary.due(limit):
            return
        with ExitStack() as locked:
            for store in self._sources:
                locked.enter_context(store.lock)
            in_use = [codes for store in self._sources for codes in store.codes_in_use()]
            if compiled is not None:
                in_use += compiled.codes_in_use()
            before = self._dictionary.nbytes
            gone = self._dictionary.compact(in_use)
        logger.info(
            "operator %r: string dictionary compacted: %d strings dropped, %d -> %d bytes",
            self.op.name,
            gone,
            before,
            self._dictionary.nbytes,
        )

    def _on_switch(self, target: EpochPlan) -> None:
        logger.debug("operator %r entered epoch %d", self.op.name, target.epoch)
        with self._switched:
            self._switched.notify_all()

    # -- output (docs/design.md decision 9) -----------------------------------------------------

    def output(
        self,
        offset: int = 0,
        max_rows: int | None = None,
        wait_s: float = 0.0,
        min_rows: int = 1,
    ) -> tuple[pa.Table, int]:
        """Output rows from ``offset`` as a table (``ts`` first) and the next offset.

        Waits up to ``wait_s`` for ``min_rows`` rows (or the end of the output).
        """
        self._pool.raise_failure()
        return self._log.read(offset, max_rows, wait_s, min_rows)

    def output_cut(self, ts: int) -> int:
        """The offset of the first output row with ``ts`` or later held (the end if none).

        Final once ``ts`` is at most ``output_status().watermark``: the merge of a sharded
        operator's outputs reads each shard up to the cut at one ``ts``.
        """
        return self._log.cut(ts)

    def commit(self, offset: int, *, when_produced: bool = False) -> None:
        """Everything before ``offset`` was consumed; the log may trim it.

        With ``when_produced``, an offset beyond the log's end is kept and applied once
        the output gets there (re-applying a journal's commits while the output is
        produced again).

        Raises:
            InputError: ``offset`` is beyond the end (unless ``when_produced``).

        """
        self._log.commit(offset, when_produced=when_produced)

    def _drain(self) -> None:
        """ESG_out -> output log: a ``ts`` is complete once a later node is ready.

        ESG_out delivers nodes in ts order, so every row of a batch with a ts below the
        batch's last ts is complete; rows at the last ts wait for a later node. The
        drainer also moves the sources' backlogs into ESG_in when instances freed room.

        With ``max_uncommitted_rows`` it takes no more nodes than the log has room for,
        and none while the log is full: ESG_out then fills and the instances wait for
        room in it, so the output pauses until a reader commits. The log holds at most
        the limit plus the rows of one ``ts`` (those pending when a later node comes).
        """
        pool = self._pool
        pending: list[OutputBlock] = []  # rows of the last ts seen, not complete yet
        drained = -END_OF_INPUT  # every row before it is in the log
        limit = self.settings.max_uncommitted_rows
        try:
            while not pool.stopping:
                pool.drainer_wake.clear()
                self._feeder.pump()
                room = DRAIN_NODES
                if limit is not None:  # a full log: ESG_out fills and the instances wait
                    room = min(room, self._log.wait_room(limit, FULL_LOG_CHECK_S))
                    if room == 0:
                        pool.output_room.clear()
                        continue
                    pool.output_room.set()
                batch = self._esg_out.get_ready_batch(0, room)
                if len(batch) == 0:
                    pool.drainer_wake.wait()  # set by instances, producers and stop
                    continue
                last = int(batch.ts[-1])
                rows = pool.take_rows(batch.payload[batch.kind == DATA])
                if last > drained:
                    if pending:  # this take's rows at the pending ts come first
                        head, rows = OutputBlock.split(rows, drained + 1)
                        pending = OutputBlock.ordered([*pending, *head])
                    complete, rest = OutputBlock.split(rows, last)
                    self._append_complete([*pending, *complete], last)
                    pending = rest
                    drained = pool.drained_ts = last
                else:
                    pending.extend(rows)
                if last == END_OF_INPUT and batch.kind[-1] != DATA:
                    self._log.finish()
                    return
        except BaseException as exc:
            logger.exception("the output drainer of %r failed", self.op.name)
            pool.fail(exc)
        if pool.error is not None:  # wake join(), which raises the failure
            self._log.finish()

    def _append_complete(self, blocks: list[OutputBlock], complete_before: int) -> None:
        """Append complete rows, in ``(ts, cause)`` order.

        ESG_out gives them in ``ts`` order, and the rows of one instance are in ``(ts,
        cause)`` order already: each release is sorted and holds only rows before its
        watermark, so a later release holds later ts (Lemma 2). Rows of several instances
        with the same ``ts`` interleave: ``take_rows`` orders them within a take, and the
        drainer merges the rows at the ts left pending by the take before. The order is
        checked (O(n), compiled) and the runs of equal ``ts`` sorted by cause if it does
        not hold. A restored pipeline drops the rows before its snapshot's D: the log has
        them already.
        """
        if not OutputBlock.in_order(blocks):
            blocks = [OutputBlock.concat(blocks).ties_sorted()]
        if self.settings.shard is None:
            batches = [block.rows for block in blocks]
        else:
            batches = [_with_cause(block) for block in blocks]
        resume = self._resume_ts
        if resume is not None:
            batches = [b.filter(pc.greater_equal(b.column(0), resume)) for b in batches]
            if complete_before > resume:
                self._resume_ts = None
        self._log.append(batches, complete_before)

    # -- lifecycle and instrumentation -----------------------------------------------------

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait until every output row is in the log, then stop the threads.

        Returns:
            Whether the output completed within the timeout (threads keep running if not).

        Raises:
            StretchError: an instance failed.

        """
        finished = self._log.wait_finished(timeout_s)
        if finished:
            self.shutdown()
        self._pool.raise_failure()
        return finished

    def shutdown(self, timeout_s: float = JOIN_TIMEOUT_S) -> None:
        """Stop and join every thread of the pipeline (pending input is abandoned).

        Each thread gets up to ``timeout_s`` to end; one that does not is logged and left
        (they are daemon threads).
        """
        self._pool.stop(timeout_s)
        self._pool.drainer_wake.set()
        for thread in [self._drainer, *self._chain_threads]:
            if thread.is_alive():
                thread.join(timeout_s)
            if thread.is_alive():
                logger.warning("thread %s did not stop within %.1f s", thread.name, timeout_s)
        with self._switched:
            self._switched.notify_all()

    @property
    def stopping(self) -> bool:
        """Whether the pipeline was stopped (or an instance failed)."""
        return self._pool.stopping

    def adopt_thread(self, thread: threading.Thread) -> None:
        """Join ``thread`` (a started helper, e.g. a chain's forwarder) at ``shutdown``."""
        self._chain_threads.append(thread)

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def reconfigurations(self) -> tuple[ReconfigurationStatus, ...]:
        """The ``kept_reconfigurations`` most recent reconfigurations, by epoch."""
        records = self._pool.records
        return tuple(
            ReconfigurationStatus(
                r.epoch,
                r.from_parallelism,
                r.to_parallelism,
                r.duration_ms,
                r.trigger_ts,
                r.cause,
                r.reason,
                r.requested_ns,
                r.completed_ns,
            )
            for e in sorted(records)
            if (r := records.get(e)) is not None
        )

    # -- snapshots (docs/design.md, "Durability") ------------------------------------------

    def snapshot(self) -> PipelineSnapshot:
        """A consistent copy of what determines the output from the log's watermark D on.

        The output log first (its rows, all those before D), then each source under its
        lock (its rows from D - WS - WA - 1 on and its reorder buffer): input that arrives
        in between is in the source copy, and only changes output at or after D. Holds
        each source's lock only while copying its rows; the instances never stop.
        O(rows kept), see ``stretch.vsn.snapshot``.

        Raises:
            StretchError: an instance failed.

        """
        self._pool.raise_failure()
        output = self._log.snapshot()
        d = output.complete_before
        horizon = None if d <= -END_OF_INPUT else d - self.op.ws_ms - self.op.wa_ms - 1
        sources = []
        for store in self._sources:
            with store.lock:
                sources.append(store.snapshot(horizon))
        with self._reconfigure_lock:
            latest = self._latest
        return PipelineSnapshot(
            epoch=latest.epoch,
            parallelism=latest.parallelism,
            max_parallelism=self.max_parallelism,
            mapping=latest.mapping,
            sources=tuple(sources),
            output=output,
            horizon_ts=horizon,
        )

    @classmethod
    def restore(
        cls, op: OPlus, snapshot: PipelineSnapshot, settings: RuntimeSettings | None = None
    ) -> Pipeline:
        """Start a pipeline from ``snapshot``: its epoch and mapping, output log and input.

        The sources' kept rows go in again (bypassing admission: they were admitted
        once), then their reorder buffers' rows, then each source's released watermark
        or its close; the output rows before the snapshot's D are dropped, so the log
        continues at the same offsets with the same rows as the pipeline snapshotted.

        Raises:
            ReconfigurationError: the snapshot's parallelism does not fit.
            SchemaError: the snapshot's rows do not fit ``op``'s inputs.

        """
        pipeline = cls(
            op, snapshot.parallelism, snapshot.max_parallelism, settings, resume=snapshot
        )
        try:
            for store, kept in zip(pipeline._sources, snapshot.sources, strict=True):
                with store.lock:
                    store.reorder.allowed_lateness_ms = kept.allowed_lateness_ms
                    for table in (kept.rows, kept.held):
                        data = conform(table, store.schema, store.where)
                        pipeline._release(store, store.reorder.push(data))
                    if kept.closed:
                        pipeline._release(store, store.reorder.flush())
                    else:
                        pipeline._release(store, store.reorder.advance(kept.released))
            pipeline._pool.wake_all()
        except BaseException:
            pipeline.shutdown()
            raise
        return pipeline

    def status(self) -> PipelineStatus:
        """The pipeline now: epoch, mapping, instances, sources, gates, output.

        Read without stopping the instances; counters may be a few tuples stale.
        """
        pool = self._pool
        current = pool.current
        comparisons = self._comparisons()
        return PipelineStatus(
            operator=self.op.name,
            epoch=current.epoch,
            parallelism=current.parallelism,
            max_parallelism=self.max_parallelism,
            mapping=tuple(current.mapping),
            path="generic" if pool.compiled is None else "compiled",
            instances=tuple(
                InstanceStatus(
                    i.j,
                    i.connected,
                    i.busy_ns / 1e9,
                    i.tuples_in,
                    i.tuples_out,
                    comparisons.get(i.j, 0),
                )
                for i in pool.instances
            ),
            sources=tuple(
                SourceStatus(
                    index=s.source,
                    watermark=s.watermark if s.watermark is not None else s.last_ts,
                    released=s.reorder.released,
                    closed=s.input_closed,
                    rows=len(s),
                    held_rows=len(s.reorder),
                    backlog=s.unfed,
                    allowed_lateness_ms=s.reorder.allowed_lateness_ms,
                )
                for s in self._sources
            ),
            esg_in=GateStatus(self._esg_in.occupancy(), self._esg_in.watermark()),
            esg_out=GateStatus(self._esg_out.occupancy(), self._esg_out.watermark()),
            output=self.output_status(),
            reconfigurations=self.reconfigurations(),
            time_s=time.time(),
            dictionary_bytes=self._dictionary.nbytes,
            state_bytes=None if pool.compiled is None else pool.compiled.state_bytes(),
        )

    def output_status(self) -> OutputStatus:
        """The output log's offsets, whether it is finished, and its watermark D.

        D is the log's (``OutputLog.complete_before``): a restored log has its snapshot's
        at once, before the drainer appends anything (it may not, while the log is full).
        """
        log = self._log
        return OutputStatus(
            log.start_offset, log.committed_offset, log.end_offset, log.finished,
            log.complete_before,
        )  # fmt: skip

    def load(self) -> LoadCounters:
        """Cumulative work counters for a load sample (the controller's view).

        Read without locks or stopping the instances. O(n + sources log rows).
        """
        pool = self._pool
        join = isinstance(self.op.kernel, BandJoinSpec)
        return LoadCounters(
            epoch=pool.current.epoch,
            parallelism=pool.current.parallelism,
            max_parallelism=self.max_parallelism,
            busy_s=tuple(i.busy_ns / 1e9 for i in pool.instances),
            comparisons=int(sum(self._comparisons().values())),
            rows=tuple(len(s) for s in self._sources),
            backlog=int(self._esg_in.occupancy()),
            window_rows=tuple(s.window_rows(self.op.ws_ms) for s in self._sources)
            if join
            else None,
            inputs_open=any(not s.closed for s in self._sources),
        )

    def _comparisons(self) -> dict[int, int]:
        """Join comparisons per instance (empty for kernels that do not count them)."""
        counted: dict[int, int] = getattr(self._pool.compiled, "comparisons", {})
        return counted

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (quick, thread-safe) after each output append and at the end."""
        self._log.subscribe(listener)

    def unsubscribe(self, listener: Callable[[], None]) -> None:
        """Stop calling ``listener``."""
        self._log.unsubscribe(listener)

    def _source(self, source: int) -> SourceStore:
        if not 0 <= source < len(self._sources):
            msg = f"operator {self.op.name!r} has sources 0..{len(self._sources) - 1}, not {source}"
            raise InputError(msg)
        return self._sources[source]

    def _check_running(self) -> None:
        self._pool.raise_failure()
        if self._pool.stopping:
            msg = f"operator {self.op.name!r} was stopped; it takes no more requests"
            raise StoppedError(msg)

    def _check_open(self, store: SourceStore) -> None:
        self._check_running()
        if store.input_closed:
            msg = f"{store.where} is closed; it takes no more input"
            raise ClosedError(msg)


def _check_shard(op: OPlus, shard: Shard | None) -> None:
    """Refuse a shard that would own none of the operator's keys (K < N).

    Raises:
        OperatorError: the operator spreads its tuples over fewer keys than shards.

    """
    if shard is None or not isinstance(op.kernel, BandJoinSpec | ForwardSpec):
        return
    keys = op.kernel.keys
    if keys < shard.count:
        msg = (
            f"operator {op.name!r} spreads its tuples over {keys} keys, fewer than the "
            f"{shard.count} shards: a shard would own none; set the parameter 'keys' to at "
            f"least {shard.count}"
        )
        raise OperatorError(msg)


def _with_cause(block: OutputBlock) -> pa.RecordBatch:
    """A block's rows with their cause as the ``CAUSE`` column (a shard's log)."""
    causes = np.ascontiguousarray(block.key[1:].T).reshape(-1)
    column = pa.FixedSizeListArray.from_arrays(pa.array(causes, pa.int64()), CAUSE_WIDTH)
    return block.rows.append_column(CAUSE, column)
