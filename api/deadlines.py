"""The request headers' deadline: a connection that does not send them in time is closed.

uvicorn waits for a request's headers as long as bytes keep trickling in (its keep-alive
timer stops at the first byte), so a client sending one byte every few seconds holds a
connection forever, and enough of them exhaust the server (slowloris). The deadline sits
where the headers are read, in the HTTP protocol: ``header_deadline_protocol`` gives
uvicorn's h11 protocol a timer that runs while a connection waits for a request's headers
(from the connection's start, or from the first byte after the previous response) and,
when it expires, answers ``408`` (JSON, ``Connection: close``) and closes the connection.
The body's deadline is the ASGI layer's (``api.guard.BodyLimits.body_timeout_s``), since
routes read bodies there.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["DEFAULT_HEADER_TIMEOUT_S", "header_deadline_protocol"]

logger = logging.getLogger(__name__)

DEFAULT_HEADER_TIMEOUT_S = 10.0
"""How long a connection may take to send a request's headers (``--header-timeout-s``)."""


def _timeout_response(header_s: float) -> bytes:
    body = json.dumps(
        {
            "detail": f"the request headers did not arrive within {header_s:g} s "
            "(--header-timeout-s); the connection is closed"
        }
    ).encode()
    head = (
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


def header_deadline_protocol(header_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a deadline of ``header_s`` on each request's headers.

    Pass it as ``uvicorn.Config(http=...)``.

    Raises:
        ValueError: ``header_s`` is not positive.

    """
    if not header_s > 0:
        msg = f"the header timeout must be > 0 s, got {header_s}"
        raise ValueError(msg)
    response = _timeout_response(header_s)

    class HeaderDeadlineProtocol(H11Protocol):
        """h11 with a timer on the headers of every request of a connection."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if not self._awaiting_headers():
                self._disarm()
            elif self._header_timer is None:
                self._arm()  # the first byte of the next request on a kept-alive connection

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _awaiting_headers(self) -> bool:
            """No request is running: what arrives belongs to the next one's headers."""
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            self._header_timer = self.loop.call_later(header_s, self._expired)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _expired(self) -> None:
            self._header_timer = None
            if self.transport.is_closing() or not self._awaiting_headers():
                return
            logger.info(
                "closed the connection of %s: no complete request headers within %g s",
                f"{self.client[0]}:{self.client[1]}" if self.client else "a client",
                header_s,
            )
            self.transport.write(response)
            self.transport.close()

    return HeaderDeadlineProtocol
