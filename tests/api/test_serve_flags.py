"""``stretch serve`` refuses out-of-range flags, and an address it cannot bind, with status 2
and one line naming them."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from stretch.api.serve import serve
from stretch.cli import main


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--checkpoint-interval-s", "nan"], "--checkpoint-interval-s must be in (0, 86400]"),
        (["--checkpoint-interval-s", "inf"], "--checkpoint-interval-s must be in (0, 86400]"),
        (["--checkpoint-interval-s", "1e10"], "--checkpoint-interval-s must be in (0, 86400]"),
        (["--port", "70000"], "--port must be in 1..65535, got 70000"),
        (["--port", "-1"], "--port must be in 1..65535, got -1"),
        (["--max-operators", "0"], "--max-operators must be >= 1, got 0"),
        (["--max-long-polls", "-1"], "--max-long-polls must be >= 1, got -1"),
        (["--header-timeout-s", "-1"], "--header-timeout-s must be > 0, got -1.0"),
        (["--body-timeout-s", "0"], "--body-timeout-s must be > 0, got 0.0"),
        (["--token-file", "/nonexistent/t"], "token file /nonexistent/t cannot be read"),
    ],
)
def test_serve_refuses_flags_out_of_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    assert main(["serve", "--state-dir", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and "Traceback" not in err
    assert not (tmp_path / "operators").exists()  # refused before it touched the directory


def test_serve_refuses_an_empty_state_dir(capsys: pytest.CaptureFixture[str]) -> None:
    """An empty --state-dir (an unset $VAR) would silently keep state in memory only."""
    with pytest.raises(ValueError, match="--state-dir must name a directory"):
        serve(state_dir="")
    assert main(["serve", "--state-dir", ""]) == 2
    assert "--state-dir must name a directory, got ''" in capsys.readouterr().err


def test_serve_refuses_a_port_in_use_before_it_says_it_serves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--state-dir", str(tmp_path), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"cannot listen on http://127.0.0.1:{port}: Address already in use" in err
    assert "stretch serve on" not in caplog.text
    assert not (tmp_path / "operators").exists()  # refused before it touched the directory
