"""The FastAPI app of the STRETCH sidecar: ``create_app`` wires routes, auth and metrics.

Routes (docs/design.md, "Interfaces that outside tests depend on"): ``/v1/operators...`` for the
operators and their streams, ``/healthz``, ``/readyz`` and ``/metrics``; the OpenAPI
schema at ``/openapi.json``, rendered at ``/docs``. See ``docs/api.md``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool

from api import lifecycle, streams
from api.errors import install_error_handlers
from api.limits import ServiceLimits
from api.long_polls import LongPolls
from api.metrics import ServiceMetrics
from api.operators import OperatorRegistry

__all__ = ["create_app"]


def create_app(token: str | None = None, limits: ServiceLimits | None = None) -> FastAPI:
    """A new app with its own operators and metrics registry.

    Args:
        token: If set, mutating routes need ``Authorization: Bearer <token>``.
        limits: What the service holds at most (defaults of ``ServiceLimits``).

    Returns:
        The app; its operators stop when the app's lifespan ends.

    """
    # The collector reads the registry at scrape time; the name binds late on purpose.
    metrics = ServiceMetrics(lambda: operators.snapshots())  # noqa: PLW0108
    limits = limits or ServiceLimits()
    operators = OperatorRegistry(metrics, limits)
    long_polls = LongPolls(limits.max_long_polls)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await run_in_threadpool(operators.shutdown)

    app = FastAPI(
        title="STRETCH sidecar",
        version="0.1.0",
        summary="Stateful stream operators with VSN parallelism and elastic reconfiguration",
        lifespan=lifespan,
    )
    app.state.token = token.encode() if token else None
    app.state.metrics = metrics
    app.state.operators = operators
    app.state.long_polls = long_polls
    install_error_handlers(app)
    app.include_router(lifecycle.router)
    app.include_router(streams.router)

    @app.get("/healthz", tags=["probes"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["probes"], responses={503: {"description": "cannot serve now"}})
    async def readyz() -> JSONResponse:
        """Readiness: the app can take requests now; counts its operators.

        503 while every worker thread is busy or the long-poll limit is reached.
        """
        threads = anyio.to_thread.current_default_thread_limiter()
        problems = []
        if threads.borrowed_tokens >= threads.total_tokens:
            problems.append(f"all {int(threads.total_tokens)} worker threads are busy")
        if long_polls.full:
            problems.append(f"{long_polls.waiting} output reads wait, the limit")
        body: dict[str, str | int] = {"operators": len(operators.all())}
        if problems:
            return JSONResponse({**body, "status": "busy", "detail": "; ".join(problems)}, 503)
        return JSONResponse({**body, "status": "ready"})

    @app.get("/metrics", tags=["probes"], response_class=Response)
    async def metrics_route() -> Response:
        """Prometheus text exposition of the app's registry."""
        body = await run_in_threadpool(metrics.exposition)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return app
