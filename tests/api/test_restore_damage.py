"""Restoring from --state-dir in process: missing files stop the restore, legitimate
states (nothing written since a checkpoint, restarts, a checkpoint taken twice) do not.

Each test keeps an operator in a state directory, stops the app, changes the files as a
crash, an operator or a bad volume might, and starts a new app on the same directory.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from stretch.api import create_app
from stretch.api.durability import StateDirectory
from stretch.api.limits import ServiceLimits
from stretch.api.metrics import ServiceMetrics
from stretch.client import ServiceError, StretchClient
from tests.api.conftest import TOKEN, TestClient, v_table
from tests.waiting import wait_until

FORWARD = {"columns": "v:int", "inputs": 1}
ROWS = 40
"""Rows per batch; batch k holds ``ts`` from ``k * ROWS`` on."""


@contextmanager
def _service(state: Path, limits: ServiceLimits | None = None) -> Iterator[StretchClient]:
    """A client of an app on ``state``, once its kept operators were restored (or failed)."""
    app = create_app(TOKEN, limits, state_dir=state, checkpoint_interval_s=3600.0)
    with TestClient(app) as http:
        assert wait_until(lambda: app.state.operators.restoring == 0)
        yield StretchClient(token=TOKEN, http=http)


def _send(client: StretchClient, first: int, stop: int, name: str = "op") -> None:
    """Batches ``first..stop`` (with their ids), each followed by a watermark."""
    for k in range(first, stop):
        client.add_batch(name, 0, v_table(range(k * ROWS, (k + 1) * ROWS), k * ROWS), batch_id=k)
        client.watermark(name, 0, (k + 1) * ROWS)


def _keep(state: Path, checkpoint: bool) -> Path:
    """Keep operator 'op' with batches 0..3, a checkpoint after batch 1 if asked; return
    its folder."""
    with _service(state) as client:
        client.create_operator("op", "forward", FORWARD)
        _send(client, 0, 2)
        if checkpoint:
            client._request("POST", "/v1/operators/op/checkpoint")
        _send(client, 2, 4)
    return state / "operators" / "op"


def _checkpoint(folder: Path) -> Path:
    (latest,) = (folder / "checkpoints").iterdir()
    return latest


def _segment_after_checkpoint(folder: Path) -> Path:
    return folder / "journal" / f"{_checkpoint(folder).name}.log"


def _first_segment(folder: Path) -> Path:
    return folder / "journal" / f"{1:020d}.log"


def _remove(path: Path) -> Path:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    return path


def _empty(path: Path) -> Path:
    path.write_bytes(b"")
    return path


DAMAGE = {
    "checkpoint removed": (True, lambda f: _remove(_checkpoint(f))),
    "segment after the checkpoint removed": (True, lambda f: _remove(_segment_after_checkpoint(f))),
    "segment after the checkpoint emptied": (True, lambda f: _empty(_segment_after_checkpoint(f))),
    "first segment removed": (False, lambda f: _remove(_first_segment(f))),
    "first segment emptied": (False, lambda f: _empty(_first_segment(f))),
    "operator.json removed": (False, lambda f: _remove(f / "operator.json")),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_missing_or_emptied_file_stops_the_restore(tmp_path: Path, case: str) -> None:
    """The operator answers 503 naming the file, is listed as failed, keeps its files
    through restarts and a create of its name (409), and starts over once deleted."""
    checkpoint, damage = DAMAGE[case]
    folder = _keep(tmp_path, checkpoint)
    victim = damage(folder)
    for _ in range(2):  # failing again on the next start: nothing was wiped
        with _service(tmp_path) as client:
            with pytest.raises(ServiceError) as refused:
                client.output("op", 0)
            assert refused.value.status == 503
            assert victim.name in refused.value.detail
            assert "op" in client._http.get("/readyz").json()["failed"]
            (listed,) = client.operators()
            assert listed["name"] == "op" and listed["state"] == "failed"
            assert victim.name in listed["detail"]
            with pytest.raises(ServiceError) as taken:
                client.create_operator("op", "forward", FORWARD)
            assert taken.value.status == 409
            assert "could not be restored" in taken.value.detail
            assert "DELETE /v1/operators/op" in taken.value.detail
        assert folder.is_dir()
    with _service(tmp_path) as client:
        client.delete_operator("op")
        assert client.operators() == []
        client.create_operator("op", "forward", FORWARD)
        assert client.status("op")["counters"]["tuples_in"] == 0
    with _service(tmp_path) as client:
        assert client.status("op")["counters"]["tuples_in"] == 0


@pytest.mark.parametrize("checkpoint", [False, True])
def test_restarts_with_and_without_writes_restore_everything(
    tmp_path: Path, checkpoint: bool
) -> None:
    """Restarts with nothing written between them, a checkpoint with nothing after it, and
    a checkpoint taken twice at the same LSN: every batch comes back, once."""
    _keep(tmp_path, checkpoint)
    for run in range(3):
        with _service(tmp_path) as client:
            assert client.status("op")["counters"]["tuples_in"] == 4 * ROWS
            assert client._http.get("/readyz").json()["failed"] == {}
            if run == 0:
                client._request("POST", "/v1/operators/op/checkpoint")
                client._request("POST", "/v1/operators/op/checkpoint")
    with _service(tmp_path) as client:
        _send(client, 4, 5)
        client.close_source("op", 0)
        out = client.read_all("op", 60.0)
    assert out.column("v").to_pylist() == list(range(5 * ROWS))


def test_an_operator_being_restored_or_failed_is_listed(tmp_path: Path) -> None:
    """GET /v1/operators lists every name a create would refuse: failed ones with why."""
    _keep(tmp_path, checkpoint=False)
    with _service(tmp_path) as client:
        client.create_operator("other", "forward", FORWARD)
    _remove(_first_segment(tmp_path / "operators" / "op"))
    with _service(tmp_path) as client:
        listed = {o["name"]: o for o in client.operators()}
        assert set(listed) == {"op", "other"}
        assert listed["op"]["state"] == "failed" and "is missing" in listed["op"]["detail"]
        assert "epoch" in listed["other"]


def test_a_restore_beyond_the_limits_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Restarted with lower limits, the service restores what it kept, and says so."""
    with _service(tmp_path) as client:
        for name in ("a", "b"):
            client.create_operator(name, "forward", FORWARD, max_parallelism=4)
    caplog.set_level(logging.WARNING, logger="stretch.api.registry")
    with _service(tmp_path, ServiceLimits(max_operators=1, max_pool_threads=8)) as client:
        assert len(client.operators()) == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("--max-operators 1" in w and "2 operators" in w for w in warnings), warnings
    assert any("--max-pool-threads 8" in w and "12 threads" in w for w in warnings), warnings


