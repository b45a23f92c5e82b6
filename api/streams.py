"""Routes that move data: batches, watermarks and close per source; output and commit.

Each route refuses a query parameter it does not take, or one given twice, with 422
naming it (``api.query``): a misspelt ``batchid`` would otherwise turn idempotency off
unnoticed, and a repeated ``batch_id`` would silently mean its last value.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from stretch.api.codec import ARROW_STREAM, ROWS_BODY, decode_batch, encode_arrow, json_rows
from stretch.api.guard import BodyLimits
from stretch.api.lifecycle import ERRORS, JSON_ERRORS, NAME, Registry
from stretch.api.long_polls import LongPolls
from stretch.api.operators import ManagedOperator
from stretch.api.query import query_only
from stretch.api.schemas import (
    INT64_MAX,
    INT64_MIN,
    BatchAccepted,
    CommitRequest,
    OutputCut,
    OutputPage,
    WatermarkRequest,
)
from stretch.vsn import Admission

__all__ = ["router"]

router = APIRouter(prefix="/v1/operators", tags=["streams"])

SOURCE = Annotated[int, Path(ge=0, le=1 << 16, description="the input source index")]
MAX_WAIT_MS = 60_000
NEXT_OFFSET = "Stretch-Next-Offset"


_BATCH_ERRORS = {
    **ERRORS,
    400: {"description": "malformed Arrow or JSON body"},
    413: {
        "description": "the batch is larger than the whole ingest buffer, the body larger "
        "than its limit, or the Arrow stream decodes to more than its limit"
    },
    415: {"description": "unsupported Content-Type"},
    429: {
        "description": "the ingest buffer is full: retry after Retry-After seconds",
        "headers": {"Retry-After": {"schema": {"type": "integer"}}},
    },
}


@router.post(
    "/{name}/sources/{source}/batches",
    status_code=202,
    response_model=BatchAccepted,
    responses=_BATCH_ERRORS,
    openapi_extra=ROWS_BODY,
    dependencies=[query_only("batch_id")],
)
async def add_batch(
    name: NAME,
    source: SOURCE,
    request: Request,
    operators: Registry,
    batch_id: Annotated[
        int | None, Query(ge=0, le=INT64_MAX, description="idempotency key per source")
    ] = None,
) -> BatchAccepted:
    """Add a batch of rows (Arrow IPC stream or JSON ``{"rows": [...]}``) to a source.

    Rows are put in ``ts`` order (stable); a row before the source's last ``ts`` or
    watermark makes the whole batch late (422, nothing added). A ``batch_id`` seen before
    on this source is acknowledged with ``duplicate: true`` and ignored.
    """
    managed = operators.get(name)
    managed.source(source)
    body = await request.body()
    content_type = request.headers.get("content-type", "")
    limits: BodyLimits = request.app.state.body_limits
    admission, duplicate = await run_in_threadpool(
        _decode_and_add, managed, source, batch_id, body, content_type, limits
    )
    return BatchAccepted(accepted=admission.accepted, duplicate=duplicate)


def _decode_and_add(
    managed: ManagedOperator,
    source: int,
    batch_id: int | None,
    body: bytes,
    content_type: str,
    limits: BodyLimits,
) -> tuple[Admission, bool]:
    schema = managed.pipeline.op.inputs[source]
    where = managed.where(source)
    table = decode_batch(body, content_type, schema, where, limits.decoded_batch_bytes)
    return managed.add_batch(source, batch_id, table)


@router.post(
    "/{name}/sources/{source}/watermark",
    status_code=202,
    responses=JSON_ERRORS,
    dependencies=[query_only()],
)
async def watermark(
    name: NAME, source: SOURCE, body: WatermarkRequest, operators: Registry
) -> dict[str, Any]:
    """Promise that the source sends no tuple with ``ts`` below ``body.ts``."""
    await run_in_threadpool(operators.get(name).watermark, source, body.ts)
    return {}


@router.post(
    "/{name}/sources/{source}/close",
    status_code=202,
    responses=ERRORS,
    dependencies=[query_only()],
)
async def close(name: NAME, source: SOURCE, operators: Registry) -> dict[str, Any]:
    """End of the source's input: its windows flush once every source is closed."""
    await run_in_threadpool(operators.get(name).close, source)
    return {}


def long_polls(request: Request) -> LongPolls:
    """The app's long-poll bookkeeping."""
    polls: LongPolls = request.app.state.long_polls
    return polls


@router.get(
    "/{name}/output",
    response_model=OutputPage,
    responses={
        **ERRORS,
        200: {
            "content": {ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}}},
            "description": f"rows from offset; Arrow answers carry {NEXT_OFFSET}",
        },
    },
    dependencies=[query_only("offset", "max_rows", "wait_ms")],
)
async def output(
    name: NAME,
    request: Request,
    operators: Registry,
    offset: Annotated[int, Query(ge=0, le=INT64_MAX)] = 0,
    max_rows: Annotated[int, Query(ge=1, le=1_000_000)] = 10_000,
    wait_ms: Annotated[
        int, Query(ge=0, le=MAX_WAIT_MS, description="long-poll for up to this long")
    ] = 0,
    accept: Annotated[str, Header()] = "application/json",
) -> Response:
    """Output rows from ``offset`` (``ts`` first), waiting up to ``wait_ms`` for one.

    The wait holds no worker thread (``api.long_polls``); at most ``--max-long-polls``
    reads wait at once, another gets 429. A read whose operator is deleted while it
    waits gets 404; one waiting when the service shuts down gets 503. A client that
    hangs up frees its place at once.
    """
    managed = operators.get(name)  # the read stays with this operator, whatever its name
    if wait_ms > 0 and not await long_polls(request).wait(
        managed, offset, wait_ms / 1000, request.receive
    ):
        return Response(status_code=204)  # the client hung up; nobody reads this
    table, next_offset = managed.pipeline.output(offset, max_rows)
    if ARROW_STREAM in accept:
        return Response(
            encode_arrow(table), media_type=ARROW_STREAM, headers={NEXT_OFFSET: str(next_offset)}
        )
    rows = await run_in_threadpool(json_rows, table)
    return JSONResponse({"rows": rows, "next_offset": next_offset})


@router.get(
    "/{name}/output/cut",
    response_model=OutputCut,
    responses=ERRORS,
    dependencies=[query_only("ts")],
)
async def output_cut(
    name: NAME,
    operators: Registry,
    ts: Annotated[int, Query(ge=INT64_MIN, le=INT64_MAX, description="the cut's event time")],
) -> OutputCut:
    """The first offset whose row has ``ts`` T or later (the merge of a sharded operator).

    Final once T is at most the answer's ``watermark`` (or the output is finished).
    """
    pipeline = operators.get(name).pipeline
    status = pipeline.output_status()
    offset = await run_in_threadpool(pipeline.output_cut, ts)
    return OutputCut(offset=offset, watermark=status.watermark, finished=status.finished)


@router.post(
    "/{name}/output/commit",
    status_code=202,
    responses=JSON_ERRORS,
    dependencies=[query_only()],
)
async def commit(name: NAME, body: CommitRequest, operators: Registry) -> dict[str, Any]:
    """Everything before ``offset`` was consumed; the log may trim it (a shard keeps ``cut``)."""
    await run_in_threadpool(operators.get(name).commit, body.offset, body.cut)
    return {}
