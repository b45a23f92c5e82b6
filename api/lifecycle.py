"""Routes that create, inspect, reconfigure and delete operators (``/v1/operators``).

None of them takes a query parameter: one given is refused (422, ``api.query``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from stretch.api import recovery
from stretch.api.mapping import FullMapping
from stretch.api.query import query_only
from stretch.api.registry import OperatorRegistry
from stretch.api.schemas import (
    CheckpointInfo,
    CreateOperator,
    OperatorStatus,
    ReconfigurationInfo,
    ReconfigureAccepted,
    ReconfigureRequest,
)
from stretch.api.status import operator_mapping, operator_status
from stretch.vsn import Shard

__all__ = [
    "ERRORS",
    "JSON_ERRORS",
    "NAME",
    "Registry",
    "UnavailableOperator",
    "registry",
    "router",
]

router = APIRouter(prefix="/v1/operators", tags=["operators"], dependencies=[query_only()])

NAME = Annotated[str, Path(description="the operator instance's name", max_length=100)]
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {
        "description": text,
        "content": {"application/json": {"example": {"detail": "what was wrong"}}},
    }
    for code, text in [
        (401, "missing or wrong bearer token"),
        (404, "unknown operator"),
        (409, "conflicts with the current state"),
        (422, "invalid request or parameters"),
    ]
}
JSON_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    400: {"description": "a body that is not JSON, or none"},
}
"""``ERRORS`` of a route taking a JSON body (``api.errors`` answers 400 for a malformed one)."""


def registry(request: Request) -> OperatorRegistry:
    """The app's operator registry (a dependency)."""
    operators: OperatorRegistry = request.app.state.operators
    return operators


Registry = Annotated[OperatorRegistry, Depends(registry)]


@router.post(
    "",
    status_code=201,
    response_model=OperatorStatus,
    responses=JSON_ERRORS,
)
async def create_operator(body: CreateOperator, operators: Registry) -> OperatorStatus:
    """Start catalog operator ``operator`` under ``name`` with m instances of a pool of n."""
    managed = await run_in_threadpool(
        operators.create,
        body.name,
        body.operator,
        body.params,
        body.parallelism,
        body.max_parallelism,
        body.capacity,
        body.allowed_lateness_ms,
        None if body.autoscale is None else body.autoscale.config(),
        None if body.shard is None else Shard(body.shard.index, body.shard.count),
    )
    return operator_status(managed)


class UnavailableOperator(BaseModel):
    """An operator kept in ``--state-dir`` that does not serve (its routes answer 503)."""

    name: str
    state: Literal["restoring", "failed"] = Field(
        description="being restored, or could not be restored (delete it to start over)"
    )
    detail: str = Field(description="why it does not serve, naming a damaged file")


@router.get("", response_model=list[OperatorStatus | UnavailableOperator])
async def list_operators(operators: Registry) -> list[OperatorStatus | UnavailableOperator]:
    """The status of every operator, by name; those that do not serve give their state."""
    listed: dict[str, OperatorStatus | UnavailableOperator] = {
        name: UnavailableOperator(name=name, state=state, detail=detail)
        for name, (state, detail) in operators.unavailable().items()
    }
    listed.update((managed.name, operator_status(managed)) for managed in operators.all())
    return [listed[name] for name in sorted(listed)]


@router.get("/{name}", response_model=OperatorStatus, responses=ERRORS)
async def get_operator(name: NAME, operators: Registry) -> OperatorStatus:
    """Epoch, parallelism, mapping, watermark per source, counters."""
    return operator_status(operators.get(name))


@router.get("/{name}/mapping", response_model=FullMapping, responses=ERRORS)
async def get_mapping(name: NAME, operators: Registry) -> FullMapping:
    """f_mu in force: entry g is the instance of key group g (-1: another shard's)."""
    return operator_mapping(operators.get(name))


@router.delete("/{name}", status_code=204, responses=ERRORS)
async def delete_operator(name: NAME, operators: Registry) -> Response:
    """Stop the operator and drop its state and output."""
    await run_in_threadpool(operators.delete, name)
    return Response(status_code=204)


@router.post(
    "/{name}/reconfigure",
    status_code=202,
    response_model=ReconfigureAccepted,
    responses=JSON_ERRORS,
)
async def reconfigure(
    name: NAME, body: ReconfigureRequest, operators: Registry
) -> ReconfigureAccepted:
    """Queue a new parallelism and/or mapping; it takes effect at an epoch barrier."""
    managed = operators.get(name)
    epoch = await run_in_threadpool(managed.reconfigure, body.parallelism, body.mapping)
    return ReconfigureAccepted(epoch=epoch)


@router.get("/{name}/reconfigurations", response_model=list[ReconfigurationInfo], responses=ERRORS)
async def reconfigurations(name: NAME, operators: Registry) -> list[ReconfigurationInfo]:
    """Every reconfiguration: epoch, ``from`` and ``to`` parallelism, duration."""
    return [
        ReconfigurationInfo.model_validate(
            {
                "epoch": r.epoch,
                "from": r.from_parallelism,
                "to": r.to_parallelism,
                "duration_ms": r.duration_ms,
                "trigger_ts": r.trigger_ts,
                "cause": r.cause,
                "reason": r.reason,
            }
        )
        for r in operators.get(name).reconfigurations()
    ]


@router.post(
    "/{name}/checkpoint",
    response_model=CheckpointInfo,
    responses={
        **ERRORS,
        409: {"description": "the service keeps no state (started without --state-dir)"},
    },
)
async def checkpoint(name: NAME, operators: Registry) -> CheckpointInfo:
    """Checkpoint the operator now (docs/api.md, "Durability"); answers when it is on disk.

    The operator's requests wait only while the snapshot is copied (``pause_ms``).
    """
    return await run_in_threadpool(recovery.checkpoint, operators.get(name))


@router.get("/{name}/checkpoints", response_model=list[CheckpointInfo], responses=ERRORS)
async def checkpoints(name: NAME, operators: Registry) -> list[CheckpointInfo]:
    """The checkpoints taken since the service started, oldest first (the last is on disk)."""
    return list(operators.get(name).checkpoints)
