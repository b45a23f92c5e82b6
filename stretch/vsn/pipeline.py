"""A running VSN operator: ESG_in, the instance pool, ESG_out and the output log (Fig. 5).

``Pipeline`` is what ``stretch.setup(op, m, n)`` returns. Producers ``add`` batches per
input source (``addSTRETCH``, Alg. 5: a source's pending control tuples go in first, at its
last ts); ``reconfigure`` queues an epoch plan and puts its control tuple in every source;
a drainer thread reads ESG_out and appends its rows, gathered from the instances' output
blocks, to the output log, sorting rows of different instances by ``(ts, cause)`` so that
the log equals ``run_sn`` row for row.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from scalegate import DATA, ElasticScaleGate
from stretch.errors import CapacityError, InputError, ReconfigurationError, StoppedError
from stretch.model.batch import StringDictionary
from stretch.model.mapping import default_mapping
from stretch.model.oplus import END_OF_INPUT, OPlus
from stretch.model.schema import conform
from stretch.vsn.audit import OwnershipAudit
from stretch.vsn.feeding import Feeder
from stretch.vsn.ingest import SourceStore
from stretch.vsn.instance import CompiledOperator
from stretch.vsn.output_block import OutputBlock
from stretch.vsn.output_log import OutputLog
from stretch.vsn.pool import InstancePool
from stretch.vsn.reconfiguration import EpochPlan, ReconfigurationRecord, plan

__all__ = ["Pipeline"]

logger = logging.getLogger(__name__)

KEPT_RECONFIGURATIONS = 1024
"""Reconfiguration records kept for ``reconfigurations`` (the most recent)."""

JOIN_TIMEOUT_S = 10.0
"""How long ``shutdown`` waits for each thread."""


class Pipeline:
    """One O+ operator run with VSN parallelism: n pool threads, m of them connected.

    Args:
        op: The operator.
        parallelism: m, the instances connected at start (1 <= m <= n).
        max_parallelism: n, the pool threads.
        capacity: Nodes each gate holds before adds block (flow control).
        compiled: A kernel path for the operator (catalog operators), or None.
        audit: If True, check that no key group is touched by two instances in an epoch.
        allowed_lateness_ms: How far behind its largest ``ts`` a source's rows may arrive
            (each source's reorder buffer, docs/design.md decision 8).

    Raises:
        ReconfigurationError: m is outside ``1..n`` or n exceeds the gates' limits.

    """

    def __init__(
        self,
        op: OPlus,
        parallelism: int,
        max_parallelism: int,
        capacity: int = 1 << 16,
        compiled: CompiledOperator | None = None,
        audit: bool = False,
        allowed_lateness_ms: int = 0,
    ) -> None:
        if not 1 <= parallelism <= max_parallelism <= 64:
            msg = (
                f"operator {op.name!r}: need 1 <= parallelism ({parallelism}) <= "
                f"max_parallelism ({max_parallelism}) <= 64"
            )
            raise ReconfigurationError(msg)
        self.op = op
        self.max_parallelism = max_parallelism
        self.dictionary = StringDictionary()
        self.sources = [
            SourceStore(
                i, schema, f"source {i} of {op.name!r}", self.dictionary, allowed_lateness_ms
            )
            for i, schema in enumerate(op.inputs)
        ]
        self.esg_in = ElasticScaleGate(
            sources=range(op.n_inputs),
            readers=range(parallelism),
            capacity=capacity,
            max_sources=max(op.n_inputs, 1),
            max_readers=max_parallelism,
            block=True,
        )
        self.esg_out = ElasticScaleGate(
            sources=range(parallelism),
            readers=[0],
            capacity=capacity,
            max_sources=max_parallelism,
            max_readers=1,
            block=True,
        )
        first = EpochPlan(0, parallelism, tuple(default_mapping(op.key_groups, parallelism)))
        self._switched = threading.Condition()
        self.audit = OwnershipAudit() if audit else None
        self.pool = InstancePool(
            op,
            self.esg_in,
            self.esg_out,
            self.sources,
            first,
            max_parallelism,
            compiled,
            self.audit,
            self._on_switch,
        )
        self.feeder = Feeder(self.esg_in, self.pool, self.sources)
        self.max_pending_reconfigurations: int | None = None  # a service sets a bound
        self.kept_reconfigurations = KEPT_RECONFIGURATIONS
        self.log = OutputLog(self.pool.output_schema)
        self._latest = first
        self._reconfigure_lock = threading.Lock()
        self._drained_ts = -END_OF_INPUT
        self.chain_threads: list[threading.Thread] = []
        self._drainer = threading.Thread(target=self._drain, name=f"vsn-{op.name}-out", daemon=True)
        self.pool.start()
        self._drainer.start()

    # -- input (Alg. 5) ------------------------------------------------------------------

    def add(self, source: int, batch: pa.Table | pa.RecordBatch) -> int:
        """Add a batch (any order) to input ``source``; return its row count.

        Rows go through the source's reorder buffer (docs/design.md decision 8): they reach
        ESG_in in ``ts`` order once the source's released watermark passes them. Never
        waits for room in ESG_in: rows that do not fit now wait in the source (its
        backlog, ``backlog``) and go in as readers free room.

        Raises:
            InputError: unknown or closed source.
            StoppedError: the pipeline was stopped.
            StretchError: an instance failed.
            SchemaError: the batch does not match the source's schema.
            LateTupleError: a row is older than the source's released watermark; nothing
                of the batch is added.

        """
        store = self._source(source)
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        with store.lock:
            self._check_open(store)
            data = conform(table, store.schema, store.where)
            self._release(store, store.reorder.push(data))
        self.pool.wake_all()
        self.feeder.help(store)
        return int(data.num_rows)

    def watermark(self, source: int, ts: int) -> None:
        """Promise that ``source`` adds no tuple before ``ts`` (a lower one is ignored).

        Raises:
            InputError: unknown or closed source.
            StoppedError: the pipeline was stopped.

        """
        store = self._source(source)
        with store.lock:
            self._check_open(store)
            self._release(store, store.reorder.advance(ts))
        self.pool.wake_all()
        self.feeder.help(store)

    def close(self, source: int | None = None) -> None:
        """End of input for ``source`` (or every source): flushes every window.

        Rows still waiting for room go in as readers free it (``Feeder.help`` waits a
        little for them).
        """
        stores = self.sources if source is None else [self._source(source)]
        for store in stores:
            with store.lock:
                if not store.input_closed:
                    self._release(store, store.reorder.flush())
        self.pool.wake_all()
        for store in stores:
            self.feeder.help(store)

    def backlog(self, source: int) -> int:
        """Rows of ``source`` that wait for room in ESG_in, after trying to move them in."""
        return self.feeder.backlog(self._source(source))

    def _release(self, store: SourceStore, rows: pa.Table | None) -> None:
        """Store the rows the reorder buffer freed and move what fits into ESG_in."""
        if rows is not None:
            store.append(rows)
        self.feeder.feed(store)

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
            cause: Who asks, for the record: ``"manual"`` or ``"autoscale"``.
            reason: Why, for the record (an autoscale decision's reason).

        Raises:
            ReconfigurationError: an invalid request, or every source is closed; nothing
                changed.
            CapacityError: ``max_pending_reconfigurations`` (if set) are still pending.
            StoppedError: the pipeline was stopped.

        """
        with self._reconfigure_lock:
            epoch = self._latest.epoch + 1
            pending = self._latest.epoch - self.pool.current.epoch
            limit = self.max_pending_reconfigurations
            if limit is not None and pending >= limit:
                msg = (
                    f"operator {self.op.name!r}: {pending} reconfigurations are pending "
                    f"(epoch {self.pool.current.epoch} is in force); each completes once "
                    "the instances have processed the input before it; retry later"
                )
                raise CapacityError(msg)
            target = plan(
                epoch,
                self._latest.parallelism,
                self.max_parallelism,
                self.op.key_groups,
                parallelism,
                mapping,
            )
            open_sources = [s for s in self.sources if not s.closed]
            if not open_sources:
                msg = f"operator {self.op.name!r}: epoch {epoch}: every input is closed"
                raise ReconfigurationError(msg)
            self._check_running()
            self.pool.records[epoch] = ReconfigurationRecord(
                epoch,
                self._latest.parallelism,
                target.parallelism,
                target.requested_ns,
                cause=cause,
                reason=reason,
            )
            self.pool.plans[epoch] = target
            for old in sorted(self.pool.records)[: -self.kept_reconfigurations]:
                del self.pool.records[old]
            self._latest = target
            for store in open_sources:
                with store.lock:
                    if not store.closed:
                        store.controls.append(epoch)
                        self.feeder.feed(store)
        self.pool.wake_all()
        return epoch

    def wait_epoch(self, epoch: int, timeout_s: float | None = None) -> bool:
        """Block until epoch ``epoch`` is in force; return whether it is."""
        with self._switched:
            return (
                self._switched.wait_for(
                    lambda: self.pool.current.epoch >= epoch or self.pool.error is not None,
                    timeout_s,
                )
                and self.pool.current.epoch >= epoch
            )

    def _on_switch(self, target: EpochPlan) -> None:
        logger.debug("operator %r entered epoch %d", self.op.name, target.epoch)
        with self._switched:
            self._switched.notify_all()

    # -- output (docs/design.md decision 9) -----------------------------------------------------

    def output(
        self, offset: int = 0, max_rows: int | None = None, wait_s: float = 0.0
    ) -> tuple[pa.Table, int]:
        """Output rows from ``offset`` as a table (``ts`` first) and the next offset."""
        self.pool.raise_failure()
        return self.log.read(offset, max_rows, wait_s)

    def commit(self, offset: int) -> None:
        """Everything before ``offset`` was consumed; the log may trim it."""
        self.log.commit(offset)

    def _drain(self) -> None:
        """ESG_out -> output log: a ``ts`` is complete once a later node is ready.

        ESG_out delivers nodes in ts order, so every row of a batch with a ts below the
        batch's last ts is complete; rows at the last ts wait for a later node. The
        drainer also moves the sources' backlogs into ESG_in when instances freed room.
        """
        pool = self.pool
        pending: list[tuple[OutputBlock, NDArray[np.int64]]] = []  # rows, their sources
        try:
            while not pool.stopping:
                pool.drainer_wake.clear()
                self.feeder.pump()
                batch = self.esg_out.get_ready_batch(0, 1 << 14)
                if len(batch) == 0:
                    pool.drainer_wake.wait()  # set by instances, producers and stop
                    continue
                last = int(batch.ts[-1])
                data = batch.kind == DATA
                rows, sources = pool.take_rows(batch.payload[data]), batch.source[data]
                if last > self._drained_ts:
                    open_from = int(np.searchsorted(rows.ts, last))
                    pending.append((rows.slice(0, open_from), sources[:open_from]))
                    self._append_complete(pending)
                    pending = [(rows.slice(open_from, len(rows)), sources[open_from:])]
                    self._drained_ts = last
                else:
                    pending.append((rows, sources))
                if last == END_OF_INPUT and batch.kind[-1] != DATA:
                    self.log.finish()
                    return
        except BaseException as exc:
            logger.exception("the output drainer of %r failed", self.op.name)
            pool.fail(exc)
        if pool.error is not None:  # wake join(), which raises the failure
            self.log.finish()

    def _append_complete(self, parts: list[tuple[OutputBlock, NDArray[np.int64]]]) -> None:
        """Append complete rows, given in ESG_out order with their ESG_out sources, sorted.

        The rows of one source (instance) already are in ``(ts, cause)`` order: each
        release is sorted, and a row released later has a later ts or, at an equal ts
        (the watermark of the release before), comes from a later input tuple (Lemma 2).
        Rows of several instances are sorted here.
        """
        sources = np.concatenate([s for _, s in parts])
        if sources.size and bool(np.any(sources != sources[0])):
            self.log.append([OutputBlock.concat([rows for rows, _ in parts]).sorted().rows])
        else:
            self.log.append(rows.rows for rows, _ in parts)

    # -- lifecycle and instrumentation -----------------------------------------------------

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait until every output row is in the log, then stop the threads.

        Returns:
            Whether the output completed within the timeout (threads keep running if not).

        Raises:
            StretchError: an instance failed.

        """
        finished = self.log.wait_finished(timeout_s)
        if finished:
            self.shutdown()
        self.pool.raise_failure()
        return finished

    def shutdown(self, timeout_s: float = JOIN_TIMEOUT_S) -> None:
        """Stop and join every thread of the pipeline (pending input is abandoned).

        Each thread gets up to ``timeout_s`` to end; one that does not is logged and left
        (they are daemon threads).
        """
        self.pool.stop(timeout_s)
        self.pool.drainer_wake.set()
        for thread in [self._drainer, *self.chain_threads]:
            if thread.is_alive():
                thread.join(timeout_s)
            if thread.is_alive():
                logger.warning("thread %s did not stop within %.1f s", thread.name, timeout_s)
        with self._switched:
            self._switched.notify_all()

    @property
    def trim_rows(self) -> int:
        """A source drops rows no instance reads any more once it can drop this many."""
        return self.feeder.trim_rows

    @trim_rows.setter
    def trim_rows(self, rows: int) -> None:
        self.feeder.trim_rows = rows

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def reconfigurations(self) -> list[ReconfigurationRecord]:
        """The ``kept_reconfigurations`` most recent reconfigurations, by epoch."""
        records = self.pool.records
        return [r for e in sorted(records) if (r := records.get(e)) is not None]

    def stats(self) -> dict[str, Any]:
        """Counters: per instance, the gates, the epoch and the reconfigurations.

        ``path`` says how the instances run the operator: ``"compiled"`` (the kernel its
        ``OPlus.kernel`` declares) or ``"generic"`` (its Python functions).
        """
        pool = self.pool
        compiled = pool.compiled
        return {
            "operator": self.op.name,
            "epoch": pool.current.epoch,
            "parallelism": pool.current.parallelism,
            "max_parallelism": self.max_parallelism,
            "path": "generic" if compiled is None else "compiled",
            "instances": [
                {
                    "id": i.j,
                    "connected": i.connected,
                    "busy_s": i.busy_ns / 1e9,
                    "tuples_in": i.tuples_in,
                    "tuples_out": i.tuples_out,
                    "comparisons": getattr(compiled, "comparisons", {}).get(i.j, 0),
                }
                for i in pool.instances
            ],
            "esg_in": {"occupancy": self.esg_in.occupancy(), "watermark": self.esg_in.watermark()},
            "esg_out": {
                "occupancy": self.esg_out.occupancy(),
                "watermark": self.esg_out.watermark(),
            },
            "output": {"watermark": self._drained_ts, "end_offset": self.log.end_offset},
            "watermarks": [
                s.watermark if s.watermark is not None else s.last_ts for s in self.sources
            ],
            "reconfigurations": [
                {**asdict(r), "duration_ms": r.duration_ms} for r in self.reconfigurations()
            ],
            "time": time.time(),
        }

    def _source(self, source: int) -> SourceStore:
        if not 0 <= source < len(self.sources):
            msg = f"operator {self.op.name!r} has sources 0..{len(self.sources) - 1}, not {source}"
            raise InputError(msg)
        return self.sources[source]

    def _check_running(self) -> None:
        self.pool.raise_failure()
        if self.pool.stopping:
            msg = f"operator {self.op.name!r} was stopped; it takes no more requests"
            raise StoppedError(msg)

    def _check_open(self, store: SourceStore) -> None:
        self._check_running()
        if store.input_closed:
            msg = f"{store.where} is closed; it takes no more input"
            raise InputError(msg)
