"""Routes that put an operator under a controller (``/v1/operators/{name}/autoscale``).

``PUT`` starts (or replaces) the operator's autoscaler with a policy of ``controller``;
``GET`` reads it with its last decision; ``DELETE`` goes back to manual reconfiguration.
The same body is accepted as ``"autoscale"`` when an operator is created. None of the
routes takes a query parameter: one given is refused (422, ``api.query``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from starlette.concurrency import run_in_threadpool

from stretch.api.lifecycle import ERRORS, JSON_ERRORS, NAME, Registry
from stretch.api.query import query_only
from stretch.api.schemas import AutoscaleRequest, AutoscaleState

__all__ = ["router"]

router = APIRouter(prefix="/v1/operators", tags=["autoscale"], dependencies=[query_only()])


@router.put(
    "/{name}/autoscale",
    response_model=AutoscaleState,
    responses=JSON_ERRORS,
)
async def put_autoscale(name: NAME, body: AutoscaleRequest, operators: Registry) -> dict[str, Any]:
    """Put the operator under a controller (replacing one it had)."""
    managed = operators.get(name)
    return await run_in_threadpool(managed.autoscaler.put, body.config())


@router.get("/{name}/autoscale", response_model=AutoscaleState, responses=ERRORS)
async def get_autoscale(name: NAME, operators: Registry) -> dict[str, Any]:
    """The operator's autoscaler and its last decision (404 when it has none)."""
    return operators.get(name).autoscaler.state()


@router.delete("/{name}/autoscale", status_code=204, responses=ERRORS)
async def delete_autoscale(name: NAME, operators: Registry) -> Response:
    """Back to manual reconfiguration (the parallelism stays as it is)."""
    await run_in_threadpool(operators.get(name).autoscaler.clear)
    return Response(status_code=204)
