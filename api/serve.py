"""Run the service with uvicorn: ``stretch serve`` calls ``serve``.

The bearer token comes from ``--token-file`` (first line, stripped) or the environment
variable ``STRETCH_TOKEN``; it is never logged. Without either, the service runs open,
which is only sensible on loopback.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import uvicorn

from api.limits import ServiceLimits
from api.main import create_app

__all__ = ["TOKEN_ENV", "read_token", "serve"]

logger = logging.getLogger(__name__)

TOKEN_ENV = "STRETCH_TOKEN"


def read_token(token_file: str | None = None) -> str | None:
    """The configured token: the first line of ``token_file``, else ``$STRETCH_TOKEN``.

    Raises:
        OSError: ``token_file`` cannot be read.
        ValueError: ``token_file`` is empty.

    """
    if token_file is not None:
        lines = Path(token_file).read_text(encoding="utf-8").splitlines()
        token = lines[0].strip() if lines else ""
        if not token:
            msg = f"token file {token_file} is empty"
            raise ValueError(msg)
        return token
    return os.environ.get(TOKEN_ENV) or None


def serve(
    host: str = "127.0.0.1",
    port: int = 8321,
    token_file: str | None = None,
    limits: ServiceLimits | None = None,
) -> None:
    """Serve the app on ``host:port`` until interrupted.

    Args:
        host: The address to bind (loopback by default).
        port: The TCP port.
        token_file: A file holding the bearer token (else ``$STRETCH_TOKEN``, else none).
        limits: What the service holds at most (defaults of ``ServiceLimits``).

    """
    token = read_token(token_file)
    logger.info(
        "serving on %s:%d (%s)",
        host,
        port,
        "bearer token required" if token else "no authentication",
    )
    uvicorn.run(create_app(token, limits), host=host, port=port, log_level="info", access_log=False)
