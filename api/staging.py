"""Staged micro-batches: a parallel writer's parts, made visible as one batch by a commit.

Spark's executors send the partitions of a micro-batch at the same time, and those
partitions overlap in ``ts``. Adding each partition as its own batch would order rows of
equal ``ts`` by HTTP arrival and make rows of a later-arriving partition late. So a writer
*stages* each partition as a part (``PUT .../staged/{writer}/{batch}/{part}``), and the
driver's commit (``POST .../staged/{writer}/{batch}/commit`` with the list of parts) adds
the parts, concatenated in the listed order (partition order), as one batch: the output
never depends on which partition arrived first. ``DELETE .../staged/{writer}/{batch}``
aborts.

Idempotency is per writer (Spark's query id): a commit of a batch at or below the writer's
last committed batch is acknowledged as a duplicate and adds nothing (it is counted, and
journaled, as a resent ``batch_id`` is: ``ManagedOperator.acknowledge_duplicate``), and a
part staged for such a batch is ignored, so a micro-batch replayed after a crash is added
exactly once.
A commit also discards the writer's older staged batches (Spark commits a query's batches
in order, so they can never be committed).

Late rows (older than the source's released watermark) follow the commit's ``late_rows``:
``fail`` refuses the batch (422, nothing added), ``drop`` adds the rest and counts the
dropped rows as the source's ``late_tuples``. Staged parts are bounded in bytes per app:
beyond the bound a part gets 429 (retry later). None of the routes takes a query
parameter: one given is refused (422, ``api.query``).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import pyarrow as pa
from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.concurrency import run_in_threadpool

from stretch.api.codec import ROWS_BODY, decode_batch
from stretch.api.errors import ConflictError
from stretch.api.lifecycle import ERRORS, JSON_ERRORS, NAME, Registry
from stretch.api.operators import ManagedOperator
from stretch.api.query import query_only
from stretch.api.schemas import INT64_MAX
from stretch.errors import CapacityError
from stretch.model.schema import conform

__all__ = [
    "DEFAULT_MAX_STAGED_BYTES",
    "CommitAccepted",
    "CommitStaged",
    "PartStaged",
    "StagingStore",
    "router",
]

DEFAULT_MAX_STAGED_BYTES = 1 << 30
"""Bytes of staged parts an app holds before a part gets 429."""

router = APIRouter(prefix="/v1/operators", tags=["staging"], dependencies=[query_only()])

SOURCE = Annotated[int, Path(ge=0, le=1 << 16, description="the input source index")]
WRITER = Annotated[
    str,
    Path(
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="the writer's id (Spark: the streaming query id); batch ids are its own",
    ),
]
BATCH = Annotated[int, Path(ge=0, le=INT64_MAX, description="the writer's batch id")]
PART = Annotated[int, Path(ge=0, le=1 << 20, description="the part (Spark: partition id)")]


class CommitStaged(BaseModel):
    """``POST .../staged/{writer}/{batch}/commit``: add these parts as one batch."""

    model_config = ConfigDict(extra="forbid", strict=True)

    parts: list[int] = Field(
        max_length=1 << 20,
        description="the parts, each once, in the order their rows are added",
    )
    late_rows: Literal["fail", "drop"] = Field(
        default="fail",
        description="rows older than the source's released watermark: fail refuses the "
        "batch (422), drop adds the rest and counts them as late_tuples",
    )
    allowed_lateness_ms: int | None = Field(
        default=None,
        ge=0,
        le=1 << 40,
        description="if set, the lateness the source's reorder buffer allows from now on",
    )
    continues: bool = Field(
        default=False,
        description="the writer committed its earlier batches to this operator: a commit "
        "that would be its first here is refused (409), since those batches are not in it "
        "(e.g. a sidecar restarted without --state-dir)",
    )

    @field_validator("parts")
    @classmethod
    def _each_once(cls, parts: list[int]) -> list[int]:
        """Refuse a part listed twice: its rows would be added twice."""
        seen: set[int] = set()
        for part in parts:
            if part in seen:
                msg = f"part {part} is listed more than once; list each part once"
                raise ValueError(msg)
            seen.add(part)
        return parts


class PartStaged(BaseModel):
    """The answer to a staged part."""

    rows: int = Field(description="rows staged (0 when the batch was committed already)")
    committed: bool = Field(description="the batch was committed before: the part is ignored")


class CommitAccepted(BaseModel):
    """The answer to a commit."""

    accepted: int = Field(description="rows added to the source")
    dropped: int = Field(description="late rows dropped (late_rows=drop)")
    duplicate: bool = Field(description="the batch was committed before: nothing changed")
    first_of_writer: bool = Field(
        default=False,
        description="the source had no earlier batch of this writer: with a batch id above "
        "0 the writer's earlier batches are not in this operator (e.g. a sidecar that "
        "restarted without --state-dir; the writer then needs a new checkpoint)",
    )


@dataclass
class _Source:
    """The staged batches and committed batch ids of one source of one operator."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    staged: dict[tuple[str, int], dict[int, pa.Table]] = field(default_factory=dict)


