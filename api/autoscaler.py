"""The controller an operator runs under, if any: put, read and cleared over HTTP.

``PUT /v1/operators/{name}/autoscale`` (or ``"autoscale"`` in the create request) starts a
``stretch.controller`` autoscaler on the operator's pipeline, replacing the one it had;
``DELETE`` stops it (back to manual reconfiguration). Each change is journaled ahead, so a
restore puts the operator under the same controller again; a checkpoint keeps its config.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict
from typing import Any

from stretch.api.errors import NotFoundError
from stretch.api.operator_journal import JournalWriter
from stretch.controller import Autoscaler, PolicyConfig, autoscale
from stretch.errors import OperatorError
from stretch.vsn import Pipeline

__all__ = ["OperatorAutoscaler"]

logger = logging.getLogger(__name__)


class OperatorAutoscaler:
    """An operator's autoscaler, if it has one.

    Args:
        name: The operator's name (for messages).
        pipeline: The operator's pipeline, which the autoscaler reconfigures.
        change: Holds the operator's ingest gate and yields its journal writer
            (``ManagedOperator``'s): a change is journaled ahead and on disk when it returns.

    """

    def __init__(
        self,
        name: str,
        pipeline: Pipeline,
        change: Callable[[], AbstractContextManager[JournalWriter]],
    ) -> None:
        self.name = name
        self.pipeline = pipeline
        self._change = change
        self._lock = threading.Lock()
        self._scaler: Autoscaler | None = None

    @property
    def config(self) -> PolicyConfig | None:
        """The policy in force (None: the operator is reconfigured manually)."""
        scaler = self._scaler
        return None if scaler is None else scaler.config

    def decisions(self) -> dict[str, int]:
        """How many decisions of each kind the autoscaler made (empty: none)."""
        scaler = self._scaler
        return {} if scaler is None else dict(scaler.decisions)

    def put(self, config: PolicyConfig) -> dict[str, Any]:
        """Put the operator under ``config``'s controller, replacing one it had.

        Raises:
            OperatorError: ``config`` does not fit the pool (the message names the field).

        """
        with self._lock, self._change() as log:
            try:
                scaler = autoscale(self.pipeline, config)
            except ValueError as exc:
                msg = f"autoscale of {self.name!r}: {exc}"
                raise OperatorError(msg) from exc
            log({"kind": "autoscale", "config": asdict(config)}, None)
            old, self._scaler = self._scaler, scaler
        if old is not None:
            old.stop()
        logger.info("operator %r: autoscale %s", self.name, config.policy)
        return self.state()

    def state(self) -> dict[str, Any]:
        """The autoscaler's policy, bounds and last decision.

        Raises:
            NotFoundError: the operator is reconfigured manually (no autoscaler).

        """
        scaler = self._scaler
        if scaler is None:
            msg = f"operator {self.name!r} has no autoscaler; PUT one to start it"
            raise NotFoundError(msg)
        config = scaler.config
        low, high = config.bounds(self.pipeline.max_parallelism)
        records = list(scaler.records)
        last = records[-1] if records else None
        return {
            "policy": config.policy,
            "upper": config.upper,
            "target": config.target,
            "lower": config.lower,
            "period_ms": config.period_ms,
            "min_parallelism": low,
            "max_parallelism": high,
            "decisions": sum(scaler.decisions.values()),
            "reconfigurations": scaler.reconfigurations,
            "last_decision": None
            if last is None
            else {
                "kind": last.decision.kind,
                "parallelism": last.decision.parallelism,
                "reason": last.decision.reason,
                "load": last.decision.load,
                "applied": last.applied,
                "epoch": last.epoch,
                "error": last.error,
            },
        }

    def clear(self) -> None:
        """Stop the autoscaler, if any: back to manual reconfiguration."""
        with self._lock, self._change() as log:
            scaler, self._scaler = self._scaler, None
            if scaler is not None:
                log({"kind": "autoscale", "config": None}, None)
        if scaler is not None:
            scaler.stop()
            logger.info("operator %r: autoscale off", self.name)

    def stop(self) -> None:
        """Stop the autoscaler, if any, journaling nothing (the operator is stopping)."""
        with self._lock:
            scaler, self._scaler = self._scaler, None
        if scaler is not None:
            scaler.stop()
