"""Sidecars for local jobs: one in this process, or several as processes of their own.

``stretch pipeline`` without ``--url``, the demo, the tests and the benchmark run the
service beside their Spark session with ``EmbeddedSidecar``: uvicorn serving
``api.create_app`` on ``127.0.0.1`` at a free port, stopped on exit. ``stretch pipeline
--sidecars N`` starts ``LocalSidecars``: N ``stretch serve`` processes on loopback, each
with its own port and state directory, the shards of the job's operator.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType

import uvicorn

from stretch.api.main import create_app
from stretch.client import ready
from stretch.errors import StretchError

__all__ = ["EmbeddedSidecar", "LocalSidecars"]

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


class LocalSidecars:
    """``count`` ``stretch serve`` processes on loopback, each its own port and state.

    Each runs with ``--parent-pid`` of this process: if this process dies without
    stopping them (kill -9), each shuts down within about a second, as on SIGTERM, and
    frees its state directory for a rerun.

    Args:
        count: How many.
        root: Their state directories are ``root/0``, ``root/1``, ... (kept across runs:
            a rerun restores each shard's operators).
        token_file: The bearer token file each serves with, if any.

    Attributes:
        url: Their URLs separated by commas, in shard order, once started.

    """

    def __init__(self, count: int, root: Path, token_file: str | None = None) -> None:
        self.count = count
        self.root = root
        self.token_file = token_file
        self.url = ""
        self._processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> str:
        """Start the processes and wait until each is ready (restored); return the URLs.

        Raises:
            StretchError: one exited or was not ready within ``RESTORE_TIMEOUT_S``; its
                log file is named.

        """
        urls = []
        for index in range(self.count):
            state = self.root / str(index)
            state.mkdir(parents=True, exist_ok=True)
            port = _free_port()
            command = [sys.executable, "-m", "stretch.cli", "serve", "--host", "127.0.0.1"]
            command += ["--port", str(port), "--state-dir", str(state)]
            command += ["--parent-pid", str(os.getpid())]  # they end when this process does
            if self.token_file:
                command += ["--token-file", self.token_file]
            with (self.root / f"{index}.log").open("ab") as log:
                self._processes.append(
                    subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)  # noqa: S603
                )
            urls.append(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + RESTORE_TIMEOUT_S
        for index, (url, process) in enumerate(zip(urls, self._processes, strict=True)):
            while not ready(url):
                if process.poll() is not None or time.monotonic() > deadline:
                    msg = f"sidecar {index} did not start; see {self.root / f'{index}.log'}"
                    raise StretchError(msg)
                time.sleep(0.05)
        self.url = ",".join(urls)
        return self.url

    def terminate(self) -> None:
        """SIGTERM every process, without waiting (from a signal handler)."""
        for process in self._processes:
            process.terminate()

    def stop(self) -> None:
        """SIGTERM every process and wait for it (SIGKILL after ``STOP_TIMEOUT_S``)."""
        for process in self._processes:
            process.terminate()
        for process in self._processes:
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_TIMEOUT_S)
        self._processes.clear()

    def __enter__(self) -> LocalSidecars:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