class StagingStore:
    """Every operator's staged parts, bounded in bytes.

    Entries are keyed by the running ``ManagedOperator`` (weakly), so a deleted operator's
    staged parts and committed ids go with it and a new one of the same name starts clean.

    Args:
        max_bytes: The most bytes of staged parts held at once.

    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_STAGED_BYTES) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._bytes = 0
        self._operators: weakref.WeakKeyDictionary[ManagedOperator, list[_Source]] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def staged_bytes(self) -> int:
        """Bytes of staged parts held now."""
        return self._bytes

    def _source(self, managed: ManagedOperator, source: int) -> _Source:
        managed.source(source)  # NotFoundError for a bad index
        with self._lock:
            sources = self._operators.get(managed)
            if sources is None:
                sources = [_Source() for _ in managed.sources]
                self._operators[managed] = sources
            return sources[source]

    def _release(self, parts: dict[int, pa.Table]) -> None:
        with self._lock:
            self._bytes -= sum(t.nbytes for t in parts.values())

    def stage(
        self,
        managed: ManagedOperator,
        source: int,
        writer: str,
        batch: int,
        part: int,
        table: pa.Table,
    ) -> PartStaged:
        """Stage ``table`` as part ``part`` of the writer's batch (replacing a resent part).

        Raises:
            NotFoundError: no such source.
            SchemaError: the rows do not match the source's schema.
            CapacityError: the staged parts would exceed the store's bound (retry later).

        """
        state = self._source(managed, source)
        where = f"{managed.where(source)}, writer {writer!r} batch {batch} part {part}"
        table = conform(table, managed.pipeline.op.inputs[source], where)
        with state.lock:
            if batch <= managed.committed_batch(source, writer):
                return PartStaged(rows=0, committed=True)
            parts = state.staged.setdefault((writer, batch), {})
            old = parts.get(part)
            grow = table.nbytes - (old.nbytes if old is not None else 0)
            with self._lock:
                if grow > 0 and self._bytes + grow > self.max_bytes:
                    msg = (
                        f"{where}: staged parts hold {self._bytes} of {self.max_bytes} bytes; "
                        f"{table.nbytes} more do not fit now; retry later"
                    )
                    raise CapacityError(msg)
                self._bytes += grow
            parts[part] = table
        return PartStaged(rows=table.num_rows, committed=False)

    def commit(
        self, managed: ManagedOperator, source: int, writer: str, batch: int, body: CommitStaged
    ) -> CommitAccepted:
        """Add the listed parts, in order, as one batch of ``source``.

        Raises:
            NotFoundError: no such source.
            ConflictError: a listed part was not staged; the source is closed; the
                writer ``continues`` but has no earlier batch here (its parts are dropped).
            CapacityError: the ingest buffer has no room now; the parts stay staged.
            LateTupleError: ``late_rows="fail"`` and a row is late; the parts are discarded.

        """
        state = self._source(managed, source)
        where = f"{managed.where(source)}, writer {writer!r} batch {batch}"
        with state.lock:
            if managed.acknowledge_duplicate(source, (writer, batch)):
                self._discard_through(state, writer, batch)
                return CommitAccepted(accepted=0, dropped=0, duplicate=True)
            first = managed.committed_batch(source, writer) < 0
            if first and body.continues:
                self._discard(state, writer, batch)
                msg = (
                    f"{where}: the operator has no earlier batch of this writer, which "
                    "committed its earlier batches here: they are not in it (was the sidecar "
                    "restarted without --state-dir, or the operator created again?); "
                    "restart the query with a new checkpointLocation to send its input again"
                )
                raise ConflictError(msg)
            parts = state.staged.get((writer, batch), {})
            missing = [p for p in body.parts if p not in parts]
            if missing:
                msg = (
                    f"{where}: part(s) {', '.join(map(str, missing[:10]))} were not staged "
                    f"(staged: {sorted(parts) or 'none'}); send them again"
                )
                raise ConflictError(msg)
            tables = [parts[p] for p in body.parts]
            schema = managed.pipeline.op.inputs[source].arrow()
            table = pa.concat_tables(tables) if tables else schema.empty_table()
            if body.allowed_lateness_ms is not None:
                managed.set_allowed_lateness(source, body.allowed_lateness_ms)
            try:
                admission, duplicate = managed.add_batch(
                    source, None, table, body.late_rows, writer=(writer, batch)
                )
            except Exception as exc:
                if not isinstance(exc, CapacityError):  # a full buffer keeps the parts
                    self._discard(state, writer, batch)
                raise
            self._discard_through(state, writer, batch)
        return CommitAccepted(
            accepted=admission.accepted,
            dropped=admission.dropped,
            duplicate=duplicate,
            first_of_writer=first and not duplicate,
        )

    def abort(self, managed: ManagedOperator, source: int, writer: str, batch: int) -> None:
        """Discard the staged parts of the writer's batch (nothing if none)."""
        state = self._source(managed, source)
        with state.lock:
            self._discard(state, writer, batch)

    def _discard(self, state: _Source, writer: str, batch: int) -> None:
        parts = state.staged.pop((writer, batch), None)
        if parts:
            self._release(parts)

    def _discard_through(self, state: _Source, writer: str, batch: int) -> None:
        for key in [k for k in state.staged if k[0] == writer and k[1] <= batch]:
            self._discard(state, *key)


