"""Request and response bodies of the REST API (the contract of docs/design.md, as pydantic).

The OpenAPI schema at ``/openapi.json`` (rendered at ``/docs``) is generated from these.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from stretch.api.mapping import MappingSummary
from stretch.controller import PolicyConfig
from stretch.model.schema import TS_MAX_MS, TS_MIN_MS

__all__ = [
    "AutoscaleRequest",
    "AutoscaleState",
    "BatchAccepted",
    "BatchRows",
    "CheckpointInfo",
    "CommitRequest",
    "CreateOperator",
    "DecisionInfo",
    "InstanceStatus",
    "OperatorCounters",
    "OperatorStatus",
    "OutputCut",
    "OutputPage",
    "OutputStatus",
    "ReconfigurationInfo",
    "ReconfigureAccepted",
    "ReconfigureRequest",
    "ShardRequest",
    "SourceStatus",
    "WatermarkRequest",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MAX_PARALLELISM = 64
"""The pool size limit of the runtime's gates."""


class _Strict(BaseModel):
    """A request body: unknown fields refused, and no coercion (``true`` or ``"2"`` is not 2)."""

    model_config = ConfigDict(extra="forbid", strict=True)


def _unicode(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        msg = "holds an unpaired surrogate (not valid Unicode)"
        raise ValueError(msg) from None
    return text


def _param_value(value: object) -> object:
    if isinstance(value, str):
        return _unicode(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        msg = f"must be a string or a number, not {type(value).__name__}"
        raise ValueError(msg)
    if not math.isfinite(value):
        msg = f"must be finite, got {value}"
        raise ValueError(msg)
    return value


ParamValue = Annotated[str | int | float, BeforeValidator(_param_value)]
"""A catalog parameter: a string, an integer or a finite number; never a boolean."""


MAX_SHARDS = 64
"""The most sidecars one operator may be sharded over."""


class ShardRequest(_Strict):
    """Which of N sidecars this is for a sharded operator (docs/design.md "Sharding")."""

    index: int = Field(ge=0, lt=MAX_SHARDS, description="this sidecar's shard, 0..count-1")
    count: int = Field(ge=1, le=MAX_SHARDS, description="N, the sidecars of the operator")

    def model_post_init(self, context: Any, /) -> None:
        """Refuse an index outside ``0..count-1``."""
        if self.index >= self.count:
            msg = f"shard index {self.index} must be below its count {self.count}"
            raise ValueError(msg)


class CreateOperator(_Strict):
    """``POST /v1/operators``: start a catalog operator under a name."""

    name: str = Field(
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$",
        description="the instance name used in every other route: letters, digits, "
        "'_', '-' and '.', not starting with '.'",
    )
    operator: str = Field(
        description="a catalog name: forward, scalejoin, hedge, wordcount, paircount, longest_tweet"
    )
    params: dict[Annotated[str, AfterValidator(_unicode)], ParamValue] = Field(
        default_factory=dict,
        description="catalog parameters, e.g. {'ws': 2000}; forward needs 'columns'",
    )
    parallelism: int = Field(
        default=1, ge=1, le=MAX_PARALLELISM, description="m, the instances connected at start"
    )
    max_parallelism: int | None = Field(
        default=None,
        ge=1,
        le=MAX_PARALLELISM,
        description="n, the pool size (default: max(parallelism, 4))",
    )
    capacity: int = Field(
        default=1 << 16,
        ge=1 << 10,
        le=1 << 20,
        description="nodes the ingest gate holds; beyond it adds get 429",
    )
    allowed_lateness_ms: int = Field(
        default=0,
        ge=0,
        le=1 << 40,
        description="how far behind a source's largest ts its rows may arrive; older "
        "rows are late (422). Rows wait in a reorder buffer until then",
    )
    autoscale: AutoscaleRequest | None = Field(
        default=None, description="start under this autoscale policy (as PUT .../autoscale)"
    )
    shard: ShardRequest | None = Field(
        default=None,
        description="own only the key groups g with g % count == index (one of count "
        "sidecars running this operator); output rows then carry '_cause' for the merge",
    )


class SourceStatus(BaseModel):
    """One input source of an operator."""

    index: int
    watermark: int | None = Field(description="the latest explicit watermark or last ts")
    closed: bool
    tuples_in: int
    batches: int
    duplicate_batches: int
    late_tuples: int


class InstanceStatus(BaseModel):
    """One pool instance."""

    id: int
    connected: bool
    tuples_in: int
    tuples_out: int
    comparisons: int
    busy_s: float


class OutputStatus(BaseModel):
    """The output log's offsets."""

    start_offset: int
    committed_offset: int = Field(
        description="the offset every reader committed up to: start_offset, or beyond it "
        "while a restarted operator produces again the rows a commit passed"
    )
    end_offset: int
    finished: bool
    watermark: int = Field(description="every output row with a smaller ts is in the log")
    committed_cut: list[int] | None = Field(
        default=None,
        description="a shard: the latest cut a sharded reader committed here (every "
        "shard's offset of the merged position; this shard's is its commit), or null",
    )


class OutputCut(BaseModel):
    """``GET .../output/cut?ts=T``: where the rows of ``ts`` T or later start."""

    offset: int = Field(description="the first offset holding a row with ts >= T")
    watermark: int = Field(description="the cut is final if T is at most this")
    finished: bool


class OperatorCounters(BaseModel):
    """Totals over the operator's sources and output."""

    tuples_in: int
    tuples_out: int
    late_tuples: int
    duplicate_batches: int
    esg_in_occupancy: int


class OperatorStatus(BaseModel):
    """What ``GET /v1/operators/{name}`` answers."""

    name: str
    operator: str
    params: dict[str, str | int | float]
    epoch: int
    parallelism: int
    max_parallelism: int
    max_batch_rows: int = Field(description="the largest batch a source takes (else 413)")
    mapping: MappingSummary = Field(
        description="f_mu in force now, per instance (GET .../mapping: every entry)"
    )
    watermarks: list[int | None] = Field(description="per source")
    sources: list[SourceStatus]
    instances: list[InstanceStatus]
    output: OutputStatus
    counters: OperatorCounters
    state_bytes: int | None = Field(
        description="bytes of the arrays holding the operator's windows (null: generic path)"
    )
    shard: ShardRequest | None = Field(default=None, description="the shard it is, if sharded")


class CheckpointInfo(BaseModel):
    """A checkpoint taken (``POST .../checkpoint``, ``GET .../checkpoints``)."""

    checkpoint: int = Field(description="its id: it covers every journal record before it")
    epoch: int = Field(description="the epoch of the plan it restores")
    bytes: int = Field(description="bytes of its files on disk")
    duration_ms: float = Field(description="from the snapshot to the files on disk")
    pause_ms: float = Field(description="how long it held the operator's requests")
    time_s: float = Field(description="when it was taken (Unix time)")


class BatchRows(_Strict):
    """A JSON batch: one object per row with ``ts`` and the source's columns."""

    rows: list[dict[str, Any]]


class BatchAccepted(BaseModel):
    """``202`` of a batch: rows added, or a repeated ``batch_id`` acknowledged and ignored."""

    accepted: int
    duplicate: bool


class WatermarkRequest(_Strict):
    """A promise that the source sends no tuple with a smaller ``ts``."""

    ts: int = Field(ge=TS_MIN_MS, le=TS_MAX_MS, description="event time in ms")


class CommitRequest(_Strict):
    """Everything before ``offset`` was consumed; the log may trim it."""

    offset: int = Field(ge=0, le=INT64_MAX)
    cut: list[Annotated[int, Field(ge=0, le=INT64_MAX)]] | None = Field(
        default=None,
        max_length=MAX_SHARDS,
        description="a shard only: the sharded reader's cut, every shard's offset of the "
        "merged position committed (``offset`` at this shard's index); kept so that a new "
        "reader resumes there even if the commit failed on other shards",
    )


class OutputPage(BaseModel):
    """A page of output rows (``ts`` first) and the offset to ask for next."""

    rows: list[dict[str, Any]]
    next_offset: int


class ReconfigureRequest(_Strict):
    """A new parallelism, a new mapping f_mu (key group -> instance), or both."""

    parallelism: int | None = Field(default=None, ge=1, le=MAX_PARALLELISM)
    mapping: list[int] | None = Field(default=None, max_length=1 << 20)


class ReconfigureAccepted(BaseModel):
    """The epoch the reconfiguration will start (it completes asynchronously)."""

    epoch: int


class ReconfigurationInfo(BaseModel):
    """One reconfiguration: ``from`` and ``to`` parallelism, and its duration once done."""

    model_config = ConfigDict(populate_by_name=True)

    epoch: int
    from_: int = Field(alias="from")
    to: int
    duration_ms: float | None = Field(description="call -> completion; null while pending")
    trigger_ts: int | None = None
    cause: Literal["manual", "autoscale", "compaction"] = Field(
        default="manual",
        description="who asked: a client (manual), the autoscaler, or the runtime itself "
        "(compaction: a barrier at the same plan to compact its string dictionary)",
    )
    reason: str | None = Field(default=None, description="the autoscaler's reason")


class AutoscaleRequest(BaseModel):
    """An autoscale policy; every field but ``policy`` defaults to the policy's own."""

    model_config = ConfigDict(extra="forbid", strict=True)

    policy: Literal["threshold", "model"] = Field(
        description="threshold: the paper's Q4 controller on measured load (90/70/45%); "
        "model: Q5's, on predicted work over measured capacity (80/75/70%)"
    )
    upper: float | None = Field(None, gt=0, le=1, description="provision above this load")
    target: float | None = Field(None, gt=0, le=1, description="the load a decision aims at")
    lower: float | None = Field(None, gt=0, le=1, description="decommission below this load")
    period_ms: int | None = Field(
        None, ge=10, le=3_600_000, description="how often load is sampled and judged"
    )
    min_parallelism: int | None = Field(None, ge=1, description="fewest instances (1)")
    max_parallelism: int | None = Field(None, ge=1, description="most instances (the pool size)")

    def config(self) -> PolicyConfig:
        """The ``PolicyConfig``: the policy's defaults, overridden where given."""
        given = self.model_dump(exclude_none=True, exclude={"policy"})
        return replace(PolicyConfig.defaults(self.policy), **given)


class DecisionInfo(BaseModel):
    """One decision of the controller."""

    kind: Literal["provision", "decommission", "hold"]
    parallelism: int = Field(description="the parallelism decided (the current one to hold)")
    reason: str
    load: float = Field(description="the average load judged (measured or predicted)")
    applied: bool
    epoch: int | None = None
    error: str | None = None


class AutoscaleState(BaseModel):
    """An operator's autoscaler: its policy and bounds, and what it decided last."""

    policy: Literal["threshold", "model"]
    upper: float
    target: float
    lower: float
    period_ms: int
    min_parallelism: int
    max_parallelism: int
    decisions: int = Field(description="decisions taken so far (each period)")
    reconfigurations: int = Field(description="decisions that changed the parallelism")
    last_decision: DecisionInfo | None = None
