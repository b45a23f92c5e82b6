"""Epochs and the coordination of a reconfiguration (Alg. 4 L7-14, Alg. 5, Alg. 6).

A reconfiguration is an ``EpochPlan``: the next epoch number e*, its instances O* (always
the instance ids ``0 .. m*-1``) and its mapping f_mu*. ``reconfigure`` puts the plan in a
control tuple of every input source (Alg. 5). At the first control tuple of e* in the
merged stream, each instance meets the other instances of the current epoch at the
``EpochBarrier`` (``waitForInstances``). The last instance to arrive runs the switch
(connecting or disconnecting ESG readers and sources) while the others wait, so the switch
happens exactly once and before anyone processes a tuple under the new mapping (Theorems
3 and 4).

Where this departs from the paper: Alg. 6 records gamma from each control tuple and Alg. 4
switches at the first tuple whose ts is beyond the largest gamma, which needs input that
arrives after the request. Any node of the merged stream serves as the switch point as
long as every instance switches at the same one, and ESG_in hands every reader the same
nodes in the same (ts, source, seq) order; the first control tuple of e* is such a node,
and it is ready as soon as the input before it is (each source's control carries that
source's last ts, so the earliest of them is never ahead of any source). Tuples after it
come later in the total order, so output rows they cause sort after every row released
before the switch, and a reconfiguration completes without waiting for more data.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from stretch.errors import ReconfigurationError
from stretch.model.mapping import Shard, default_mapping, validate_mapping

__all__ = ["EpochBarrier", "EpochPlan", "ReconfigurationRecord", "plan"]


@dataclass(frozen=True)
class EpochPlan:
    """The parameters of epoch e*: ``{e*, O*, f_mu*}`` carried by control tuples.

    Attributes:
        epoch: e*, greater than every earlier epoch.
        parallelism: |O*|; O* is the instance ids ``0 .. parallelism-1``.
        mapping: f_mu*: key group -> instance of O*.
        requested_ns: When ``reconfigure`` was called (``time.perf_counter_ns``).

    """

    epoch: int
    parallelism: int
    mapping: tuple[int, ...]
    requested_ns: int = 0

    @cached_property
    def owners(self) -> NDArray[np.int64]:
        """f_mu* as an array (for the kernels), computed once per plan."""
        return np.asarray(self.mapping, dtype=np.int64)


@dataclass
class ReconfigurationRecord:
    """What a reconfiguration did and when (for ``stats`` and the REST API).

    Attributes:
        epoch: The epoch it started.
        from_parallelism: |O| before.
        to_parallelism: |O*|.
        requested_ns: When ``reconfigure`` was called.
        completed_ns: When the switch was done (``None`` while pending).
        trigger_ts: The ``ts`` of the control tuple it switched at (Lemma 3's lower bound).
        cause: Who asked: ``"manual"`` (a caller of ``reconfigure``), ``"autoscale"`` or
            ``"compaction"`` (the pipeline, to compact its string dictionary at a barrier).
        reason: Why, in words, if the caller said (an autoscale decision's reason).

    """

    epoch: int
    from_parallelism: int
    to_parallelism: int
    requested_ns: int
    completed_ns: int | None = None
    trigger_ts: int | None = None
    cause: str = "manual"
    reason: str | None = None

    @property
    def duration_ms(self) -> float | None:
        """Call -> completion in milliseconds, or None while pending."""
        if self.completed_ns is None:
            return None
        return (self.completed_ns - self.requested_ns) / 1e6


def plan(
    epoch: int,
    current_parallelism: int,
    max_parallelism: int,
    key_groups: int,
    parallelism: int | None,
    mapping: Sequence[int] | None,
    shard: Shard | None = None,
) -> EpochPlan:
    """Validate a reconfiguration request and turn it into the plan of epoch ``epoch``.

    Args:
        epoch: The epoch number the plan will start.
        current_parallelism: m of the latest plan (used when ``parallelism`` is None).
        max_parallelism: n, the pool size.
        key_groups: G.
        parallelism: The requested m*, or None to keep the current count.
        mapping: The requested f_mu*, or None for round robin over m*.
        shard: The key groups this process owns (None: all).

    Raises:
        ReconfigurationError: nothing requested, m* outside ``1..n``, or a mapping that
            misses a key group or names an instance ``>= m*``.

    """
    if parallelism is None and mapping is None:
        msg = "reconfigure needs a parallelism, a mapping or both"
        raise ReconfigurationError(msg)
    target = current_parallelism if parallelism is None else parallelism
    if (
        isinstance(target, bool)
        or not isinstance(target, int)
        or not 1 <= target <= max_parallelism
    ):
        msg = (
            f"parallelism {target!r} (epoch {epoch}) is outside 1..{max_parallelism}, "
            f"the pool's maximum parallelism"
        )
        raise ReconfigurationError(msg)
    groups = (
        validate_mapping(list(mapping), key_groups, target, shard)
        if mapping is not None
        else default_mapping(key_groups, target, shard)
    )
    return EpochPlan(epoch, target, tuple(groups), time.perf_counter_ns())


@dataclass
class _Meeting:
    arrived: int = 0
    done: bool = False
    error: BaseException | None = None
    waiting: set[int] = field(default_factory=set)


class EpochBarrier:
    """waitForInstances(O) (Alg. 4 L11) with the switch run by the last to arrive.

    One meeting per target epoch; ``parties`` is |O| of the epoch being left, which every
    participant knows identically (they all process the same control tuples in order).
    """

    def __init__(self) -> None:
        self._meetings: dict[int, _Meeting] = {}
        self._cond = threading.Condition()
        self._stopped = False

    def stop(self) -> None:
        """Release every waiter (the pipeline is shutting down)."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def arrive(
        self, epoch: int, parties: int, instance: int, switch: Callable[[int], None]
    ) -> bool:
        """Wait until ``parties`` instances arrived for ``epoch``; the last runs the switch.

        Args:
            epoch: e*, the epoch being entered.
            parties: |O|, the instances of the epoch being left.
            instance: The caller's id.
            switch: Run once, by the last arriver, with its id, before anyone leaves.

        Returns:
            False if the barrier was stopped (shutdown) before the switch happened.

        Raises:
            ReconfigurationError: the switch failed (re-raised in every participant).

        """
        with self._cond:
            meeting = self._meetings.setdefault(epoch, _Meeting())
            meeting.arrived += 1
            meeting.waiting.add(instance)
            if meeting.arrived == parties:
                try:
                    switch(instance)
                except BaseException as exc:  # re-raised in every participant
                    meeting.error = exc
                meeting.done = True
                self._cond.notify_all()
            else:
                self._cond.wait_for(lambda: meeting.done or self._stopped)
            meeting.waiting.discard(instance)
            if not meeting.waiting and meeting.done:
                del self._meetings[epoch]
            if meeting.error is not None:
                msg = f"the switch to epoch {epoch} failed: {meeting.error}"
                raise ReconfigurationError(msg) from meeting.error
            return meeting.done
