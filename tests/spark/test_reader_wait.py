"""A micro-batch planned before a restart waits for the log to reach its offsets.

A sidecar without ``--state-dir`` that restarted holds a new, empty operator; a reader
restarted from its checkpoint re-runs the micro-batch it had planned (offsets A..B), which
the new log reaches only as the writers replay the input. The reader waits for it, under a
deadline, instead of failing at once. These tests drive the reader's planning and reading
as Spark's driver and an executor would, against the sidecar (no Spark session).
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from stretch.client import ServiceError, StretchClient
from stretch.errors import StretchError
from stretch.merge import split_urls
from stretch.sharded import ShardedClient
from stretch.spark import reader as reader_module
from stretch.spark.options import ReaderOptions
from stretch.spark.reader import StretchBatchReader, StretchStreamReader, output_schema
from stretch.spark.sidecar import EmbeddedSidecar
from tests.spark.conftest import TIMEOUT_S, TOKEN, wait_output_finished
from tests.waiting import wait_until

FORWARD = {"columns": "v:int", "inputs": 1}


def rows(ts: np.ndarray) -> pa.Table:
    return pa.table({"ts": pa.array(ts, pa.int64()), "v": pa.array(np.arange(len(ts)))})


def reader_options(sidecar: str, name: str, **options: str) -> ReaderOptions:
    return ReaderOptions.parse({"url": sidecar, "operator": name, "token": TOKEN, **options})


def restarted_reader(sidecar: str, name: str) -> StretchStreamReader:
    """A reader as a restarted query has it: it has seen nothing of the new log."""
    options = reader_options(sidecar, name)
    return StretchStreamReader(options, output_schema(options))


def batch_reader(sidecar: str, name: str, **options: str) -> StretchBatchReader:
    parsed = reader_options(sidecar, name, **options)
    return StretchBatchReader(parsed, output_schema(parsed))


def finished_forward(client: StretchClient, name: str, count: int) -> None:
    """A forward operator whose log holds ``count`` rows and is finished."""
    client.create_operator(name, "forward", FORWARD)
    client.add_batch(name, 0, rows(np.arange(0, count)), batch_id=0)
    client.close_source(name, 0)
    wait_output_finished(client, name)


def micro_batch(reader: StretchStreamReader, start: int, end: int) -> pa.Table:
    """Plan the offsets ``start..end`` (driver) and read them (executor)."""
    parts = reader.partitions({"offset": start}, {"offset": end})
    return pa.Table.from_batches([b for part in parts for b in reader.read(part)])


def test_a_planned_batch_waits_for_the_replayed_log(
    sidecar: str, client: StretchClient, tmp_path: Path
) -> None:
    client.create_operator("promised", "forward", FORWARD)
    client.add_batch("promised", 0, rows(np.arange(0, 100)), batch_id=0)
    reader = restarted_reader(sidecar, "promised")
    result: list[pa.Table | BaseException] = []

    def run() -> None:
        try:
            result.append(micro_batch(reader, 50, 150))  # planned before the restart
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            result.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(1.0)
    assert thread.is_alive(), f"the micro-batch did not wait for its offsets: {result}"
    client.add_batch("promised", 0, rows(np.arange(100, 200)), batch_id=1)  # the replay goes on
    client.close_source("promised", 0)
    thread.join(TIMEOUT_S)
    assert not thread.is_alive()
    (table,) = result
    assert isinstance(table, pa.Table), table
    assert table.column("offset").to_pylist() == list(range(50, 150))
    assert table.column("ts").to_pylist() == list(range(50, 150))


def test_the_wait_ends_naming_the_offsets_and_the_logs_end(
    sidecar: str, client: StretchClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.create_operator("promised-late", "forward", FORWARD)
    client.add_batch("promised-late", 0, rows(np.arange(0, 100)), batch_id=0)
    client.output("promised-late", 98, max_rows=1, wait_ms=60_000)  # 99 rows out
    monkeypatch.setattr(reader_module, "PROMISED_WAIT_S", 0.5)
    reader = restarted_reader(sidecar, "promised-late")
    with pytest.raises(StretchError) as caught:
        reader.partitions({"offset": 50}, {"offset": 150})
    message = str(caught.value)
    assert "output of 'promised-late': a micro-batch planned to read offsets 50..150" in message
    assert "waited 0.5 s for the log to reach 150, but it ends at 99" in message
    assert "its writers did not replay the input that far" in message

    client.close_source("promised-late", 0)  # finished short of the offsets: no wait at all
    wait_output_finished(client, "promised-late")
    monkeypatch.setattr(reader_module, "PROMISED_WAIT_S", TIMEOUT_S)
    with pytest.raises(StretchError, match=r"but the log ended at 100 \(every source closed\)"):
        reader.partitions({"offset": 50}, {"offset": 150})


def test_a_new_query_starts_at_the_committed_offset_not_at_rows_to_be_trimmed(
    sidecar: str, client: StretchClient
) -> None:
    """As after a restart: the log holds rows a commit has passed and trims them as they
    come, so a new query starts at the commit (it started at the first row held)."""
    client.create_operator("committed", "forward", FORWARD)
    client.add_batch("committed", 0, rows(np.arange(0, 10)), batch_id=0)
    client.commit("committed", 15)  # five rows beyond the end: applied when they come
    reader = restarted_reader(sidecar, "committed")
    assert reader.initialOffset() == {"offset": 15}
    client.add_batch("committed", 0, rows(np.arange(10, 20)), batch_id=1)
    client.close_source("committed", 0)
    wait_output_finished(client, "committed")
    assert micro_batch(reader, 15, 20).column("v").to_pylist() == [5, 6, 7, 8, 9]


def test_the_schema_is_read_where_no_commit_can_trim_it(
    sidecar: str, client: StretchClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a restart a commit re-applied as its rows come back trims them, possibly
    between the reader's status request and its read of one row for the schema: a read
    at the log's start would find it gone (a CI run of the sharded pipeline test did)."""
    finished_forward(client, "trimmed", 10)
    status = StretchClient.status

    def status_then_trim(self: StretchClient, name: str) -> dict[str, object]:
        answer = status(self, name)
        client.commit(name, 10)  # lands after the status: rows 0..9 are trimmed
        return answer

    monkeypatch.setattr(StretchClient, "status", status_then_trim)
    schema = output_schema(reader_options(sidecar, "trimmed"))
    assert schema.fieldNames() == ["ts", "v", "offset"]


