"""The status shows f_mu per instance; the full array has its own route (issue 19)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stretch.api.mapping import MAX_RANGES, summarize
from stretch.client import StretchClient
from stretch.model.mapping import NOT_OWNED, Shard, default_mapping
from tests.api.conftest import TIMEOUT_S, TestClient, auth


def test_status_is_compact_and_the_full_mapping_round_trips(
    http: TestClient, client: StretchClient
) -> None:
    status = client.create_operator("j", "scalejoin", {"ws": 2000}, parallelism=2)
    assert len(json.dumps(status)) < 3000  # was over 4 KB of mapping alone
    assert status["mapping"] == {
        "key_groups": 1024,
        "round_robin": True,
        "not_owned": 0,
        "instances": [
            {"instance": 0, "key_groups": 512, "ranges": None},
            {"instance": 1, "key_groups": 512, "ranges": None},
        ],
    }
    full = http.get("/v1/operators/j/mapping", headers=auth())
    assert full.status_code == 200
    assert full.json() == {"epoch": 0, "parallelism": 2, "mapping": default_mapping(1024, 2)}
    assert client.mapping("j") == default_mapping(1024, 2)

    halves = [0] * 300 + [2] * 424 + [1] * 300
    epoch = client.reconfigure("j", parallelism=3, mapping=halves)
    client.close_source("j", 0)  # the switch completes once the instances pass it
    client.close_source("j", 1)
    client.wait_finished("j", TIMEOUT_S)
    status = client.status("j")
    assert status["epoch"] == epoch
    assert status["mapping"] == {
        "key_groups": 1024,
        "round_robin": False,
        "not_owned": 0,
        "instances": [
            {"instance": 0, "key_groups": 300, "ranges": [[0, 299]]},
            {"instance": 1, "key_groups": 300, "ranges": [[724, 1023]]},
            {"instance": 2, "key_groups": 424, "ranges": [[300, 723]]},
        ],
    }
    assert client.mapping("j") == halves
    missing = http.get("/v1/operators/nope/mapping", headers=auth())
    assert missing.status_code == 404 and "'nope'" in missing.json()["detail"]


def test_a_shard_counts_the_groups_it_does_not_own(client: StretchClient) -> None:
    client.create_operator("s", "scalejoin", {"ws": 2000}, parallelism=2, shard=(1, 4))
    mapping = client.status("s")["mapping"]
    assert mapping["not_owned"] == 768 and mapping["round_robin"] is True
    assert [i["key_groups"] for i in mapping["instances"]] == [128, 128]
    assert client.mapping("s") == default_mapping(1024, 2, Shard(1, 4))


@given(
    st.integers(1, 6).flatmap(
        lambda m: st.tuples(st.just(m), st.lists(st.integers(-1, m - 1), min_size=1, max_size=64))
    )
)
def test_summary_counts_and_ranges_cover_the_mapping(case: tuple[int, list[int]]) -> None:
    m, mapping = case
    summary = summarize(mapping, m, None)
    assert summary.key_groups == len(mapping)
    assert summary.not_owned == mapping.count(NOT_OWNED)
    assert summary.round_robin == (mapping == default_mapping(len(mapping), m))
    for entry in summary.instances:
        groups = [g for g, i in enumerate(mapping) if i == entry.instance]
        assert entry.key_groups == len(groups)
        if entry.ranges is None:
            assert len(groups) > MAX_RANGES
        else:
            assert [g for lo, hi in entry.ranges for g in range(lo, hi + 1)] == groups


@pytest.mark.parametrize("m", [1, 3])
def test_round_robin_is_recognised(m: int) -> None:
    assert summarize(default_mapping(1024, m), m, None).round_robin
    assert summarize(default_mapping(1024, m, Shard(0, 2)), m, Shard(0, 2)).round_robin
