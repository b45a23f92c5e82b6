"""One exception handler: ``StretchError`` subclasses become 4xx answers with a detail.

Bad input never yields a 500: every error the runtime raises on purpose maps to a status
below, and request validation errors are flattened to ``{"detail": "..."}`` naming the
field (422), except a JSON body that is malformed or missing, which is 400 as for batches
(the message gives the position of the error). Only an operator whose instance failed
answers 500 (a server fault, not the request's).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from stretch.errors import (
    CapacityError,
    ClosedError,
    DamagedStateError,
    InputError,
    LateTupleError,
    OperatorError,
    ReconfigurationError,
    SchemaError,
    StoppedError,
    StretchError,
)

__all__ = [
    "ConflictError",
    "LimitError",
    "NotFoundError",
    "TooLargeError",
    "UnavailableError",
    "UnsupportedMediaError",
    "install_error_handlers",
    "status_of",
]

logger = logging.getLogger(__name__)

RETRY_AFTER_S = 1
"""The ``Retry-After`` (seconds) of a 429: a hint, clients may retry sooner with backoff."""


class NotFoundError(StretchError):
    """An unknown operator instance or source index (404)."""


class ConflictError(StretchError):
    """A request that clashes with the service's state, e.g. a duplicate name (409)."""


class TooLargeError(InputError):
    """A batch larger than the whole ingest buffer: it can never fit, split it (413)."""


class UnavailableError(StretchError):
    """The operator cannot serve now: it is being restored, or its state is damaged."""


class LimitError(StretchError):
    """A request that would pass one of the service's limits on what it runs (507)."""


class UnsupportedMediaError(InputError):
    """A body in a content type the route does not read (415)."""


# Most specific first: the first class an error is an instance of decides its status.
_STATUS: Sequence[tuple[type[StretchError], int]] = (
    (NotFoundError, 404),
    (ConflictError, 409),
    (ClosedError, 409),
    (StoppedError, 409),
    (TooLargeError, 413),
    (UnsupportedMediaError, 415),
    (CapacityError, 429),
    (LimitError, 507),
    (UnavailableError, 503),
    (DamagedStateError, 503),
    (SchemaError, 422),
    (LateTupleError, 422),
    (OperatorError, 422),
    (ReconfigurationError, 422),
    (InputError, 400),
)


def status_of(exc: StretchError) -> int:
    """The HTTP status a runtime error answers with (500 only for a failed operator)."""
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    return 500


async def _stretch_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StretchError)
    status = status_of(exc)
    headers = {"Retry-After": str(RETRY_AFTER_S)} if status == 429 else None
    if status >= 500:
        logger.error("%s %s failed: %s", request.method, request.url.path, exc)
    _count_rejected(request, status)
    return JSONResponse({"detail": _printable(str(exc))}, status_code=status, headers=headers)


def _printable(text: str) -> str:
    """``text`` encodable as UTF-8: an unpaired surrogate from the input is escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _count_rejected(request: Request, status: int) -> None:
    """Count a rejected request by its route template (bounded label values)."""
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        route = getattr(request.scope.get("route"), "path", "unmatched")
        metrics.rejected(route, status)


def _describe(errors: Sequence[Any]) -> str:
    parts = []
    for error in errors:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def _malformed_body(request: Request, errors: Sequence[Any]) -> str | None:
    """What is wrong with a body that is not JSON or is missing (400), else None."""
    route = f"{request.method} {request.url.path}"
    for error in errors:
        loc = tuple(error.get("loc", ()))
        if error.get("type") == "json_invalid":
            position = loc[1] if len(loc) > 1 else "?"
            reason = error.get("ctx", {}).get("error", "JSON decode error")
            return f"{route}: the body is not valid JSON: {reason} at position {position}"
        if error.get("type") == "missing" and loc == ("body",):
            return f"{route}: the body is empty; send a JSON object"
    return None


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    malformed = _malformed_body(request, errors)
    status = 422 if malformed is None else 400
    _count_rejected(request, status)
    detail = _describe(errors) if malformed is None else malformed
    return JSONResponse({"detail": _printable(detail)}, status_code=status)


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers that turn runtime and validation errors into 4xx answers."""
    app.add_exception_handler(StretchError, _stretch_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
