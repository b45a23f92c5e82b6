"""The FastAPI app of the STRETCH sidecar: ``create_app`` wires routes, auth and metrics.

Routes (docs/design.md, "Interfaces that outside tests depend on"): ``/v1/operators...`` for the
operators and their streams, ``/healthz``, ``/readyz`` and ``/metrics``; the OpenAPI
schema at ``/openapi.json``, rendered at ``/docs``. See ``docs/api.md``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool

from api import lifecycle, staging, streams
from api.errors import install_error_handlers
from api.metrics import ServiceMetrics
from api.operators import OperatorRegistry
from api.staging import StagingStore

__all__ = ["create_app"]


def create_app(token: str | None = None) -> FastAPI:
    """A new app with its own operators and metrics registry.

    Args:
        token: If set, mutating routes need ``Authorization: Bearer <token>``.

    Returns:
        The app; its operators stop when the app's lifespan ends.

    """
    # The collector reads the registry at scrape time; the name binds late on purpose.
    metrics = ServiceMetrics(lambda: operators.snapshots())  # noqa: PLW0108
    operators = OperatorRegistry(metrics)

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
    app.state.staging = StagingStore(metrics)
    install_error_handlers(app)
    app.include_router(lifecycle.router)
    app.include_router(streams.router)
    app.include_router(staging.router)

    @app.get("/healthz", tags=["probes"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["probes"])
    async def readyz() -> dict[str, str | int]:
        """Readiness: the app takes requests; counts its operators."""
        return {"status": "ready", "operators": len(operators.all())}

    @app.get("/metrics", tags=["probes"], response_class=Response)
    async def metrics_route() -> Response:
        """Prometheus text exposition of the app's registry."""
        body = await run_in_threadpool(metrics.exposition)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return app
