"""What a mutating request may carry, checked before any route reads its body.

A ``POST``, ``PUT`` or ``DELETE`` under ``/v1`` may carry only the content types its route
documents: JSON everywhere, and an Arrow IPC stream for batches. A body without a
``Content-Type`` is refused too. A browser's cross-site "simple" request (a form post,
``text/plain``, a typeless blob) therefore never reaches a route: it gets 415 and changes
nothing.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["ARROW_STREAM", "JSON", "RequestGuard", "media_type"]

ARROW_STREAM = "application/vnd.apache.arrow.stream"
JSON = "application/json"
_MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_BATCH_SUFFIX = "/batches"


def media_type(content_type: str) -> str:
    """The media type of a ``Content-Type`` value, without parameters, in lower case."""
    return content_type.split(";", maxsplit=1)[0].strip().lower()


def _has_body(headers: Headers) -> bool:
    length = headers.get("content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    return "transfer-encoding" in headers


class RequestGuard:
    """ASGI middleware: refuse (415) a mutating ``/v1`` request in an undocumented type.

    Args:
        app: The app it guards.

    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 415 for a refused request, else pass it on unchanged."""
        if (
            scope["type"] != "http"
            or scope["method"] not in _MUTATING
            or not scope["path"].startswith("/v1/")
        ):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        media = media_type(headers.get("content-type", ""))
        allowed = (JSON, ARROW_STREAM) if scope["path"].endswith(_BATCH_SUFFIX) else (JSON,)
        if media in allowed or (not media and not _has_body(headers)):
            await self.app(scope, receive, send)
            return
        given = f"Content-Type {media!r}" if media else "a body without a Content-Type"
        detail = f"{scope['method']} {scope['path']} takes {' or '.join(allowed)}, not {given}"
        _count_rejected(scope, 415)
        await JSONResponse({"detail": detail}, status_code=415)(scope, receive, send)


def _count_rejected(scope: Scope, status: int) -> None:
    app = scope.get("app")
    metrics = getattr(getattr(app, "state", None), "metrics", None)
    if metrics is not None:
        metrics.rejected(_template(scope["path"], set(app.openapi()["paths"])), status)  # type: ignore[union-attr]


def _template(path: str, templates: set[str]) -> str:
    """The route template of ``path`` among ``templates`` (bounded metric labels)."""
    parts = path.split("/")
    for index, (before, placeholder) in {
        3: ("operators", "{name}"),
        5: ("sources", "{source}"),
    }.items():
        if len(parts) > index and parts[index - 1] == before:
            parts[index] = placeholder
    template = "/".join(parts)
    return template if template in templates else "unmatched"
