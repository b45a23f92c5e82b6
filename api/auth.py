"""Bearer-token authentication of every ``/v1`` route and ``/metrics``.

When the app has a token, a request to ``/v1/...`` or ``/metrics`` must carry
``Authorization: Bearer <token>``; ``/healthz`` and ``/readyz`` stay open for probes. The
comparison is constant-time (``hmac.compare_digest``) and the token is never logged or
echoed. The dependency is a FastAPI security scheme, so the OpenAPI schema marks the
routes that need it. Without a token no route asks for one (a sidecar bound to
loopback; ``stretch serve`` refuses another host unless told ``--insecure``).
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import HTTPException, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

__all__ = ["BEARER", "require_token"]

BEARER = HTTPBearer(
    auto_error=False,
    description="the server's token (stretch serve --token-file, or $STRETCH_TOKEN)",
)


def require_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)],
) -> None:
    """A FastAPI dependency: reject the request with 401 unless its bearer token matches.

    Raises:
        HTTPException: 401 with ``WWW-Authenticate: Bearer`` when the token is missing or
            wrong.

    """
    expected: bytes | None = request.app.state.token
    if expected is None:
        return
    given = credentials.credentials.strip() if credentials is not None else ""
    if not hmac.compare_digest(given.encode(), expected):
        route = getattr(request.scope.get("route"), "path", "unmatched")
        request.app.state.metrics.rejected(route, 401)
        raise HTTPException(
            status_code=401,
            detail="missing or wrong bearer token",
            headers={"WWW-Authenticate": "Bearer"},
        )
