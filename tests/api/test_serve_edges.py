"""A real ``stretch serve`` process at its edges (issue 23): signals, hang-ups, slow clients.

Each test drives the process over raw sockets or httpx, as a client on the network would.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import TIMEOUT_S, auth
from tests.api.sidecar import Sidecar

LONG_WAIT_MS = 60_000
"""A long-poll's wait: every test here must finish its point well before it ends."""

FORWARD = {"name": "f", "operator": "forward", "params": {"columns": "v:int", "inputs": 1}}


def _serve(tmp_path: Path, *options: str) -> Iterator[Sidecar]:
    sidecar = Sidecar(None, tmp_path, options=options)
    sidecar.start()
    try:
        created = httpx.post(f"{sidecar.url}/v1/operators", json=FORWARD, headers=auth())
        assert created.status_code == 201, created.text
        yield sidecar
    finally:
        sidecar.stop()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Sidecar]:
    """A sidecar with three long-poll places and short read deadlines, and operator 'f'."""
    yield from _serve(
        tmp_path, "--max-long-polls", "3", "--header-timeout-s", "2", "--body-timeout-s", "2"
    )


def _long_poll(port: int) -> socket.socket:
    """A raw connection whose output read waits (its headers sent, nothing read yet)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
    sock.sendall(
        f"GET /v1/operators/f/output?wait_ms={LONG_WAIT_MS} HTTP/1.1\r\nHost: t\r\n"
        f"Authorization: {auth()['Authorization']}\r\n\r\n".encode()
    )
    return sock


def _readyz(url: str) -> httpx.Response:
    return httpx.get(f"{url}/readyz", timeout=TIMEOUT_S)


def _until(condition: object, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.05)


def test_hung_up_long_polls_free_their_places_at_once(served: Sidecar) -> None:
    polls = [_long_poll(served.port) for _ in range(3)]
    _until(lambda: _readyz(served.url).status_code == 503, "3 long-polls wait", TIMEOUT_S)
    assert "3 output reads wait" in _readyz(served.url).json()["detail"]
    for sock in polls:
        sock.close()
    # Freed long before their 60 s wait would end (before, /readyz stayed 503 that long).
    _until(lambda: _readyz(served.url).status_code == 200, "places freed", LONG_WAIT_MS / 3e3)
    waited = httpx.get(
        f"{served.url}/v1/operators/f/output", params={"wait_ms": 50}, headers=auth()
    )
    assert waited.status_code == 200 and waited.json() == {"rows": [], "next_offset": 0}


def test_sigterm_answers_waiting_long_polls_and_exits_0(served: Sidecar) -> None:
    answers: list[httpx.Response] = []

    def read() -> None:
        answers.append(
            httpx.get(
                f"{served.url}/v1/operators/f/output",
                params={"wait_ms": LONG_WAIT_MS},
                headers=auth(),
                timeout=TIMEOUT_S + LONG_WAIT_MS / 1e3,
            )
        )

    readers = [threading.Thread(target=read) for _ in range(3)]
    for reader in readers:
        reader.start()
    _until(lambda: _readyz(served.url).status_code == 503, "3 long-polls wait", TIMEOUT_S)
    process = served.process
    assert process is not None
    process.send_signal(signal.SIGTERM)
    # Well before the long-polls' own end: they are answered, not waited for.
    assert process.wait(LONG_WAIT_MS / 3e3) == 0, served.log()
    served.process = None
    for reader in readers:
        reader.join(TIMEOUT_S)
    assert len(answers) == 3
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert "shutting down" in answer.json()["detail"]
    log = served.log()
    assert "SIGTERM: shutting down" in log
    assert "timeout graceful shutdown exceeded" not in log, log


SLOW_CLIENTS = 25
BYTE_EVERY_S = 0.5
"""A slow client's pace: faster than any idle timeout, so only a deadline stops it."""


def _slow_client(port: int, head: bytes, trickle: bytes, answers: list[bytes]) -> None:
    """Send ``head`` at once, then ``trickle`` a byte at a time; keep what comes back."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        sock.sendall(head)
        sock.settimeout(BYTE_EVERY_S)
        got = b""
        for byte in trickle:
            try:
                sock.sendall(bytes([byte]))
                chunk = sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                break
            if not chunk:
                break
            got += chunk
        answers.append(got)


@pytest.mark.parametrize("part", ["headers", "body"])
def test_slow_clients_are_cut_off_at_their_deadline(served: Sidecar, part: str) -> None:
    """25 clients sending a byte every 0.5 s get 408 and lose their connection.

    Each would need 40 s for its 80 bytes; the deadline is 2 s (--header-timeout-s,
    --body-timeout-s), and the service answers others meanwhile.
    """
    if part == "headers":
        head, trickle = b"", b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"a" * 40
    else:
        head = (
            b"POST /v1/operators HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Content-Length: 80\r\n" + f"Authorization: {auth()['Authorization']}\r\n\r\n".encode()
        )
        trickle = b"{" + b" " * 79
    answers: list[bytes] = []
    clients = [
        threading.Thread(target=_slow_client, args=(served.port, head, trickle, answers))
        for _ in range(SLOW_CLIENTS)
    ]
    for client in clients:
        client.start()
    assert httpx.get(f"{served.url}/healthz", timeout=TIMEOUT_S).status_code == 200
    for client in clients:
        client.join(TIMEOUT_S)
    assert len(answers) == SLOW_CLIENTS
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert b"connection: close" in answer.lower()
        assert b"timeout-s" in answer
    assert httpx.get(f"{served.url}/healthz", timeout=TIMEOUT_S).status_code == 200


def test_timeouts_must_be_positive(tmp_path: Path) -> None:
    sidecar = Sidecar(None, tmp_path, options=("--body-timeout-s", "0"))
    with pytest.raises(AssertionError, match="--body-timeout-s must be > 0"):
        sidecar.start()
    assert sidecar.process is not None and sidecar.process.wait(TIMEOUT_S) == 2
    sidecar.process = None


def test_a_batch_does_not_make_the_sidecar_import_pandas(served: Sidecar) -> None:
    """pyarrow's first pandas probe would import it (about 0.3 s on the first batch after
    each start): the sidecar settles that probe without it (``cli._skip_pandas_probe``)."""
    url = f"{served.url}/v1/operators/f"
    rows = {"rows": [{"ts": 1, "v": 2}]}
    sent = httpx.post(f"{url}/sources/0/batches", json=rows, headers=auth())
    assert sent.status_code == 202, sent.text
    assert httpx.post(f"{url}/sources/0/close", headers=auth()).status_code == 202
    read = httpx.get(f"{url}/output", params={"wait_ms": 10_000}, headers=auth())
    assert read.status_code == 200 and read.json()["rows"] == [{"ts": 1, "v": 2}], read.text
    assert served.process is not None
    mapped = Path(f"/proc/{served.process.pid}/maps").read_text()
    assert "/pandas/" not in mapped
