"""The control loop: sample the load, ask the policy, apply its decision through reconfigure.

Each period the loop takes one ``LoadSnapshot``, asks the configured policy and, when the
decision changes the parallelism, applies it. Five rules keep it from flapping:

* **warm-up**: no change rests on a load measured before the operator's first input, or
  over a period that began before it (the policies hold; ``LoadSnapshot.warming_up``): an
  operator created ahead of its data is idle, not over-provisioned;

* **pending**: while the reconfiguration it requested is not in force (the snapshot's
  epoch is older), it holds: a switch completes only when the instances reach it, and a
  snapshot of the old epoch would ask for the same change again;
* **cool-down**: after a change, no other change for ``cooldown_periods`` periods counted
  from its completion (the new threads' load, and for a join the windows, need time to
  settle);
* **patience**: a decommission must be asked for in ``patience`` consecutive periods
  (provisioning acts at once: an overloaded operator builds a backlog);
* **bounds**: the policy never leaves ``min_parallelism..max_parallelism``.

Every decision is recorded with its reason and the snapshot it rests on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from stretch.controller.load import LoadSnapshot
from stretch.controller.policies import Decision, PolicyConfig, decide
from stretch.controller.sampler import PipelineSampler
from stretch.vsn import Pipeline

__all__ = ["Autoscaler", "DecisionRecord", "autoscale"]

logger = logging.getLogger(__name__)

Apply = Callable[[int, str], int]
"""Applies a parallelism with its reason; returns the reconfiguration's epoch or raises."""


@dataclass(frozen=True)
class DecisionRecord:
    """One period of the loop: what it saw, what the policy said, what was done.

    Attributes:
        decision: The decision as applied (a hold when a rule held the policy back).
        snapshot: The load it rests on.
        applied: Whether a reconfiguration was requested.
        epoch: The reconfiguration's epoch, if one was requested.
        error: Why applying failed, if it did.

    """

    decision: Decision
    snapshot: LoadSnapshot
    applied: bool = False
    epoch: int | None = None
    error: str | None = None


class Autoscaler:
    """Runs a policy every ``config.period_ms`` against one operator.

    Args:
        config: The policy, its thresholds and bounds.
        sample: Returns the load since its previous call (None: no time passed).
        apply: Requests a parallelism (see ``Apply``).
        cooldown_periods: Periods after a change in which no change is made.
        patience: Consecutive periods a decommission must be asked for.
        history: How many decision records are kept.

    """

    def __init__(
        self,
        config: PolicyConfig,
        sample: Callable[[], LoadSnapshot | None],
        apply: Apply,
        *,
        cooldown_periods: int = 3,
        patience: int = 2,
        history: int = 256,
    ) -> None:
        self.config = config
        self._sample = sample
        self._apply = apply
        self.cooldown_periods = cooldown_periods
        self.patience = patience
        self.records: deque[DecisionRecord] = deque(maxlen=history)
        self.decisions = {"provision": 0, "decommission": 0, "hold": 0}  # by kind, ever
        self.reconfigurations = 0
        self._cooling = 0
        self._asked_down = 0
        self._pending: int | None = None  # the epoch requested last, until it is in force
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def last(self) -> DecisionRecord | None:
        """The latest decision record, if any."""
        return self.records[-1] if self.records else None

    def step(self) -> DecisionRecord | None:
        """One period: sample, decide, apply. Returns the record (None if nothing sampled)."""
        with self._lock:
            snapshot = self._sample()
            if snapshot is None:
                return None
            if self._is_pending(snapshot):
                m = snapshot.parallelism
                why = (
                    f"reconfiguration to epoch {self._pending} pending "
                    f"(epoch {snapshot.epoch} in force)"
                )
                record = DecisionRecord(Decision(m, "hold", why, snapshot.load), snapshot)
                self.records.append(record)
                self.decisions["hold"] += 1
                return record
            decision = self._held(decide(snapshot, self.config), snapshot)
            record = DecisionRecord(decision, snapshot)
            if decision.parallelism != snapshot.parallelism:
                try:
                    epoch = self._apply(decision.parallelism, decision.reason)
                except Exception as exc:  # noqa: BLE001 - recorded, the loop goes on
                    record = replace(record, error=f"{type(exc).__name__}: {exc}")
                    logger.warning("autoscale: %s failed: %s", decision.kind, exc)
                else:
                    record = replace(record, applied=True, epoch=epoch)
                    self.reconfigurations += 1
                    self._cooling = self.cooldown_periods
                    self._pending = epoch
                    logger.info(
                        "autoscale: %s to %d (%s)",
                        decision.kind,
                        decision.parallelism,
                        decision.reason,
                    )
            self.records.append(record)
            self.decisions[decision.kind] += 1
            return record

    def _is_pending(self, snapshot: LoadSnapshot) -> bool:
        """Whether the reconfiguration requested last is not in force yet.

        It is forgotten once in force; a snapshot without an epoch cannot tell (not pending).
        """
        if self._pending is None or snapshot.epoch is None or snapshot.epoch >= self._pending:
            self._pending = None
            return False
        return True

    def _held(self, decision: Decision, snapshot: LoadSnapshot) -> Decision:
        """The decision after the end-of-input, cool-down and patience rules."""
        m = snapshot.parallelism
        if not snapshot.inputs_open and decision.parallelism != m:
            why = "every input has ended: nothing left to scale"
            return Decision(m, "hold", f"{why}: {decision.reason}", decision.load)
        if self._cooling > 0:
            self._cooling -= 1
            self._asked_down = 0
            if decision.parallelism != m:
                left = self._cooling + 1
                why = f"cooling down after a change ({left} period{'s' if left > 1 else ''} left)"
                return Decision(m, "hold", f"{why}: {decision.reason}", decision.load)
            return decision
        if decision.kind != "decommission":
            self._asked_down = 0
            return decision
        self._asked_down += 1
        if self._asked_down < self.patience:
            why = f"decommission asked in {self._asked_down} of {self.patience} periods"
            return Decision(m, "hold", f"{why}: {decision.reason}", decision.load)
        self._asked_down = 0
        return decision

    def start(self) -> None:
        """Run ``step`` every period in a daemon thread until ``stop``."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="autoscaler", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the loop and wait up to ``timeout_s`` for its thread."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout_s)

    def _run(self) -> None:
        period_s = self.config.period_ms / 1000
        next_at = time.monotonic() + period_s
        while not self._stop.wait(max(next_at - time.monotonic(), 0.0)):
            try:
                self.step()
            except Exception:
                logger.exception("autoscale: a period failed; the loop goes on")
            next_at = max(next_at + period_s, time.monotonic())


def autoscale(pipeline: Pipeline, config: PolicyConfig) -> Autoscaler:
    """Start an autoscaler of ``pipeline``; its reconfigurations are recorded as autoscale.

    Raises:
        ValueError: ``config`` does not fit the pipeline's pool (the message names why).

    """
    config.check(pipeline.max_parallelism)
    sampler = PipelineSampler(pipeline)

    def apply(parallelism: int, reason: str) -> int:
        return pipeline.reconfigure(parallelism=parallelism, cause="autoscale", reason=reason)

    scaler = Autoscaler(config, sampler.sample, apply)
    scaler.start()
    return scaler
