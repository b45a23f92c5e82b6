"""``stretch serve --parent-pid``: a server started by a job does not outlive it.

A parent killed with SIGKILL cannot stop its children; a server given its pid notices
within a second that its parent is gone and shuts down as on SIGTERM, freeing its state
directory for the next run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from stretch.cli import main
from stretch.client import ready

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 60.0

PARENT = textwrap.dedent(
    """
    import os, subprocess, sys
    port, state, log = sys.argv[1:]
    with open(log, "wb") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "stretch.cli", "serve", "--port", port, "--state-dir",
             state, "--parent-pid", str(os.getpid())],
            stdout=out, stderr=subprocess.STDOUT,
        )
    print(child.pid, flush=True)
    sys.stdin.read()  # until killed
    """
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie waiting for its reaper counts)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def lock_is_free(state: Path) -> bool:
    """Whether the state directory's lock can be taken (and is, briefly)."""
    with (state / "lock").open("a") as file:
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(file.fileno(), fcntl.LOCK_UN)
        return True


def wait_until(condition: object, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_server_whose_parent_is_killed_shuts_down_and_frees_its_state(tmp_path: Path) -> None:
    port, state, log = free_port(), tmp_path / "state", tmp_path / "serve.log"
    with subprocess.Popen(  # noqa: S603 - our own script, fixed arguments
        [sys.executable, "-c", PARENT, str(port), str(state), str(log)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as parent:
        try:
            assert parent.stdout is not None
            child = int(parent.stdout.readline())
            wait_until(lambda: ready(f"http://127.0.0.1:{port}"), "the server did not start")
            assert not lock_is_free(state)
            parent.kill()  # SIGKILL: the parent stops nothing
            parent.wait(DEADLINE_S)
            wait_until(lambda: gone(child), f"the server (process {child}) outlived its parent")
            assert lock_is_free(state)
            text = log.read_text()
            assert f"parent process {parent.pid} exited: shutting down" in text, text
            assert "Traceback" not in text
        finally:
            with contextlib.suppress(ProcessLookupError):  # what is left, if the test failed
                os.killpg(parent.pid, signal.SIGKILL)


def test_a_pid_that_is_not_the_parent_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--state-dir", str(tmp_path), "--parent-pid", str(os.getpid())]) == 2
    err = capsys.readouterr().err
    assert f"--parent-pid {os.getpid()} is not this server's parent (process " in err
    assert err.count("\n") == 1
    assert not (tmp_path / "operators").exists()  # refused before it touched the directory
