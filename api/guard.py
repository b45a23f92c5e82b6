"""What a mutating request may carry, checked before any route reads its body.

A ``POST``, ``PUT`` or ``DELETE`` under ``/v1`` may carry only the content types its route
documents: JSON everywhere, and an Arrow IPC stream for rows (batches, and the staged
parts of a parallel writer's batch). A body without a
``Content-Type`` is refused too. A browser's cross-site "simple" request (a form post,
``text/plain``, a typeless blob) therefore never reaches a route: it gets 415 and changes
nothing.

Bodies are bounded (``BodyLimits``): a declared ``Content-Length`` above the route's limit
is refused (413) before a byte is read; a body without one (chunked) is read up to the
limit and refused as soon as it passes it. The decoded size of an Arrow stream has its own
limit, checked by ``api.codec`` from the stream's metadata before decoding. Bodies are
bounded in time too: one not complete within ``body_timeout_s`` of its headers gets 408
and its connection is closed (the headers' own deadline is ``api.deadlines``'). A JSON
body repeating a key in one object gets 422 naming the key (``api.json_body``).
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stretch.api.json_body import DuplicateKeyError, loads_unique

__all__ = ["ARROW_STREAM", "JSON", "BodyLimits", "RequestGuard", "media_type"]

ARROW_STREAM = "application/vnd.apache.arrow.stream"
JSON = "application/json"
_MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_BATCH_SUFFIX = "/batches"
_STAGED = "/staged/"
_MIB = 1 << 20


@dataclass(frozen=True)
class BodyLimits:
    """The largest request bodies the service reads, in bytes, and how long it waits for one.

    Attributes:
        arrow_batch_bytes: An Arrow IPC batch body, as sent (64 MiB).
        json_batch_bytes: A JSON batch body (16 MiB: parsed rows take several times more).
        request_bytes: Any other request body (1 MiB).
        decoded_batch_bytes: What an Arrow batch may decode to (256 MiB).
        body_timeout_s: How long a body may take to arrive, from the end of its
            request's headers (60 s; ``stretch serve --body-timeout-s``).

    """

    arrow_batch_bytes: int = 64 * _MIB
    json_batch_bytes: int = 16 * _MIB
    request_bytes: int = _MIB
    decoded_batch_bytes: int = 256 * _MIB
    body_timeout_s: float = 60.0

    def body_bytes(self, rows: bool, media: str) -> int:
        """The limit of a body of ``media`` type; ``rows``: a batch or a staged part."""
        if not rows:
            return self.request_bytes
        return self.arrow_batch_bytes if media == ARROW_STREAM else self.json_batch_bytes


def media_type(content_type: str) -> str:
    """The media type of a ``Content-Type`` value, without parameters, in lower case."""
    return content_type.split(";", maxsplit=1)[0].strip().lower()


class _TooLarge(Exception):
    """The body passed its limit while being read."""


class _Disconnected(Exception):
    """The client went away before its body was complete."""


class RequestGuard:
    """ASGI middleware: refuse a request's type (415), size (413), pace (408) or keys (422).

    Refused are an undocumented or missing content type on a mutating ``/v1`` route, a
    body above its limit, a body not complete within ``limits.body_timeout_s`` of the
    request's headers (a slow client holds no route; the connection is closed), and a
    JSON body (other than rows, which ``api.codec`` checks) giving a key twice in one
    object. The body is read here, whole, and replayed to the route.

    Args:
        app: The app it guards.
        limits: The body limits.

    """

    def __init__(self, app: ASGIApp, limits: BodyLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 415, 413, 408 or 422 for a refused request, else pass it on."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        media = media_type(headers.get("content-type", ""))
        method, path = scope["method"], scope["path"]
        declared = _declared_length(headers)
        chunked = declared is None and "transfer-encoding" in headers
        guarded = method in _MUTATING and path.startswith("/v1/")
        rows = guarded and (path.endswith(_BATCH_SUFFIX) or (method == "PUT" and _STAGED in path))
        if guarded:
            allowed = (JSON, ARROW_STREAM) if rows else (JSON,)
            if media not in allowed and (media or declared or chunked):
                given = f"Content-Type {media!r}" if media else "a body without a Content-Type"
                detail = f"{method} {path} takes {' or '.join(allowed)}, not {given}"
                await _refuse(scope, receive, send, 415, detail)
                return
        limit = self.limits.body_bytes(rows, media)
        too_large = f"{method} {path}: the body is larger than {limit} bytes"
        if declared is not None and declared > limit:
            await _refuse(scope, receive, send, 413, f"{too_large} ({declared}); split it")
            return
        if not (declared or chunked):
            await self.app(scope, receive, send)
            return
        deadline_s = self.limits.body_timeout_s
        try:
            with anyio.fail_after(deadline_s):
                body = await _read_body(receive, limit)
        except _Disconnected:
            return
        except _TooLarge:
            await _refuse(scope, receive, send, 413, f"{too_large}; split it")
            return
        except TimeoutError:
            detail = (
                f"{method} {path}: the body did not arrive within {deadline_s:g} s "
                "(--body-timeout-s); the connection is closed"
            )
            await _refuse(scope, receive, send, 408, detail, close=True)
            return
        if guarded and media == JSON and not rows and (key := _repeated_key(body)):
            detail = f"{method} {path}: key {key!r} is given twice in one object; give it once"
            await _refuse(scope, receive, send, 422, detail)
            return
        await self.app(scope, _replay(body, receive), send)


def _declared_length(headers: Headers) -> int | None:
    text = headers.get("content-length")
    if text is None or not text.strip().isdigit():
        return None
    return int(text)


async def _read_body(receive: Receive, limit: int) -> bytes:
    """Read a whole body of at most ``limit`` bytes.

    Raises:
        _TooLarge: the body passed ``limit`` (reading stopped there).
        _Disconnected: the client left first.

    """
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise _Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` first, then what ``receive`` gives (a disconnect)."""
    replay: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return replay.pop() if replay else await receive()

    return replayed


def _repeated_key(body: bytes) -> str | None:
    """The key a JSON body repeats within one object, if any (malformed JSON: None)."""
    try:
        loads_unique(body)
    except DuplicateKeyError as exc:
        return exc.key
    except (ValueError, RecursionError):
        return None  # the route reports malformed JSON itself
    return None


async def _refuse(
    scope: Scope, receive: Receive, send: Send, status: int, detail: str, *, close: bool = False
) -> None:
    _count_rejected(scope, status)
    headers = {"Connection": "close"} if close else None
    await JSONResponse({"detail": detail}, status_code=status, headers=headers)(
        scope, receive, send
    )


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