def staging(request: Request) -> StagingStore:
    """The app's staging store (a dependency)."""
    store: StagingStore = request.app.state.staging
    return store


Staging = Annotated[StagingStore, Depends(staging)]

_STAGED = "/{name}/sources/{source}/staged/{writer}/{batch}"
_PART_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    400: {"description": "malformed Arrow or JSON body"},
    413: {
        "description": "the body is larger than its limit, or the Arrow stream decodes to "
        "more than its limit"
    },
    415: {"description": "unsupported Content-Type"},
    429: {"description": "the staged parts are at their bound: retry later"},
}


@router.put(
    _STAGED + "/{part}",
    response_model=PartStaged,
    responses=_PART_ERRORS,
    openapi_extra=ROWS_BODY,
)
async def stage_part(
    name: NAME,
    source: SOURCE,
    writer: WRITER,
    batch: BATCH,
    part: PART,
    request: Request,
    operators: Registry,
    store: Staging,
) -> PartStaged:
    """Stage one part (Arrow IPC stream or JSON rows) of a writer's batch; a resend replaces it.

    Nothing becomes visible until the batch is committed. A part of a batch the writer
    committed before is acknowledged with ``committed: true`` and ignored.
    """
    managed = operators.get(name)
    managed.source(source)
    body = await request.body()
    content_type = request.headers.get("content-type", "")

    def stage() -> PartStaged:
        schema = managed.pipeline.op.inputs[source]
        limit = request.app.state.body_limits.decoded_batch_bytes
        table = decode_batch(body, content_type, schema, managed.where(source), limit)
        return store.stage(managed, source, writer, batch, part, table)

    return await run_in_threadpool(stage)


@router.post(
    _STAGED + "/commit",
    status_code=202,
    response_model=CommitAccepted,
    responses={
        **JSON_ERRORS,
        429: {"description": "the ingest buffer is full: retry; the parts stay staged"},
    },
)
async def commit_staged(
    name: NAME,
    source: SOURCE,
    writer: WRITER,
    batch: BATCH,
    body: CommitStaged,
    operators: Registry,
    store: Staging,
) -> CommitAccepted:
    """Add the listed parts, concatenated in the listed order, as one batch of the source.

    Idempotent: a batch at or below the writer's last committed one is a duplicate.
    """
    managed = operators.get(name)
    return await run_in_threadpool(store.commit, managed, source, writer, batch, body)


@router.delete(
    _STAGED,
    status_code=204,
    responses=ERRORS,
)
async def abort_staged(
    name: NAME, source: SOURCE, writer: WRITER, batch: BATCH, operators: Registry, store: Staging
) -> Response:
    """Discard the staged parts of a writer's batch."""
    managed = operators.get(name)
    await run_in_threadpool(store.abort, managed, source, writer, batch)
    return Response(status_code=204)
