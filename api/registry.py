"""The named operators of one app: create, look up, delete; restore and checkpoint them.

Without a state directory operators live in memory only. With one
(``stretch serve --state-dir DIR``, ``api.durability``), creating an operator writes its
spec first, every change is journaled, a checkpointer thread checkpoints each changed
operator every ``checkpoint_interval_s``, and a restore (run once at start, in the
background; each operator by ``api.recovery.restore``) brings every kept operator back:
its latest checkpoint, then the journal after it. While that runs the operators being
restored answer 503; an operator whose files are damaged or missing stays out of service
(503 naming the file, listed as failed) until it is deleted. The service's limits apply
to creates: a restart with lower ones restores every kept operator and logs a warning.
What an operator is built from, at a create and at a restore, is ``api.operator_spec``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, Literal

from stretch.api.durability import StateDirectory
from stretch.api.errors import ConflictError, LimitError, NotFoundError, UnavailableError
from stretch.api.limits import ServiceLimits
from stretch.api.memory import release_memory
from stretch.api.metrics import OperatorSnapshot, ServiceMetrics
from stretch.api.operator_spec import build_instance, managed_operator, runtime_settings
from stretch.api.operators import ManagedOperator
from stretch.api.recovery import checkpoint, restore
from stretch.api.status import operator_snapshot
from stretch.controller import PolicyConfig
from stretch.errors import OperatorError, StretchError
from stretch.vsn import Shard, setup

__all__ = ["DEFAULT_MAX_PARALLELISM", "OperatorRegistry"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_PARALLELISM = 4

DEFAULT_CHECKPOINT_INTERVAL_S = 10.0

RESTORING = "being restored from its state; retry shortly"


class OperatorRegistry:
    """The named operators of one app.

    Args:
        metrics: The service's metrics.
        limits: What the service holds at most.
        state: Where operators are kept durably (None: in memory only).
        checkpoint_interval_s: How often each changed operator is checkpointed.

    """

    def __init__(
        self,
        metrics: ServiceMetrics,
        limits: ServiceLimits,
        state: StateDirectory | None = None,
        checkpoint_interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S,
    ) -> None:
        self._metrics = metrics
        self.limits = limits
        self.state = state
        self.checkpoint_interval_s = checkpoint_interval_s
        self._operators: dict[str, ManagedOperator] = {}
        self._restoring: set[str] = set(state.names()) if state is not None else set()
        self._failed: dict[str, str] = {}  # name -> why it could not be restored
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._checkpointer: threading.Thread | None = None

    # -- lifecycle of the service ------------------------------------------------------

    def start(self) -> None:
        """Restore the kept operators and start checkpointing, in a background thread."""
        if self.state is None:
            return
        self._checkpointer = threading.Thread(
            target=self._run, name="stretch-checkpointer", daemon=True
        )
        self._checkpointer.start()

    @property
    def restoring(self) -> int:
        """Operators still being restored."""
        with self._lock:
            return len(self._restoring)

    def _run(self) -> None:
        self._restore_all()
        while not self._stop.wait(self.checkpoint_interval_s):
            for managed in self.all():
                journal = managed.journal
                if journal is None or not journal.changed or self._stop.is_set():
                    continue
                try:
                    checkpoint(managed)
                except StretchError as exc:
                    logger.warning("operator %r: checkpoint skipped: %s", managed.name, exc)

    def _restore_all(self) -> None:
        assert self.state is not None
        for name in sorted(self._restoring):
            if self._stop.is_set():
                return
            started = time.perf_counter()
            try:
                managed = restore(self.state, name, self._metrics, self.limits)
            except StretchError as exc:
                logger.error("operator %r was not restored: %s", name, exc)  # noqa: TRY400
                with self._lock:
                    self._failed[name] = str(exc)
                    self._restoring.discard(name)
                continue
            elapsed = time.perf_counter() - started
            self._metrics.restore_seconds.labels(name).set(elapsed)
            with self._lock:
                self._operators[name] = managed
                self._restoring.discard(name)
            logger.info("restored operator %r in %.2f s", name, elapsed)
        self._warn_beyond_limits()

    def _warn_beyond_limits(self) -> None:
        """Log a warning if the operators restored pass a limit (set lower since)."""
        limits = self.limits
        with self._lock:
            count = len(self._operators)
            threads = sum(op.threads for op in self._operators.values())
        if count > limits.max_operators:
            logger.warning(
                "restored %d operators, more than --max-operators %d: every create is "
                "refused until %d of them are deleted",
                count,
                limits.max_operators,
                count - limits.max_operators + 1,
            )
        if threads > limits.max_pool_threads:
            logger.warning(
                "the %d operators restored use %d threads, more than --max-pool-threads %d: "
                "every create is refused until enough of them are deleted",
                count,
                threads,
                limits.max_pool_threads,
            )

    def shutdown(self) -> None:
        """Stop checkpointing and every operator, then release the state directory.

        Durable operators keep their files.
        """
        self._stop.set()
        if self._checkpointer is not None:
            self._checkpointer.join(30.0)
        with self._lock:
            operators = list(self._operators.values())
            self._operators.clear()
        for managed in operators:
            managed.shutdown()
        if self.state is not None:
            self.state.close()

    # -- operators ---------------------------------------------------------------------

    def create(
        self,
        name: str,
        operator: str,
        params: Mapping[str, Any],
        parallelism: int,
        max_parallelism: int | None,
        capacity: int,
        allowed_lateness_ms: int = 0,
        policy: PolicyConfig | None = None,
        shard: Shard | None = None,
    ) -> ManagedOperator:
        """Build catalog operator ``operator`` and start it under ``name``.

        With ``policy`` it starts autoscaled (as ``OperatorAutoscaler.put``); with ``shard`` it
        owns only that shard's key groups. With a state
        directory its spec is on disk before this returns.

        Raises:
            ConflictError: ``name`` is taken (or kept and not restored).
            LimitError: the operator would pass the service's operators or threads limit.
            OperatorError: unknown operator or parameter, or forward without ``columns``.
            ReconfigurationError: parallelism outside ``1..max_parallelism``.
            OperatorError: an autoscale policy that does not fit the pool.

        """
        if operator == "forward" and "columns" not in params:
            msg = (
                "operator 'forward' needs the parameter 'columns' naming the payload "
                "columns, e.g. {'columns': 'v:int,w:float'}"
            )
            raise OperatorError(msg)
        with self._lock:
            if name in self._failed:
                msg = (
                    f"an operator named {name!r} is kept in --state-dir but could not be "
                    f"restored ({self._failed[name]}); DELETE /v1/operators/{name} removes "
                    "it and its files, then it can be created anew"
                )
                raise ConflictError(msg)
            if name in self._operators or name in self._restoring:
                msg = f"an operator named {name!r} already exists; delete it first"
                raise ConflictError(msg)
            op = build_instance(name, operator, params)
            n = max_parallelism or max(parallelism, DEFAULT_MAX_PARALLELISM)
            self._check_limits(name, n)
            settings = runtime_settings(self.limits, capacity, allowed_lateness_ms, shard)
            pipeline = setup(op, parallelism, n, settings=settings)
            spec = {
                "name": name,
                "operator": operator,
                "params": dict(params),
                "parallelism": parallelism,
                "max_parallelism": n,
                "capacity": capacity,
                "allowed_lateness_ms": allowed_lateness_ms,
                "shard": None if shard is None else [shard.index, shard.count],
            }
            managed = managed_operator(name, spec, pipeline, self._metrics, self.limits)
            try:
                if self.state is not None:
                    managed.journal = self.state.create(name, spec)
                if policy is not None:
                    managed.autoscaler.put(policy)
            except BaseException:
                managed.shutdown()
                if self.state is not None and managed.journal is not None:
                    self.state.remove(name)  # only files this create wrote
                raise
            self._operators[name] = managed
        logger.info("started operator %r (%s, m=%d, n=%d)", name, operator, parallelism, n)
        return managed

    def _check_limits(self, name: str, n: int) -> None:
        """Raise ``LimitError`` if operator ``name`` of pool size n passes a limit."""
        limits = self.limits
        if len(self._operators) >= limits.max_operators:
            msg = (
                f"operator {name!r}: the service runs {len(self._operators)} operators, its "
                f"limit (--max-operators {limits.max_operators}); delete one first"
            )
            raise LimitError(msg)
        threads = sum(op.threads for op in self._operators.values())
        if threads + n + 2 > limits.max_pool_threads:
            msg = (
                f"operator {name!r}: a pool of {n} costs {n + 2} threads and the operators "
                f"use {threads} of the service's {limits.max_pool_threads} "
                "(--max-pool-threads); lower max_parallelism or delete an operator"
            )
            raise LimitError(msg)

    def get(self, name: str) -> ManagedOperator:
        """The operator named ``name``.

        Raises:
            NotFoundError: no such operator.
            UnavailableError: it is being restored, or could not be restored.

        """
        with self._lock:
            managed = self._operators.get(name)
            if managed is None and name in self._restoring:
                msg = f"operator {name!r} is {RESTORING}"
                raise UnavailableError(msg)
            if managed is None and name in self._failed:
                msg = (
                    f"operator {name!r} could not be restored: {self._failed[name]}; its "
                    "output is not served (delete it to start over)"
                )
                raise UnavailableError(msg)
        if managed is None:
            msg = f"no operator named {name!r}"
            raise NotFoundError(msg)
        return managed

    def all(self) -> list[ManagedOperator]:
        """Every operator that serves, by name."""
        with self._lock:
            return [self._operators[k] for k in sorted(self._operators)]

    def unavailable(self) -> dict[str, tuple[Literal["restoring", "failed"], str]]:
        """Operators kept that do not serve, by name: their state and why.

        The state is ``restoring``, or ``failed`` (the detail names the damaged file).
        """
        with self._lock:
            states: dict[str, tuple[Literal["restoring", "failed"], str]] = {
                name: ("restoring", RESTORING) for name in self._restoring
            }
            states.update((name, ("failed", why)) for name, why in self._failed.items())
            return states

    def snapshots(self) -> list[OperatorSnapshot]:
        """Every operator's metrics snapshot."""
        return [operator_snapshot(op) for op in self.all()]

    def delete(self, name: str) -> None:
        """Stop and forget the operator named ``name`` (and its kept state).

        Raises:
            NotFoundError: no such operator.
            UnavailableError: it is being restored.

        """
        with self._lock:
            if name in self._restoring:
                msg = f"operator {name!r} is {RESTORING}"
                raise UnavailableError(msg)
            managed = self._operators.pop(name, None)
            failed = self._failed.pop(name, None)
        if managed is None and failed is None:
            msg = f"no operator named {name!r}"
            raise NotFoundError(msg)
        if managed is not None:
            managed.shutdown()
            del managed
        if self.state is not None:
            self.state.remove(name)
        release_memory()
        logger.info("deleted operator %r", name)

    def describe(self) -> dict[str, Any]:
        """How the registry keeps state, for ``/readyz`` and the start line."""
        if self.state is None:
            return {"state": "memory only (no --state-dir): a restart loses every operator"}
        with self._lock:
            return {
                "state": str(self.state.root),
                "restoring": len(self._restoring),
                "failed": dict(self._failed),
                "checkpoint_interval_s": self.checkpoint_interval_s,
            }
