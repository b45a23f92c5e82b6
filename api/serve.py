"""Run the service with uvicorn: ``stretch serve`` calls ``serve``.

The bearer token comes from ``--token-file`` (first line, stripped) or the environment
variable ``STRETCH_TOKEN``; it is never logged. Without either, the service runs open:
it warns at start, and refuses a host other than loopback unless told ``insecure``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import uvicorn

from stretch.api.deadlines import DEFAULT_HEADER_TIMEOUT_S, header_deadline_protocol
from stretch.api.guard import BodyLimits
from stretch.api.limits import ServiceLimits
from stretch.api.main import create_app
from stretch.api.registry import DEFAULT_CHECKPOINT_INTERVAL_S

__all__ = [
    "MAX_CHECKPOINT_INTERVAL_S",
    "PARENT_CHECK_INTERVAL_S",
    "TOKEN_ENV",
    "StretchServer",
    "check_exposure",
    "check_options",
    "check_parent",
    "is_loopback",
    "read_token",
    "serve",
]

logger = logging.getLogger(__name__)

TOKEN_ENV = "STRETCH_TOKEN"


def read_token(token_file: str | None = None) -> str | None:
    """The configured token: the first line of ``token_file``, else ``$STRETCH_TOKEN``.

    Raises:
        OSError: ``token_file`` cannot be read.
        ValueError: ``token_file`` is empty.

    """
    if token_file is not None:
        try:
            lines = Path(token_file).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            msg = f"token file {token_file} cannot be read: {exc.strerror or exc}"
            raise OSError(msg) from None
        token = lines[0].strip() if lines else ""
        if not token:
            msg = f"token file {token_file} is empty"
            raise ValueError(msg)
        return token
    return os.environ.get(TOKEN_ENV) or None


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None, insecure: bool) -> None:
    """Refuse to serve without a token on a host other machines reach, unless ``insecure``.

    Raises:
        ValueError: ``host`` is not loopback, there is no token and not ``insecure``.

    """
    if token is not None:
        return
    if not is_loopback(host) and not insecure:
        msg = (
            f"refusing to serve on {host} without a token: anyone who reaches it could read "
            f"and change every operator; set --token-file or ${TOKEN_ENV}, bind 127.0.0.1, "
            "or pass --insecure"
        )
        raise ValueError(msg)
    logger.warning(
        "no token configured: every route on %s is open to whoever reaches it "
        "(set --token-file or $%s)",
        host,
        TOKEN_ENV,
    )


MAX_CHECKPOINT_INTERVAL_S = 86_400.0
"""The longest ``--checkpoint-interval-s`` (a day): the journal grows until a checkpoint."""


def check_options(port: int, state_dir: str | Path | None, checkpoint_interval_s: float) -> None:
    """Refuse options out of range before anything starts, naming the flag and the range.

    Raises:
        ValueError: ``port`` outside 1..65535, an empty ``state_dir`` (it would keep state
            in memory only), or ``checkpoint_interval_s`` not in
            ``(0, MAX_CHECKPOINT_INTERVAL_S]`` (NaN and infinity included).

    """
    if not 1 <= port <= 65535:
        msg = f"--port must be in 1..65535, got {port}"
        raise ValueError(msg)
    if state_dir is not None and not str(state_dir).strip():
        msg = "--state-dir must name a directory, got ''"
        raise ValueError(msg)
    if not 0 < checkpoint_interval_s <= MAX_CHECKPOINT_INTERVAL_S:
        msg = (
            f"--checkpoint-interval-s must be in (0, {MAX_CHECKPOINT_INTERVAL_S:g}] seconds, "
            f"got {checkpoint_interval_s}"
        )
        raise ValueError(msg)


PARENT_CHECK_INTERVAL_S = 0.5
"""How often ``--parent-pid`` looks whether the parent is gone: a server stops within ~1 s."""


def check_parent(parent_pid: int | None) -> None:
    """Refuse a ``--parent-pid`` that is not this process's parent.

    The watch compares the pid with this process's parent (``os.getppid``), which becomes
    the reaper (init, a subreaper) the moment the parent dies: a parent that is already
    gone, or a pid that never was the parent, would stop the server at once.

    Raises:
        ValueError: ``parent_pid`` is given and is not this process's parent.

    """
    if parent_pid is None:
        return
    actual = os.getppid()
    if parent_pid != actual:
        msg = (
            f"--parent-pid {parent_pid} is not this server's parent (process {actual}): give "
            "the pid of the process that starts 'stretch serve', or leave the option out"
        )
        raise ValueError(msg)


GRACEFUL_SHUTDOWN_S = 3
"""How long SIGTERM or Ctrl-C waits for requests in flight before cancelling them."""

DEFAULT_BODY_TIMEOUT_S = BodyLimits.body_timeout_s
"""How long a request body may take to arrive (``--body-timeout-s``)."""


class StretchServer(uvicorn.Server):
    """uvicorn's server that ends long-polls at shutdown and exits normally on a signal.

    uvicorn waits for requests in flight before it stops, and a long-poll may wait a
    minute: ``on_shutdown`` (the app's ``LongPolls.stop``) answers them 503 at once, so
    SIGTERM stops the service in well under a second. uvicorn re-raises the signal it
    caught once it has stopped (the process then dies of it, status 143); a service that
    shut down cleanly on request returns instead, and ``stretch serve`` exits 0.

    Args:
        config: uvicorn's configuration.
        on_shutdown: Called on the event loop when shutdown starts.

    """

    def __init__(self, config: uvicorn.Config, on_shutdown: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_shutdown = on_shutdown

    async def shutdown(self, sockets: list[object] | None = None) -> None:  # type: ignore[override]
        """End the long-polls, then uvicorn's graceful shutdown."""
        self._on_shutdown()
        await super().shutdown(sockets)  # type: ignore[arg-type]

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Handle SIGINT and SIGTERM as a request to stop; do not re-raise them after."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        before = {signum: signal.signal(signum, self._stop) for signum in handled}
        try:
            yield
        finally:
            for signum, handler in before.items():
                signal.signal(signum, handler)

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        logger.info("%s: shutting down", signal.Signals(signum).name)
        self.handle_exit(signum, frame)

    def watch_parent(self, parent_pid: int) -> Callable[[], None]:
        """Shut down, as SIGTERM does, once the parent process ``parent_pid`` has exited.

        A daemon thread compares ``os.getppid()`` with ``parent_pid`` every
        ``PARENT_CHECK_INTERVAL_S``: when the parent dies, even of kill -9, this process
        is handed to a reaper at once and its parent pid changes, so a recycled pid is
        never mistaken for the parent. Linux's ``PR_SET_PDEATHSIG`` was not used: it is
        Linux only; set between fork and exec it needs ``preexec_fn``, which is unsafe in
        a parent running threads (a Spark driver runs dozens); and wherever it is set it
        fires when the parent's *thread* that started the child ends, not the process.
        The thread parks on an event between looks.

        Returns:
            A function that ends the watch (call it once the server has stopped).

        """
        done = threading.Event()

        def watch() -> None:
            while not done.wait(PARENT_CHECK_INTERVAL_S):
                if os.getppid() != parent_pid:
                    logger.info("parent process %d exited: shutting down", parent_pid)
                    self.should_exit = True  # what SIGTERM's handler sets
                    return

        thread = threading.Thread(target=watch, name="stretch-parent-watch", daemon=True)
        thread.start()

        def stop() -> None:
            done.set()
            thread.join(PARENT_CHECK_INTERVAL_S)

        return stop


def listen_socket(host: str, port: int, url: str) -> socket.socket:
    """The server's socket, bound to ``host``:``port`` before anything says it serves there.

    Bound as uvicorn binds (``SO_REUSEADDR``, IPv6 for a host with a colon), so that a
    port in use or an address the machine lacks is one error line, not a server that
    logs its URL and then fails.

    Raises:
        OSError: The address cannot be bound (``url`` and the reason named).

    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        msg = f"cannot listen on {url}: {reason} (--host {host} --port {port})"
        raise OSError(msg) from None
    sock.set_inheritable(True)
    return sock


def serve(
    host: str = "127.0.0.1",
    port: int = 8321,
    token_file: str | None = None,
    insecure: bool = False,
    access_log: bool = False,
    limits: ServiceLimits | None = None,
    state_dir: str | Path | None = None,
    checkpoint_interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S,
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    parent_pid: int | None = None,
) -> None:
    """Serve the app on ``host:port`` until interrupted (SIGINT or SIGTERM).

    Logs one line with its URL, its authentication mode and where its docs are. On a
    signal it stops taking connections, answers waiting long-polls 503, gives requests in
    flight ``GRACEFUL_SHUTDOWN_S`` seconds, cancels the rest, stops every operator and
    returns. With ``parent_pid`` it does the same once that process, its parent, has
    exited (``StretchServer.watch_parent``): sidecars a job started end about a second
    after it, kill -9 included.

    Args:
        host: The address to bind (loopback by default).
        port: The TCP port.
        token_file: A file holding the bearer token (else ``$STRETCH_TOKEN``, else none).
        insecure: Serve without a token on a non-loopback host.
        access_log: Log one line per request.
        limits: What the service holds at most (defaults of ``ServiceLimits``).
        state_dir: Keep operators durably here (None: in memory only); the service
            holds it alone while it runs.
        checkpoint_interval_s: How often each changed operator is checkpointed, in
            ``(0, MAX_CHECKPOINT_INTERVAL_S]``.
        header_timeout_s: How long a connection may take to send a request's headers
            (else 408 and the connection is closed).
        body_timeout_s: How long a request body may take to arrive after its headers
            (else 408 and the connection is closed).
        parent_pid: Stop once this process, the server's parent, has exited (None: run
            on whatever becomes of the parent).

    Raises:
        ValueError: No token on a non-loopback host without ``insecure``, an empty token
            file, a timeout that is not positive, a port or checkpoint interval out of
            range, an empty ``state_dir``, or a ``parent_pid`` that is not the parent.
        StretchError: ``state_dir`` cannot be written, or another server holds it.
        OSError: The address cannot be bound (a port in use, say).

    """
    check_options(port, state_dir, checkpoint_interval_s)
    check_parent(parent_pid)
    for flag, timeout_s in (
        ("--header-timeout-s", header_timeout_s),
        ("--body-timeout-s", body_timeout_s),
    ):
        if not timeout_s > 0:
            msg = f"{flag} must be > 0, got {timeout_s}"
            raise ValueError(msg)
    protocol = header_deadline_protocol(header_timeout_s)
    token = read_token(token_file)
    check_exposure(host, token, insecure)
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    listening = listen_socket(host, port, url)
    try:
        app = create_app(
            token,
            limits,
            BodyLimits(body_timeout_s=body_timeout_s),
            state_dir=None if state_dir is None else Path(state_dir),
            checkpoint_interval_s=checkpoint_interval_s,
        )
    except BaseException:
        listening.close()
        raise
    logger.info(
        "stretch serve on %s (auth: %s; state: %s); docs at %s/docs",
        url,
        "bearer token on /v1 and /metrics" if token else "none, every route open",
        f"durable in {state_dir}, checkpoints every {checkpoint_interval_s:g} s"
        if state_dir is not None
        else "in memory only, lost on restart (--state-dir keeps it)",
        url,
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol,
        log_level="info",
        access_log=access_log,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    server = StretchServer(config, app.state.long_polls.stop)
    end_watch = None if parent_pid is None else server.watch_parent(parent_pid)
    try:
        server.run(sockets=[listening])
    finally:
        listening.close()
        if end_watch is not None:
            end_watch()
