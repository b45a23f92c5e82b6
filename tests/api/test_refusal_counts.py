"""Batches refused as late or acknowledged as duplicates are counted across a kill -9.

Their rows are not applied, so they are not journaled as batches; a small ``counted``
record keeps their counts (``late_tuples``, ``duplicate_batches``) so that a restart with
no checkpoint since restores them, and the output stays identical offset for offset.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from stretch.client import ServiceError, StretchClient
from tests.api.conftest import TOKEN, v_table
from tests.api.sidecar import Sidecar
from tests.waiting import wait_until

FORWARD: dict[str, str | int | float] = {"columns": "v:int", "inputs": 1}


def _counts(client: StretchClient) -> tuple[dict[str, Any], dict[str, float]]:
    """Source 0's status counters and its late and duplicate metrics."""
    source = client.status("op")["sources"][0]
    counters = {k: source[k] for k in ("tuples_in", "batches", "late_tuples", "duplicate_batches")}
    pattern = r'^stretch_(late_tuples|duplicate_batches)_total\{operator="op",source="0"\} (\S+)$'
    metrics = {m[0]: float(m[1]) for m in re.findall(pattern, client.metrics(), re.MULTILINE)}
    return counters, metrics


def _refuse_and_count(client: StretchClient) -> None:
    """Batches and staged commits: applied, duplicate, refused as late, partly dropped."""
    client.create_operator("op", "forward", FORWARD, parallelism=1)
    client.add_batch("op", 0, v_table(range(40)), batch_id=0)
    client.watermark("op", 0, 40)
    for _ in range(2):
        assert client.add_batch("op", 0, v_table(range(40)), batch_id=0).duplicate
    with pytest.raises(ServiceError) as late:
        client.add_batch("op", 0, v_table([1, 2, 3], 100), batch_id=1)
    assert late.value.status == 422
    client.stage_part("op", 0, "w", 0, 0, v_table(range(40, 80), 40))
    assert client.commit_staged("op", 0, "w", 0, [0])["accepted"] == 40
    assert client.commit_staged("op", 0, "w", 0, [0])["duplicate"]
    client.stage_part("op", 0, "w", 1, 0, v_table([5, 6], 200))
    with pytest.raises(ServiceError) as staged_late:
        client.commit_staged("op", 0, "w", 1, [0])
    assert staged_late.value.status == 422
    client.stage_part("op", 0, "w", 2, 0, v_table([7, 90], 300))
    assert client.commit_staged("op", 0, "w", 2, [0], late_rows="drop")["dropped"] == 1


def test_late_and_duplicate_counts_survive_a_kill_9(tmp_path: Path) -> None:
    sidecar = Sidecar(tmp_path / "state", tmp_path, checkpoint_interval_s=3600.0)
    sidecar.start()
    try:
        with StretchClient(sidecar.url, token=TOKEN) as client:
            _refuse_and_count(client)
            before = _counts(client)
            end = client.status("op")["output"]["end_offset"]
            output, _ = client.output("op", 0, max_rows=1000)
            assert client._request("GET", "/v1/operators/op/checkpoints").json() == []
        assert before == (
            {"tuples_in": 81, "batches": 3, "late_tuples": 6, "duplicate_batches": 3},
            {"late_tuples": 6.0, "duplicate_batches": 3.0},
        )
        sidecar.kill()
        sidecar.start()
        with StretchClient(sidecar.url, token=TOKEN) as client:
            assert wait_until(lambda: client.status("op")["output"]["end_offset"] >= end)
            assert _counts(client) == before
            assert client.output("op", 0, max_rows=1000)[0].equals(output)
    except BaseException:
        print(sidecar.log())  # noqa: T201 - the server's side of a failure
        raise
    finally:
        sidecar.stop()
