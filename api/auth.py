"""Bearer-token authentication of the mutating routes.

When the app has a token, a mutating request must carry ``Authorization: Bearer <token>``;
the comparison is constant-time (``hmac.compare_digest``) and the token is never logged or
echoed. Without a token every request is allowed (a sidecar bound to loopback).
"""

from __future__ import annotations

import hmac

from fastapi import HTTPException, Request

__all__ = ["require_token"]

_SCHEME = "bearer "


def require_token(request: Request) -> None:
    """A FastAPI dependency: reject the request with 401 unless its bearer token matches.

    Raises:
        HTTPException: 401 with ``WWW-Authenticate: Bearer`` when the token is missing or
            wrong.

    """
    expected: bytes | None = request.app.state.token
    if expected is None:
        return
    header = request.headers.get("authorization", "")
    given = header[len(_SCHEME) :].strip() if header.lower().startswith(_SCHEME) else ""
    if not hmac.compare_digest(given.encode(), expected):
        route = getattr(request.scope.get("route"), "path", "unmatched")
        request.app.state.metrics.rejected(route, 401)
        raise HTTPException(
            status_code=401,
            detail="missing or wrong bearer token",
            headers={"WWW-Authenticate": "Bearer"},
        )
