"""A sidecar in this process: the REST service on loopback, in a thread (for local jobs).

``stretch pipeline`` without ``--url``, the demo, the tests and the benchmark run the
service beside their Spark session with ``EmbeddedSidecar``: uvicorn serving
``api.create_app`` on ``127.0.0.1`` at a free port, stopped on exit.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import TracebackType

import uvicorn

from api.main import create_app
from stretch.errors import StretchError

__all__ = ["EmbeddedSidecar"]

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
RESTORE_TIMEOUT_S = 600.0


class EmbeddedSidecar:
    """The sidecar served by uvicorn in a daemon thread, on loopback.

    Args:
        token: The bearer token the service requires, if any.
        port: The TCP port (0: a free one).
        state_dir: Keep the operators durably here (``stretch serve --state-dir``); a
            sidecar started again on it restores them before ``start`` returns.

    Attributes:
        url: ``http://127.0.0.1:PORT`` once started.

    """

    def __init__(
        self, token: str | None = None, port: int = 0, state_dir: Path | None = None
    ) -> None:
        self.app = create_app(token, state_dir=state_dir)
        self._server = uvicorn.Server(
            uvicorn.Config(
                self.app,
                host="127.0.0.1",
                port=port,
                log_level="warning",
                lifespan="on",
                access_log=False,
            )
        )
        self._thread = threading.Thread(
            target=self._server.run, name="stretch-sidecar", daemon=True
        )
        self.url = ""

    def start(self) -> str:
        """Start serving and wait until its operators are restored; return the URL.

        Raises:
            StretchError: the server did not start within ``START_TIMEOUT_S``, or did not
                restore its operators within ``RESTORE_TIMEOUT_S``.

        """
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                msg = "the embedded sidecar did not start (is loopback available?)"
                raise StretchError(msg)
            time.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        registry = self.app.state.operators
        deadline = time.monotonic() + RESTORE_TIMEOUT_S
        while registry.restoring:
            if time.monotonic() > deadline:
                msg = f"the embedded sidecar did not restore its operators in {RESTORE_TIMEOUT_S} s"
                raise StretchError(msg)
            time.sleep(0.01)
        return self.url

    def stop(self) -> None:
        """Stop serving (its operators stop with the app) and join the thread."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(STOP_TIMEOUT_S)

    def __enter__(self) -> EmbeddedSidecar:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
