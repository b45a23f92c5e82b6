"""What a running pipeline tells about itself: frozen, typed snapshots.

``Pipeline.status()`` returns a ``PipelineStatus`` (the REST status and the CLI's progress
lines are built from it), ``Pipeline.load()`` the ``LoadCounters`` the controller turns
into load snapshots, and ``Pipeline.add`` an ``Admission``. Each is a copy: reading it
never touches the runtime again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Admission",
    "GateStatus",
    "InstanceStatus",
    "LoadCounters",
    "OutputStatus",
    "PipelineStatus",
    "ReconfigurationStatus",
    "SourceStatus",
]


@dataclass(frozen=True)
class Admission:
    """What ``Pipeline.add`` did with a batch.

    Attributes:
        accepted: Rows added to the source.
        dropped: Late rows dropped (``late="drop"``); they are not in the source.
        min_ts: The smallest ``ts`` added, in ms (None if no row was added).

    """

    accepted: int
    dropped: int = 0
    min_ts: int | None = None


@dataclass(frozen=True)
class InstanceStatus:
    """One pool instance's counters."""

    id: int
    connected: bool
    busy_s: float
    tuples_in: int
    tuples_out: int
    comparisons: int


@dataclass(frozen=True)
class SourceStatus:
    """One input source.

    Attributes:
        index: The source index.
        watermark: The latest watermark that entered ESG_in, else the last ``ts`` stored
            (None before any).
        released: The reorder buffer's released watermark.
        closed: Whether the source's input ended.
        rows: Rows released to the source so far (its next sequence number).
        held_rows: Rows its reorder buffer holds back.
        backlog: Rows released but still waiting for room in ESG_in.
        allowed_lateness_ms: The lateness its reorder buffer allows.

    """

    index: int
    watermark: int | None
    released: int
    closed: bool
    rows: int
    held_rows: int
    backlog: int
    allowed_lateness_ms: int


@dataclass(frozen=True)
class GateStatus:
    """A gate's occupancy (nodes held) and watermark."""

    occupancy: int
    watermark: int


@dataclass(frozen=True)
class OutputStatus:
    """The output log.

    Attributes:
        start_offset: The oldest offset held (earlier ones were committed and trimmed).
        committed_offset: The offset every reader committed up to: ``start_offset``, or
            beyond it while a restarted operator produces again the rows a commit passed.
        end_offset: The offset the next row gets.
        finished: Every row is in (the end of input went through).
        watermark: Every output row with a smaller ``ts`` is in the log.

    """

    start_offset: int
    committed_offset: int
    end_offset: int
    finished: bool
    watermark: int


@dataclass(frozen=True)
class ReconfigurationStatus:
    """A reconfiguration: what it did and when.

    Attributes:
        epoch: The epoch it started.
        from_parallelism: |O| before.
        to_parallelism: |O*|.
        duration_ms: Call -> completion, None while pending.
        trigger_ts: The ``ts`` of the control tuple it switched at (None while pending).
        cause: ``"manual"``, ``"autoscale"`` or ``"compaction"`` (the pipeline's own, at
            the same plan, to compact its string dictionary).
        reason: Why, if the caller said.
        requested_ns: When ``reconfigure`` was called (``time.perf_counter_ns``).
        completed_ns: When the switch was done (None while pending).

    """

    epoch: int
    from_parallelism: int
    to_parallelism: int
    duration_ms: float | None
    trigger_ts: int | None
    cause: str
    reason: str | None
    requested_ns: int
    completed_ns: int | None


@dataclass(frozen=True)
class PipelineStatus:
    """A pipeline at one moment.

    Attributes:
        operator: The operator's name.
        epoch: The epoch in force.
        parallelism: m, the instances connected in it.
        max_parallelism: n, the pool size.
        mapping: f_mu of the epoch in force (key group -> instance).
        path: ``"compiled"`` (the operator's declared kernel) or ``"generic"``.
        instances: Every pool instance.
        sources: Every input source.
        esg_in: ESG_in.
        esg_out: ESG_out.
        output: The output log.
        reconfigurations: The most recent reconfigurations, by epoch.
        time_s: When it was taken (``time.time()``).
        dictionary_bytes: Bytes the string dictionary holds (bounded by its compaction,
            ``RuntimeSettings.compact_dictionary_bytes``).
        state_bytes: Bytes of the arrays holding the operator's windows (its kernel's
            stores, indexes and tables, every instance's), or None on the generic path,
            whose state is Python objects.

    """

    operator: str
    epoch: int
    parallelism: int
    max_parallelism: int
    mapping: tuple[int, ...]
    path: Literal["compiled", "generic"]
    instances: tuple[InstanceStatus, ...]
    sources: tuple[SourceStatus, ...]
    esg_in: GateStatus
    esg_out: GateStatus
    output: OutputStatus
    reconfigurations: tuple[ReconfigurationStatus, ...]
    time_s: float
    dictionary_bytes: int
    state_bytes: int | None


@dataclass(frozen=True)
class LoadCounters:
    """Cumulative counters for a load sample, read without stopping the instances.

    Attributes:
        epoch: The epoch in force.
        parallelism: m.
        max_parallelism: n.
        busy_s: Per pool instance, seconds spent processing so far.
        comparisons: Join comparisons so far (0 for operators that are not band joins).
        rows: Per source, rows added so far.
        backlog: Nodes in ESG_in not yet read by every instance.
        window_rows: Per source, rows within WS of its last ``ts`` (what a new tuple of
            the opposite stream meets); None unless the operator is a band join.
        inputs_open: Whether some source's input has not yet ended in ESG_in; once every
            input has, no reconfiguration can be made.

    """

    epoch: int
    parallelism: int
    max_parallelism: int
    busy_s: tuple[float, ...]
    comparisons: int
    rows: tuple[int, ...]
    backlog: int
    window_rows: tuple[int, ...] | None
    inputs_open: bool = True
