"""Staged batches: parts staged in any order, made visible as one batch by a commit."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

from stretch import CapacityError, build, run_sn
from stretch.api import create_app
from stretch.client import ServiceError, StretchClient
from tests.api.conftest import TIMEOUT_S, TOKEN, TestClient, auth
from tests.waiting import wait_until

FORWARD = {"columns": "v:int", "inputs": 1}


def rows(ts: list[int], v: list[int]) -> pa.Table:
    return pa.table({"ts": pa.array(ts, pa.int64()), "v": pa.array(v, pa.int64())})


def test_parts_are_added_in_the_listed_order_whatever_their_arrival(
    client: StretchClient, http: TestClient
) -> None:
    client.create_operator("f", "forward", FORWARD)
    part0, part1 = rows([5, 1, 3], [0, 1, 2]), rows([3, 2, 5], [3, 4, 5])
    assert client.stage_part("f", 0, "q-1", 0, 1, part1) == 3
    assert client.stage_part("f", 0, "q-1", 0, 0, part0) == 3
    assert client.status("f")["sources"][0]["tuples_in"] == 0  # nothing visible yet
    staging = http.app.state.staging  # type: ignore[attr-defined]
    assert staging.staged_bytes == part0.nbytes + part1.nbytes
    answer = client.commit_staged("f", 0, "q-1", 0, [0, 1])
    assert answer == {"accepted": 6, "dropped": 0, "duplicate": False, "first_of_writer": True}
    assert staging.staged_bytes == 0
    client.close_source("f", 0)
    out = client.read_all("f", TIMEOUT_S)
    # One batch, stably sorted by ts: equal ts keep part order (v 2 before v 3 at ts 3).
    expected = run_sn(build("forward", FORWARD), [rows([1, 2, 3, 3, 5, 5], [1, 4, 2, 3, 0, 5])])
    assert out.equals(expected)


def test_a_replayed_batch_is_added_once(client: StretchClient) -> None:
    client.create_operator("f", "forward", FORWARD)
    client.stage_part("f", 0, "q-1", 0, 0, rows([1, 2], [1, 2]))
    client.commit_staged("f", 0, "q-1", 0, [0])
    assert client.stage_part("f", 0, "q-1", 0, 0, rows([1, 2], [1, 2])) == 0
    assert client.commit_staged("f", 0, "q-1", 0, [0])["duplicate"] is True
    # Another writer's batch 0 is its own.
    client.stage_part("f", 0, "q-2", 0, 0, rows([3], [3]))
    assert client.commit_staged("f", 0, "q-2", 0, [0])["accepted"] == 1
    assert client.status("f")["sources"][0]["tuples_in"] == 3


def test_a_writers_first_commit_says_so(client: StretchClient) -> None:
    """A writer whose first batch here is above 0 has earlier batches elsewhere (a sidecar
    restarted in memory): the answer says it is the first, and only the first."""
    client.create_operator("f", "forward", FORWARD)
    client.stage_part("f", 0, "q-1", 3, 0, rows([1, 2], [1, 2]))
    assert client.commit_staged("f", 0, "q-1", 3, [0])["first_of_writer"] is True
    client.stage_part("f", 0, "q-1", 4, 0, rows([3], [3]))
    assert client.commit_staged("f", 0, "q-1", 4, [0])["first_of_writer"] is False
    answer = client.commit_staged("f", 0, "q-1", 3, [0])
    assert (answer["duplicate"], answer["first_of_writer"]) == (True, False)


def test_a_continuing_writer_new_to_the_operator_is_refused(http: TestClient) -> None:
    """A writer that says it committed earlier batches here, which the operator lacks (an
    in-memory sidecar that restarted), is refused: nothing added, its parts dropped."""
    client = StretchClient(token=TOKEN, http=http)
    client.create_operator("f", "forward", FORWARD)
    client.stage_part("f", 0, "q-1", 3, 0, rows([1, 2], [1, 2]))
    with pytest.raises(ServiceError, match="no earlier batch of this writer") as error:
        client.commit_staged("f", 0, "q-1", 3, [0], continues=True)
    assert error.value.status == 409
    assert "new checkpointLocation" in str(error.value)
    assert client.status("f")["sources"][0]["tuples_in"] == 0
    assert http.app.state.staging.staged_bytes == 0  # type: ignore[attr-defined]
    # From its first batch on (an empty one counts), a writer may continue.
    assert client.commit_staged("f", 0, "q-1", 0, [])["accepted"] == 0
    client.stage_part("f", 0, "q-1", 1, 0, rows([1, 2], [1, 2]))
    assert client.commit_staged("f", 0, "q-1", 1, [0], continues=True)["accepted"] == 2


def test_a_continuing_writer_is_known_after_a_restart(tmp_path: Path) -> None:
    def app() -> TestClient:
        return TestClient(create_app(TOKEN, state_dir=tmp_path, checkpoint_interval_s=3600.0))

    with app() as http:
        client = StretchClient(token=TOKEN, http=http)
        client.create_operator("f", "forward", FORWARD)
        assert client.commit_staged("f", 0, "q", 0, [])["first_of_writer"] is True
    with app() as http:  # restored from the journal alone
        assert wait_until(lambda: http.get("/readyz").status_code == 200)
        client = StretchClient(token=TOKEN, http=http)
        client.stage_part("f", 0, "q", 1, 0, rows([5], [5]))
        assert client.commit_staged("f", 0, "q", 1, [0], continues=True)["accepted"] == 1


def test_a_missing_part_is_a_conflict_and_abort_discards(client: StretchClient) -> None:
    client.create_operator("f", "forward", FORWARD)
    client.stage_part("f", 0, "q", 4, 0, rows([1], [1]))
    with pytest.raises(ServiceError, match="part\\(s\\) 1 were not staged") as error:
        client.commit_staged("f", 0, "q", 4, [0, 1])
    assert error.value.status == 409
    client.abort_staged("f", 0, "q", 4)
    with pytest.raises(ServiceError, match="staged: none"):
        client.commit_staged("f", 0, "q", 4, [0])


def test_late_rows_drop_or_fail(client: StretchClient) -> None:
    client.create_operator("f", "forward", FORWARD)
    client.stage_part("f", 0, "q", 0, 0, rows([10, 20], [1, 2]))
    client.commit_staged("f", 0, "q", 0, [0])
    client.stage_part("f", 0, "q", 1, 0, rows([5, 25, 15], [3, 4, 5]))
    with pytest.raises(ServiceError, match="before the released watermark 20") as error:
        client.commit_staged("f", 0, "q", 1, [0])
    assert error.value.status == 422
    client.stage_part("f", 0, "q", 1, 0, rows([5, 25, 15], [3, 4, 5]))
    answer = client.commit_staged("f", 0, "q", 1, [0], late_rows="drop")
    assert answer == {"accepted": 1, "dropped": 2, "duplicate": False, "first_of_writer": False}
    assert client.status("f")["sources"][0]["late_tuples"] == 2 + 2


def test_a_bad_part_names_the_row_and_staging_is_bounded(http: TestClient) -> None:
    client = StretchClient(http=http, token="s3cret-token")
    client.create_operator("f", "forward", FORWARD)
    response = http.put(
        "/v1/operators/f/sources/0/staged/q/0/0",
        json={"rows": [{"ts": 1, "v": "x"}]},
        headers=auth(),
    )
    assert response.status_code == 422
    assert "row 1, column 'v'" in response.json()["detail"]
    assert http.put("/v1/operators/f/sources/0/staged/q/0/0", json={"rows": []}).status_code == 401
    http.app.state.staging.max_bytes = 100  # type: ignore[attr-defined]
    with pytest.raises(CapacityError, match="staged parts hold 0 of 100 bytes"):
        client.stage_part("f", 0, "q", 0, 0, rows(list(range(50)), list(range(50))), retry_s=0)


@pytest.mark.parametrize(("parts", "repeated"), [([0, 0], 0), ([1, 0, 1], 1)])
def test_a_commit_listing_a_part_twice_is_refused_and_commits_nothing(
    client: StretchClient, parts: list[int], repeated: int
) -> None:
    client.create_operator("f", "forward", FORWARD)
    client.stage_part("f", 0, "q", 0, 0, rows([1, 2], [1, 2]))
    client.stage_part("f", 0, "q", 0, 1, rows([3], [3]))
    with pytest.raises(ServiceError, match=f"part {repeated} is listed more than once") as error:
        client.commit_staged("f", 0, "q", 0, parts)
    assert error.value.status == 422
    assert client.status("f")["sources"][0]["tuples_in"] == 0
    # The parts stay staged: the writer's right commit adds each row once.
    assert client.commit_staged("f", 0, "q", 0, [0, 1])["accepted"] == 3
    client.close_source("f", 0)
    assert client.read_all("f", TIMEOUT_S).column("v").to_pylist() == [1, 2, 3]


def _duplicates(client: StretchClient) -> tuple[int, int, float]:
    """Source 0's ``duplicate_batches``, the operator's, and the Prometheus counter."""
    status = client.status("f")
    pattern = r'^stretch_duplicate_batches_total\{operator="f",source="0"\} (\S+)$'
    metric = re.search(pattern, client.metrics(), re.MULTILINE)
    assert metric is not None
    return (
        status["sources"][0]["duplicate_batches"],
        status["counters"]["duplicate_batches"],
        float(metric[1]),
    )


def test_a_replayed_commit_is_counted_as_a_duplicate_and_the_count_is_restored(
    tmp_path: Path,
) -> None:
    def app() -> TestClient:
        return TestClient(create_app(TOKEN, state_dir=tmp_path, checkpoint_interval_s=3600.0))

    with app() as http:
        client = StretchClient(token=TOKEN, http=http)
        client.create_operator("f", "forward", FORWARD)
        client.add_batch("f", 0, rows([1], [1]), batch_id=7)
        assert client.add_batch("f", 0, rows([1], [1]), batch_id=7).duplicate
        assert _duplicates(client) == (1, 1, 1.0)
        client.stage_part("f", 0, "q", 3, 0, rows([2], [2]))
        assert client.commit_staged("f", 0, "q", 3, [0])["duplicate"] is False
        assert _duplicates(client) == (1, 1, 1.0)
        # A staged part of a committed batch is no batch: acknowledged, not counted.
        assert client.stage_part("f", 0, "q", 3, 0, rows([2], [2])) == 0
        assert _duplicates(client) == (1, 1, 1.0)
        # The batch itself, and an older one of the writer, count as the resent id did.
        assert client.commit_staged("f", 0, "q", 3, [0])["duplicate"] is True
        assert _duplicates(client) == (2, 2, 2.0)
        assert client.commit_staged("f", 0, "q", 1, [])["duplicate"] is True
        assert _duplicates(client) == (3, 3, 3.0)
        before = client.status("f")["sources"][0]
        assert http.get("/v1/operators/f/checkpoints", headers=auth()).json() == []
    # No checkpoint was taken: the restart counts them again from the journal.
    with app() as http:
        assert wait_until(lambda: http.get("/readyz").status_code == 200)
        client = StretchClient(token=TOKEN, http=http)
        assert _duplicates(client) == (3, 3, 3.0)
        assert client.status("f")["sources"][0] == before