def schema_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    """The arguments of every ``StretchClient.output`` call from now on."""
    reads = []
    output = StretchClient.output

    def counted(self: StretchClient, *args: object, **kwargs: object) -> object:
        reads.append(args)
        return output(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(StretchClient, "output", counted)
    return reads


def rows_after_the_next_status(
    client: StretchClient, monkeypatch: pytest.MonkeyPatch, commit: int | None = None
) -> None:
    """Once the next status is answered: rows 10..19 come, the log finishes, and a reader
    commits ``commit`` (if given), all before the caller's next request."""
    status = StretchClient.status

    def status_then_rows(self: StretchClient, name: str) -> dict[str, object]:
        answer = status(self, name)
        monkeypatch.setattr(StretchClient, "status", status)
        client.add_batch(name, 0, rows(np.arange(10, 20)), batch_id=1)
        client.close_source(name, 0)
        # By the status alone: ``wait_finished`` long-polls the output, which the tests
        # count as the reader's reads.
        assert wait_until(lambda: bool(client.status(name)["output"]["finished"]), TIMEOUT_S)
        if commit is not None:
            client.commit(name, commit)
        return answer

    monkeypatch.setattr(StretchClient, "status", status_then_rows)


def test_the_schema_is_read_again_when_a_commit_passes_the_logs_end(
    sidecar: str, client: StretchClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows and a commit arriving between the status and the read can take the log past
    the end the status gave (a test run of the sharded pipeline rerun: "output offset 16350
    was trimmed; the log starts at 30199"). The reader reads the schema again there."""
    client.create_operator("passed", "forward", FORWARD)
    client.add_batch("passed", 0, rows(np.arange(0, 10)), batch_id=0)
    rows_after_the_next_status(client, monkeypatch, commit=15)  # past the end it gave
    reads = schema_reads(monkeypatch)
    assert output_schema(reader_options(sidecar, "passed")).fieldNames() == ["ts", "v", "offset"]
    (_, first), (_, second) = reads  # the first end (below 15) was trimmed: read at the new
    assert first < 15 and second == 20


def test_the_schema_is_read_at_a_commit_beyond_the_end(
    sidecar: str, client: StretchClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a restart a commit beyond the end trims the rows as they come back: the
    schema is read at that commit, which no re-applied commit passes."""
    client.create_operator("deferred", "forward", FORWARD)
    client.add_batch("deferred", 0, rows(np.arange(0, 10)), batch_id=0)
    client.commit("deferred", 15)  # applied when the rows reach it
    rows_after_the_next_status(client, monkeypatch)  # rows 0..14 are trimmed then
    reads = schema_reads(monkeypatch)
    assert output_schema(reader_options(sidecar, "deferred")).fieldNames()[-1] == "offset"
    assert reads == [("deferred", 15)]  # once, at the commit


def test_the_schema_read_gives_up_after_its_bounded_tries(
    sidecar: str, client: StretchClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log trimmed past its end at every read (readers committing as fast as it grows):
    the reader stops after ``_SCHEMA_READS`` tries and says so, instead of looping."""
    client.create_operator("racing", "forward", FORWARD)
    moving = {"output": {"end_offset": 5, "committed_offset": 0, "start_offset": 9}}
    monkeypatch.setattr(StretchClient, "status", lambda self, name: moving)
    reads = []

    def trimmed(self: StretchClient, name: str, offset: int, **_: object) -> None:
        reads.append(offset)
        raise ServiceError(400, f"output offset {offset} was trimmed; the log starts at 9")

    monkeypatch.setattr(StretchClient, "output", trimmed)
    with pytest.raises(StretchError, match="trimmed past its end 10 times over"):
        output_schema(reader_options(sidecar, "racing"))
    assert reads == [5] * reader_module._SCHEMA_READS


def test_a_batch_read_returns_the_uncommitted_rows_with_their_offsets(
    sidecar: str, client: StretchClient
) -> None:
    finished_forward(client, "batch", 250)
    client.commit("batch", 30)
    reader = batch_reader(sidecar, "batch", rowsPerPartition="100")
    parts = reader.partitions()
    assert [(p.start, p.end) for p in parts] == [(30, 130), (130, 230), (230, 250)]
    table = pa.Table.from_batches([b for part in parts for b in reader.read(part)])
    assert table.column("offset").to_pylist() == list(range(30, 250))
    assert table.column("v").to_pylist() == list(range(30, 250))
    assert client.status("batch")["output"]["committed_offset"] == 30  # commits nothing


def test_a_batch_read_whose_rows_were_committed_since_it_was_planned_says_so(
    sidecar: str, client: StretchClient
) -> None:
    finished_forward(client, "batch-trimmed", 20)
    reader = batch_reader(sidecar, "batch-trimmed")
    (part,) = reader.partitions()
    client.commit("batch-trimmed", 12)  # a streaming query's commit, after the planning
    with pytest.raises(
        StretchError,
        match=r"offsets 0\.\.20 were planned, but a reader "
        r"committed the log up to 12 since .* read again",
    ):
        list(reader.read(part))


def test_a_sharded_batch_read_whose_rows_were_committed_since_names_the_shard(
    sidecar: str,
) -> None:
    words = np.array(["a", "b", "c", "d", "e", "f", "g", "h"])
    tweets = pa.table(
        {
            "ts": np.arange(400, dtype=np.int64) * 5,
            "user": [f"u{i % 5}" for i in range(400)],
            "tweet": [" ".join(words[[i % 8, (i * 3) % 8]]) for i in range(400)],
        }
    )
    with EmbeddedSidecar(TOKEN) as second:
        urls = f"{sidecar},{second.url}"
        with ShardedClient(split_urls(urls), token=TOKEN) as sharded:
            sharded.create_operator("batch-shards", "wordcount", {"wa": 100, "ws": 300})
            sharded.add_batch("batch-shards", 0, tweets)
            sharded.close_source("batch-shards", 0)
            sharded.wait_finished("batch-shards")
            reader = batch_reader(urls, "batch-shards")
            (part,) = reader.partitions()
            _, offset = sharded.output("batch-shards", 0, max_rows=50)
            sharded.commit("batch-shards", offset)  # after the planning
            with pytest.raises(
                StretchError, match=r"were planned, but a reader committed shard \d's log up to"
            ):
                list(reader.read(part))
