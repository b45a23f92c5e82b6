"""One server per --state-dir: a second one refuses to start; kill -9 frees the directory."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from stretch.api import create_app
from stretch.errors import StretchError
from tests.api.conftest import TIMEOUT_S, TOKEN, TestClient, auth
from tests.api.sidecar import Sidecar

FORWARD = {"name": "f", "operator": "forward", "params": {"columns": "v:int", "inputs": 1}}


def test_a_second_server_on_the_same_state_dir_exits_2(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = Sidecar(state, tmp_path / "first")
    second = Sidecar(state, tmp_path / "second")
    for sidecar in (first, second):
        sidecar.log_dir.mkdir()
    first.start()
    try:
        created = httpx.post(f"{first.url}/v1/operators", json=FORWARD, headers=auth())
        assert created.status_code == 201, created.text
        with pytest.raises(AssertionError):
            second.start()
        assert second.process is not None and second.process.wait(TIMEOUT_S) == 2
        second.process = None
        (line,) = [x for x in second.log().splitlines() if "stretch: error" in x]
        assert str(state) in line and "another server" in line
        assert "Traceback" not in second.log()
        first.kill()  # the OS drops a dead process's lock: the directory is free at once
        second.start()
        listed = httpx.get(f"{second.url}/v1/operators", headers=auth()).json()
        assert [o["name"] for o in listed] == ["f"]
    finally:
        first.stop()
        second.stop()


def test_an_app_holds_its_state_dir_until_it_stops(tmp_path: Path) -> None:
    """In one process too (an embedded sidecar started again on its directory)."""
    with (
        TestClient(create_app(TOKEN, state_dir=tmp_path)),
        pytest.raises(StretchError, match="another server"),
    ):
        create_app(TOKEN, state_dir=tmp_path)
    with TestClient(create_app(TOKEN, state_dir=tmp_path)) as http:
        assert http.get("/readyz").status_code == 200