def test_a_checkpoint_finished_after_a_later_one_is_not_written(tmp_path: Path) -> None:
    """Two checkpoints at once (the checkpointer and a POST): if the later one is on disk
    first, the earlier one must not replace it, since the journal before it is gone."""
    state = StateDirectory(tmp_path, ServiceMetrics(list))
    journal = state.create("op", {})
    journal.sync(journal.log({"k": 1}))
    earlier = journal.journal.rotate()
    journal.sync(journal.log({"k": 2}))
    later = journal.journal.rotate()
    table = {"t": v_table([1])}
    assert journal.write_checkpoint(later, {"n": 2}, table, 0.0) > 0
    assert journal.write_checkpoint(earlier, {"n": 1}, table, 0.0) == 0
    journal.close()
    state.close()
    again = StateDirectory(tmp_path, ServiceMetrics(list))
    stored = again.read("op")
    again.close()
    assert stored.checkpoint is not None and stored.checkpoint.lsn == later
    assert stored.checkpoint.meta == {"n": 2} and stored.records.records == []


def test_a_create_never_removes_files_it_did_not_write(tmp_path: Path) -> None:
    """A folder the registry does not know (one being deleted, or put there by hand)."""
    with _service(tmp_path) as client:
        stray = tmp_path / "operators" / "op"
        stray.mkdir()
        with pytest.raises(ServiceError) as refused:
            client.create_operator("op", "forward", FORWARD)
        assert refused.value.status == 409 and "retry" in refused.value.detail
        assert stray.is_dir()
