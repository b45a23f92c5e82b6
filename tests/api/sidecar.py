"""A ``stretch serve`` process (``--state-dir`` unless None) that tests signal, kill and restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from stretch.client import ready
from tests.api.conftest import TOKEN, free_port

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0


class Sidecar:
    """One sidecar process at a time on a fixed port, over one state directory.

    Args:
        state_dir: The ``--state-dir`` (None: in memory).
        log_dir: Where each run's output goes (``run-<k>.log``).
        checkpoint_interval_s: ``--checkpoint-interval-s``.
        operators: Modules for ``--operators`` (custom operators).
        options: More options of ``stretch serve``.

    """

    def __init__(
        self,
        state_dir: Path | None,
        log_dir: Path,
        checkpoint_interval_s: float = 10.0,
        operators: tuple[str, ...] = (),
        options: tuple[str, ...] = (),
    ) -> None:
        self.state_dir = state_dir
        self.log_dir = log_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.checkpoint_interval_s = checkpoint_interval_s
        self.operators = operators
        self.options = options
        self.process: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self.start_s: list[float] = []  # process start -> /readyz 200, per run

    def start(self) -> None:
        """Start the process and wait until ``/readyz`` answers 200 (restore done)."""
        token_file = self.log_dir / "token"
        token_file.write_text(TOKEN)
        command = [
            sys.executable,
            "-m",
            "stretch.cli",
            "serve",
            "--port",
            str(self.port),
            "--token-file",
            str(token_file),
            "--checkpoint-interval-s",
            str(self.checkpoint_interval_s),
            *self.options,
        ]
        if self.state_dir is not None:
            command += ["--state-dir", str(self.state_dir)]
        for module in self.operators:
            command += ["--operators", module]
        self.runs += 1
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        started = time.monotonic()
        with (self.log_dir / f"run-{self.runs}.log").open("wb") as log:
            self.process = subprocess.Popen(  # noqa: S603 - our own CLI
                command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env
            )
        deadline = started + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log()
            if ready(self.url):
                self.start_s.append(time.monotonic() - started)
                return
            time.sleep(0.05)
        msg = f"the sidecar did not get ready in {START_TIMEOUT_S} s:\n{self.log()}"
        raise AssertionError(msg)

    def kill(self) -> None:
        """SIGKILL the process (nothing is flushed or closed) and reap it."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(START_TIMEOUT_S)
        self.process = None

    def stop(self) -> None:
        """SIGTERM the process, if it runs, and wait for it."""
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(START_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(START_TIMEOUT_S)
            self.process = None

    def log(self) -> str:
        """The latest run's output."""
        return (self.log_dir / f"run-{self.runs}.log").read_text(errors="replace")

    def state_bytes(self) -> int:
        """Bytes of every file under the state directory."""
        assert self.state_dir is not None
        return sum(p.stat().st_size for p in self.state_dir.rglob("*") if p.is_file())
