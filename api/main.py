"""The FastAPI app of the STRETCH sidecar: ``create_app`` wires routes, auth and metrics.

Routes (docs/design.md, "Interfaces that outside tests depend on"): ``/v1/operators...`` for the
operators and their streams, ``/healthz``, ``/readyz`` and ``/metrics``; the OpenAPI
schema at ``/openapi.json``, rendered at ``/docs``. See ``docs/api.md``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio.to_thread
from fastapi import Depends, FastAPI, Response
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.concurrency import run_in_threadpool
from swagger_ui_bundle import swagger_ui_path

from stretch import __version__
from stretch.api import autoscale, lifecycle, staging, streams
from stretch.api.auth import require_token
from stretch.api.durability import StateDirectory
from stretch.api.errors import install_error_handlers
from stretch.api.guard import BodyLimits, RequestGuard
from stretch.api.limits import ServiceLimits
from stretch.api.long_polls import LongPolls
from stretch.api.metrics import ServiceMetrics
from stretch.api.registry import DEFAULT_CHECKPOINT_INTERVAL_S, OperatorRegistry
from stretch.api.staging import StagingStore

__all__ = ["create_app"]


def create_app(
    token: str | None = None,
    limits: ServiceLimits | None = None,
    body_limits: BodyLimits | None = None,
    state_dir: Path | None = None,
    checkpoint_interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S,
) -> FastAPI:
    """A new app with its own operators and metrics registry.

    Args:
        token: If set, every ``/v1`` route and ``/metrics`` need ``Authorization: Bearer
            <token>`` (``/healthz`` and ``/readyz`` stay open).
        limits: What the service holds at most (defaults of ``ServiceLimits``).
        body_limits: The largest request bodies it reads (default ``BodyLimits()``).
        state_dir: Keep every operator durably here and restore them at start
            (docs/api.md, "Durability"); None keeps state in memory only.
        checkpoint_interval_s: How often each changed operator is checkpointed.

    Raises:
        StretchError: ``state_dir`` cannot be written.

    Returns:
        The app; its operators stop when the app's lifespan ends.

    """
    # The collector reads the registry at scrape time; the name binds late on purpose.
    metrics = ServiceMetrics(lambda: operators.snapshots())  # noqa: PLW0108
    limits = limits or ServiceLimits()
    state = StateDirectory(state_dir, metrics) if state_dir is not None else None
    operators = OperatorRegistry(metrics, limits, state, checkpoint_interval_s)
    long_polls = LongPolls(limits.max_long_polls)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        operators.start()
        yield
        await run_in_threadpool(operators.shutdown)

    app = FastAPI(
        title="STRETCH sidecar",
        version=__version__,
        summary="Stateful stream operators with VSN parallelism and elastic reconfiguration",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    _serve_docs(app)
    app.state.token = token.encode() if token else None
    app.state.metrics = metrics
    app.state.operators = operators
    app.state.long_polls = long_polls
    app.state.staging = StagingStore()
    install_error_handlers(app)
    app.state.body_limits = body_limits or BodyLimits()
    app.add_middleware(RequestGuard, limits=app.state.body_limits)
    guarded = [Depends(require_token)] if token else []
    app.include_router(lifecycle.router, dependencies=guarded)
    app.include_router(streams.router, dependencies=guarded)
    app.include_router(staging.router, dependencies=guarded)
    app.include_router(autoscale.router, dependencies=guarded)

    @app.get("/healthz", tags=["probes"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["probes"], responses={503: {"description": "cannot serve now"}})
    async def readyz() -> JSONResponse:
        """Readiness: the app can take requests now; counts its operators.

        503 while every worker thread is busy, the long-poll limit is reached, or kept
        operators are still being restored; ``state`` says where operators are kept.
        """
        threads = anyio.to_thread.current_default_thread_limiter()
        problems = []
        if threads.borrowed_tokens >= threads.total_tokens:
            problems.append(f"all {int(threads.total_tokens)} worker threads are busy")
        if long_polls.full:
            problems.append(f"{long_polls.waiting} output reads wait, the limit")
        if restoring := operators.restoring:
            problems.append(f"{restoring} operator(s) are being restored from --state-dir")
        body: dict[str, object] = {"operators": len(operators.all()), **operators.describe()}
        if problems:
            return JSONResponse({**body, "status": "busy", "detail": "; ".join(problems)}, 503)
        return JSONResponse({**body, "status": "ready"})

    @app.get("/metrics", tags=["probes"], response_class=Response, dependencies=guarded)
    async def metrics_route() -> Response:
        """Prometheus text exposition of the app's registry."""
        body = await run_in_threadpool(metrics.exposition)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return app


DOCS_ASSETS = "/docs/assets"


def _serve_docs(app: FastAPI) -> None:
    """``/docs``: Swagger UI from the assets of ``swagger-ui-bundle``, so no CDN is needed."""
    app.mount(DOCS_ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} - docs",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
        )
