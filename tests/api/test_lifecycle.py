"""Full lifecycles over HTTP: the output equals the SN reference run on the same input."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from stretch import build, generate, run_sn
from stretch.client import ServiceError, StretchClient
from tests.api.conftest import TIMEOUT_S, send_in_chunks

SCALEJOIN = {"ws": 2000}
WORDCOUNT = {"wa": 500, "ws": 1000}


@pytest.fixture(scope="module")
def join_input() -> list[pa.Table]:
    return generate.scalejoin(1200, 1000.0, 7)


@pytest.fixture(scope="module")
def tweet_input() -> list[pa.Table]:
    return generate.tweets(300, 100.0, 3, vocabulary=40, hashtags=5)


@pytest.mark.parametrize("parallelism", [1, 2])
def test_scalejoin_lifecycle_equals_reference(
    client: StretchClient, join_input: list[pa.Table], parallelism: int
) -> None:
    status = client.create_operator(
        "j", "scalejoin", SCALEJOIN, parallelism=parallelism, max_parallelism=4
    )
    assert status["epoch"] == 0 and status["parallelism"] == parallelism
    assert len(status["watermarks"]) == 2
    assert status["mapping"]["round_robin"] is True
    assert [i["key_groups"] for i in status["mapping"]["instances"]] == [1024 // parallelism] * (
        parallelism
    )
    send_in_chunks(client, "j", join_input, 300)
    out = client.read_all("j", TIMEOUT_S)
    expected = run_sn(build("scalejoin", SCALEJOIN), join_input)
    assert expected.num_rows > 0
    assert out.equals(expected)
    status = client.status("j")
    assert status["counters"]["tuples_in"] == 2400
    assert status["counters"]["tuples_out"] == expected.num_rows
    assert [s["closed"] for s in status["sources"]] == [True, True]
    assert [s["name"] for s in client.operators()] == ["j"]
    client.delete_operator("j")
    assert client.operators() == []


def test_wordcount_lifecycle_json_rows(client: StretchClient, tweet_input: list[pa.Table]) -> None:
    client.create_operator("w", "wordcount", WORDCOUNT, parallelism=2)
    rows = tweet_input[0].to_pylist()
    for k in range(0, len(rows), 100):
        assert client.add_batch("w", 0, rows[k : k + 100], batch_id=k).accepted == len(
            rows[k : k + 100]
        )
    client.close_source("w", 0)
    expected = run_sn(build("wordcount", WORDCOUNT), tweet_input)
    assert client.read_all("w", TIMEOUT_S, commit=False).equals(expected)
    json_rows, next_offset = client.output_rows("w", 0, max_rows=1_000_000)
    assert json_rows == expected.to_pylist()
    assert next_offset == expected.num_rows


def test_repeated_batch_ids_are_acknowledged_and_ignored(
    client: StretchClient, join_input: list[pa.Table]
) -> None:
    client.create_operator("j", "scalejoin", SCALEJOIN)
    left, right = join_input
    first = client.add_batch("j", 0, left.slice(0, 600), batch_id=1)
    again = client.add_batch("j", 0, left.slice(0, 600), batch_id=1)
    assert first == (600, False) and again == (0, True)
    # The same id on another source is a different batch.
    assert client.add_batch("j", 1, right.slice(0, 600), batch_id=1) == (600, False)
    client.add_batch("j", 0, left.slice(600), batch_id=2)
    client.add_batch("j", 1, right.slice(600), batch_id=2)
    client.add_batch("j", 1, right.slice(600), batch_id=2)
    client.close_source("j", 0)
    client.close_source("j", 1)
    # Resends whose answers were lost: a batch after the close, and the close itself.
    assert client.add_batch("j", 0, left.slice(600), batch_id=2) == (0, True)
    client.close_source("j", 0)
    with pytest.raises(ServiceError, match="409"):
        client.add_batch("j", 0, left.slice(600), batch_id=3)  # a new batch is refused
    assert client.read_all("j", TIMEOUT_S).equals(run_sn(build("scalejoin", SCALEJOIN), join_input))
    sources = client.status("j")["sources"]
    assert [s["duplicate_batches"] for s in sources] == [2, 1]
    assert [s["tuples_in"] for s in sources] == [1200, 1200]


def test_reconfigure_while_batches_stream_in(
    client: StretchClient, join_input: list[pa.Table]
) -> None:
    client.create_operator("j", "scalejoin", SCALEJOIN, parallelism=1, max_parallelism=3)
    sent = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            send_in_chunks(client, "j", join_input, 100)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            sent.set()

    producer = threading.Thread(target=produce)
    producer.start()
    epochs = []
    try:
        for m in (3, 2, 1, 2):
            if sent.is_set():
                break
            epochs.append(client.reconfigure("j", parallelism=m))
    finally:
        producer.join(TIMEOUT_S)
    assert not producer.is_alive() and not errors, errors
    out = client.read_all("j", TIMEOUT_S)
    assert out.equals(run_sn(build("scalejoin", SCALEJOIN), join_input))
    records = client.reconfigurations("j")
    assert [r["epoch"] for r in records] == epochs
    assert all(set(r) >= {"epoch", "from", "to", "duration_ms"} for r in records)
    assert all(r["duration_ms"] is not None for r in records)
    assert client.status("j")["epoch"] == (epochs[-1] if epochs else 0)


def test_output_paging_commit_and_arrow(client: StretchClient, join_input: list[pa.Table]) -> None:
    client.create_operator("j", "scalejoin", SCALEJOIN)
    send_in_chunks(client, "j", join_input, 1200)
    expected = run_sn(build("scalejoin", SCALEJOIN), join_input)
    client.read_all("j", TIMEOUT_S, commit=False)
    first, offset = client.output("j", 0, max_rows=1)
    assert offset == 1 and first.equals(expected.slice(0, 1))
    client.commit("j", offset)
    rest, end = client.output("j", offset, max_rows=1000)
    assert end == expected.num_rows and rest.equals(expected.slice(1))
    empty, same = client.output("j", end, wait_ms=50)
    assert empty.num_rows == 0 and same == end
    assert client.status("j")["output"]["start_offset"] == 1


def test_hedge_takes_one_trade_stream(client: StretchClient) -> None:
    (trades,) = generate.hedge(600, 25.0, 7)
    params = {"ws": 5000}
    status = client.create_operator("h", "hedge", params, parallelism=2)
    assert [s["index"] for s in status["sources"]] == [0]
    assert len(status["watermarks"]) == 1
    send_in_chunks(client, "h", [trades], 150)
    out = client.read_all("h", TIMEOUT_S)
    expected = run_sn(build("hedge", params), [trades, trades])
    assert expected.num_rows > 0
    assert out.equals(expected)
    status = client.status("h")
    assert status["counters"]["tuples_in"] == trades.num_rows
    assert status["sources"][0]["closed"]
    with pytest.raises(ServiceError) as refused:
        client.add_batch("h", 1, trades.slice(0, 1))
    assert refused.value.status == 404


def test_without_a_state_dir_checkpoints_are_refused(client: StretchClient) -> None:
    client.create_operator("m", "forward", {"columns": "v:int", "inputs": 1})
    with pytest.raises(ServiceError) as refused:
        client._request("POST", "/v1/operators/m/checkpoint")
    assert refused.value.status == 409 and "--state-dir" in str(refused.value)
    assert "memory only" in client._http.get("/readyz").json()["state"]


def test_a_commit_beyond_the_end_is_applied_once_the_output_gets_there(
    client: StretchClient,
) -> None:
    """After a restart the log is produced again and may be behind a reader's offset."""
    client.create_operator("c", "forward", {"columns": "v:int", "inputs": 1})
    client.commit("c", 5)
    output = client.status("c")["output"]
    assert output["start_offset"] == 0 and output["committed_offset"] == 5
    client.add_batch("c", 0, pa.table({"ts": list(range(10)), "v": list(range(10))}))
    client.close_source("c", 0)
    client.wait_finished("c", TIMEOUT_S)
    assert client.status("c")["output"]["start_offset"] == 5
    table, _ = client.output("c", 5)
    assert table.column("v").to_pylist() == [5, 6, 7, 8, 9]
