"""Durability over real processes: kill -9 the sidecar anywhere, restart it, lose nothing.

Each test drives a ``stretch serve --state-dir`` process through a scenario of requests
(batches with ids, watermarks, a reconfiguration, checkpoints, reads with commits) and
kills it with SIGKILL after requests chosen by hypothesis. After each restart the client
resends the last requests (acknowledged ones among them: they must be duplicates) and
goes on; the reader continues from its own offset. The output read over all runs must
equal ``run_sn``'s, offset for offset.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stretch import build, generate, run_sn
from stretch.client import StretchClient
from stretch.errors import StretchError
from stretch.model.schema import Schema
from stretch.operators.catalog import CATALOG
from tests import custom_operators  # registers sensor_mean here, as --operators there
from tests.api.conftest import TIMEOUT_S, TOKEN
from tests.api.sidecar import Sidecar

CHUNK = 150
RESEND = 3
"""Requests resent after a restart (the last ones before the crash, acknowledged or not)."""


@dataclass(frozen=True)
class Case:
    """An operator, its params and its input (one table per REST source)."""

    operator: str
    params: dict[str, str | int]
    tables: list[pa.Table]


def _readings(rows: int) -> pa.Table:
    rng = np.random.default_rng(7)
    ts = np.sort(rng.integers(0, rows * 2, rows))
    sensors = rng.integers(0, 7, rows)
    values = rng.random(rows)
    rows_ = [(f"s{int(k)}", float(v)) for k, v in zip(sensors, values, strict=True)]
    return Schema.of(sensor="str", value="float").table(ts.tolist(), rows_)


def _cases() -> dict[str, Case]:
    tweets = generate.tweets(900, 100.0, seed=3)
    forward = Schema.of(v="int").table(list(range(0, 3000, 3)), [(i,) for i in range(1000)])
    return {
        "scalejoin": Case("scalejoin", {"ws": 300}, generate.scalejoin(900, 500.0, seed=2)),
        "hedge": Case("hedge", {"ws": 300}, generate.hedge(900, 500.0, seed=2)),
        "wordcount": Case("wordcount", {"wa": 100, "ws": 300}, tweets),
        "paircount": Case("paircount", {"wa": 100, "ws": 300, "b": 3}, tweets),
        "longest_tweet": Case("longest_tweet", {"wa": 100, "ws": 300}, tweets),
        "forward": Case("forward", {"columns": "v:int", "inputs": "1"}, [forward]),
        "sensor_mean": Case("sensor_mean", {}, [_readings(900)]),
    }


CASES = _cases()
assert custom_operators.sensor_mean({}).name == "sensor_mean"

Step = Callable[[StretchClient, "Reader"], None]


class Reader:
    """Reads the output from its own offset and commits what it read."""

    def __init__(self) -> None:
        self.offset = 0
        self.tables: list[pa.Table] = []

    def read(self, client: StretchClient) -> None:
        table, offset = client.output("op", self.offset, max_rows=100_000, wait_ms=50)
        if table.num_rows:
            self.tables.append(table)
            self.offset = offset
            client.commit("op", offset)

    def finish(self, client: StretchClient) -> pa.Table:
        rest = client.read_all("op", TIMEOUT_S, offset=self.offset)
        return pa.concat_tables([*self.tables, rest])


def _steps(case: Case) -> list[tuple[str, Step]]:
    """The scenario's requests, in order, each a (kind, action) pair."""
    steps: list[tuple[str, Step]] = []
    longest = max(t.num_rows for t in case.tables)
    for k, start in enumerate(range(0, longest, CHUNK)):
        for source, table in enumerate(case.tables):
            if start >= table.num_rows:
                continue
            part = table.slice(start, CHUNK)

            def batch(
                c: StretchClient, r: Reader, s: int = source, p: pa.Table = part, b: int = k
            ) -> None:
                c.add_batch("op", s, p, batch_id=b)

            steps.append(("batch", batch))
            mark = int(part.column("ts")[-1].as_py())

            def watermark(c: StretchClient, r: Reader, s: int = source, ts: int = mark) -> None:
                c.watermark("op", s, ts)

            steps.append(("watermark", watermark))
        if k == 1:
            steps.append(("reconfigure", lambda c, r: c.reconfigure("op", parallelism=2)))
        if k == 2:
            steps.append(
                ("autoscale", lambda c, r: c.set_autoscale("op", "threshold", period_ms=20))
            )
        if k == 4:
            steps.append(("autoscale off", lambda c, r: c.clear_autoscale("op")))
        if k % 2 == 1:
            steps.append(("read", lambda c, r: r.read(c)))
        if k == 3:
            steps.append(
                ("checkpoint", lambda c, r: c._request("POST", "/v1/operators/op/checkpoint"))
            )
    return steps


def _run(case: Case, tmp_path: Path, crashes: set[int], interval_s: float = 10.0) -> Sidecar:
    steps = _steps(case)
    sidecar = Sidecar(
        tmp_path / "state", tmp_path, interval_s, operators=("tests.custom_operators",)
    )
    reader = Reader()
    sidecar.start()
    try:
        with StretchClient(sidecar.url, token=TOKEN) as client:
            client.create_operator("op", case.operator, case.params, parallelism=1)
            i = 0
            while i < len(steps):
                steps[i][1](client, reader)
                if i in crashes:
                    crashes = crashes - {i}
                    sidecar.kill()
                    sidecar.start()
                    i = max(0, i - RESEND)
                i += 1
            for source in range(len(case.tables)):
                client.close_source("op", source)
            out = reader.finish(client)
        inputs = case.tables * 2 if CATALOG[case.operator].one_stream else case.tables
        expected = run_sn(build(case.operator, case.params), inputs)
        assert out.num_rows == expected.num_rows, _first_difference(out, expected)
        assert out.equals(expected), _first_difference(out, expected)
    except BaseException:
        print(sidecar.log())  # noqa: T201 - the server's side of a failure
        raise
    finally:
        sidecar.stop()
    return sidecar


def _first_difference(out: pa.Table, expected: pa.Table) -> str:
    got, want = out.to_pylist(), expected.to_pylist()
    for i, (a, b) in enumerate(zip(got, want, strict=False)):
        if a != b:
            return f"first difference at offset {i}: {a} != {b}"
    return f"{len(got)} rows, expected {len(want)}"


@settings(
    max_examples=2,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
@pytest.mark.parametrize("name", sorted(CASES))
def test_kill_9_anywhere_loses_nothing(
    name: str, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    case = CASES[name]
    steps = _steps(case)
    crashes = data.draw(st.sets(st.integers(0, len(steps) - 1), min_size=1, max_size=2))
    kinds = sorted({steps[i][0] for i in crashes})
    data.draw(st.just(kinds), label="kinds of the requests killed after")
    _run(case, tmp_path_factory.mktemp(name), crashes)


def test_kill_9_after_every_kind_of_request(tmp_path: Path) -> None:
    """One crash after each kind of request: batch, watermark, reconfigure, read (with its
    commit), checkpoint, autoscale on and off."""
    case = CASES["scalejoin"]
    steps = _steps(case)
    firsts = {kind: i for i, (kind, _) in reversed(list(enumerate(steps)))}
    kinds = {"batch", "watermark", "reconfigure", "read", "checkpoint", "autoscale"}
    assert set(firsts) == {*kinds, "autoscale off"}
    _run(case, tmp_path, set(firsts.values()))


def test_periodic_checkpoints_keep_restart_and_disk_bounded(tmp_path: Path) -> None:
    """With checkpoints every 0.2 s, crashes land in their phases too; the state dir holds
    about a window of input and the uncommitted output, not the history."""
    case = Case("forward", {"columns": "v:int", "inputs": "1"}, CASES["forward"].tables)
    sidecar = _run(case, tmp_path, {5, 11}, interval_s=0.2)
    assert sidecar.runs == 3
    assert sidecar.state_bytes() < 200_000, sidecar.state_bytes()


def _feed(client: StretchClient, tables: list[pa.Table], first: int, stop: int) -> None:
    """Send rows ``first..stop`` of each source in chunks with batch ids and watermarks."""
    for start in range(first, stop, CHUNK):
        for source, table in enumerate(tables):
            part = table.slice(start, min(CHUNK, stop - start))
            client.add_batch("op", source, part, batch_id=start)
            client.watermark("op", source, int(part.column("ts")[-1].as_py()))


def test_restart_time_and_disk_follow_the_window_not_the_history(tmp_path: Path) -> None:
    """A five times longer committed history leaves the state dir and the restore as small."""
    tables = generate.scalejoin(6000, 1000.0, seed=4)
    sizes, restores = [], []
    for rows, folder in ((1200, "short"), (6000, "long")):
        (tmp_path / folder).mkdir()
        sidecar = Sidecar(tmp_path / folder / "state", tmp_path / folder)
        sidecar.start()
        try:
            with StretchClient(sidecar.url, token=TOKEN) as client:
                client.create_operator("op", "scalejoin", {"ws": 200})
                _feed(client, tables, 0, rows)
                reader = Reader()
                while (
                    reader.offset < client.status("op")["output"]["end_offset"] or not reader.tables
                ):
                    reader.read(client)
                client._request("POST", "/v1/operators/op/checkpoint")
            sidecar.kill()
            sizes.append(sidecar.state_bytes())
            sidecar.start()
            restores.append(sidecar.start_s[-1])
        finally:
            sidecar.stop()
    assert sizes[1] < 2 * sizes[0], sizes
    assert restores[1] < 3 * restores[0] + 1.0, restores


@pytest.mark.parametrize("where", ["checkpoint", "journal"])
def test_damaged_state_is_refused_and_never_served(tmp_path: Path, where: str) -> None:
    """Bytes flipped in the largest checkpoint file or in the middle of the journal: the
    operator is not restored, answers 503 naming the file, and serves no output; deleting
    it starts over. A cut-short last journal record (a crash mid-write) is dropped."""
    case = CASES["scalejoin"]
    sidecar = Sidecar(tmp_path / "state", tmp_path)
    sidecar.start()
    try:
        with StretchClient(sidecar.url, token=TOKEN) as client:
            client.create_operator("op", "scalejoin", {"ws": 300})
            _feed(client, case.tables, 0, 450)
            if where == "checkpoint":
                client._request("POST", "/v1/operators/op/checkpoint")
            _feed(client, case.tables, 450, 600)
        sidecar.kill()
        folder = (
            tmp_path / "state" / "operators" / "op" / where.replace("checkpoint", "checkpoints")
        )
        victim = max((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0xFF
        victim.write_bytes(bytes(data))
        sidecar.start()
        with StretchClient(sidecar.url, token=TOKEN) as client:
            answer = client._http.get(
                "/v1/operators/op/output", headers={"Authorization": f"Bearer {TOKEN}"}
            )
            assert answer.status_code == 503, answer.text
            assert str(victim.name) in answer.json()["detail"]
            assert "op" in client._http.get("/readyz").json()["failed"]
            client.delete_operator("op")
            client.create_operator("op", "scalejoin", {"ws": 300})
            assert client.status("op")["output"]["end_offset"] == 0
    finally:
        sidecar.stop()


def test_a_cut_short_last_record_is_dropped(tmp_path: Path) -> None:
    case = CASES["scalejoin"]
    sidecar = Sidecar(tmp_path / "state", tmp_path)
    sidecar.start()
    try:
        with StretchClient(sidecar.url, token=TOKEN) as client:
            client.create_operator("op", "scalejoin", {"ws": 300})
            _feed(client, case.tables, 0, 600)
        sidecar.kill()
        journal = tmp_path / "state" / "operators" / "op" / "journal"
        segment = max(journal.glob("*.log"))
        size = segment.stat().st_size
        with segment.open("r+b") as file:  # the last record loses its last 10 bytes
            file.truncate(size - 10)
        sidecar.start()
        with StretchClient(sidecar.url, token=TOKEN) as client:
            # The record cut short was the last watermark: the source's last batch is in.
            status = client.status("op")
            assert status["sources"][1]["tuples_in"] == 600
            assert status["sources"][1]["watermark"] is not None
        assert "dropped a cut-short last record" in sidecar.log()
    finally:
        sidecar.stop()


def test_durability_metrics_and_routes(tmp_path: Path) -> None:
    """The metrics show fsyncs, checkpoints, journal bytes and restores; a service without
    --state-dir refuses a checkpoint and says it keeps state in memory only."""
    case = CASES["forward"]
    sidecar = Sidecar(tmp_path / "state", tmp_path)
    sidecar.start()
    try:
        with StretchClient(sidecar.url, token=TOKEN) as client:
            client.create_operator("op", case.operator, case.params)
            _feed(client, case.tables, 0, 300)
            info = client._request("POST", "/v1/operators/op/checkpoint").json()
            assert info["bytes"] > 0 and info["pause_ms"] <= info["duration_ms"]
            listed = client._request("GET", "/v1/operators/op/checkpoints").json()
            assert [c["checkpoint"] for c in listed] == [info["checkpoint"]]
            text = client.metrics()
            assert "stretch_journal_fsync_seconds_count" in text
            assert 'stretch_checkpoint_bytes{operator="op"}' in text
            assert 'stretch_journal_bytes{operator="op"}' in text
        sidecar.kill()
        sidecar.start()
        with StretchClient(sidecar.url, token=TOKEN) as client:
            assert 'stretch_restore_seconds{operator="op"}' in client.metrics()
            assert client._http.get("/readyz").json()["state"] == str(tmp_path / "state")
    finally:
        sidecar.stop()


def test_kill_9_under_concurrent_load(tmp_path: Path) -> None:
    """Two clients push their sources at once, with checkpoints every 0.1 s, and the
    process is killed twice in the middle of requests (some answered, some not, some
    half-written). Each client resends from its last acknowledged batch; nothing is lost
    or doubled."""
    case = Case("scalejoin", {"ws": 300}, generate.scalejoin(15000, 1000.0, seed=8))
    batches = -(-15000 // CHUNK)
    interrupted = []
    sidecar = Sidecar(tmp_path / "state", tmp_path, checkpoint_interval_s=0.1)
    sidecar.start()
    acked = [0, 0]  # per source: the batches answered 202 so far
    try:
        with StretchClient(sidecar.url, token=TOKEN) as client:
            client.create_operator("op", "scalejoin", case.params)
        for crash in range(3):

            def push(source: int) -> None:
                table = case.tables[source]
                with StretchClient(sidecar.url, token=TOKEN) as client:
                    while acked[source] * CHUNK < table.num_rows:
                        part = table.slice(acked[source] * CHUNK, CHUNK)
                        try:
                            client.add_batch("op", source, part, batch_id=acked[source])
                        except (httpx.TransportError, StretchError):
                            return  # the process is gone: resend after the restart
                        acked[source] += 1

            threads = [threading.Thread(target=push, args=(s,)) for s in (0, 1)]
            for thread in threads:
                thread.start()
            if crash < 2:
                time.sleep(0.3 + 0.2 * crash)
                sidecar.kill()
                interrupted.append(min(acked) < batches)
            for thread in threads:
                thread.join(TIMEOUT_S)
            if crash < 2:
                sidecar.start()
        with StretchClient(sidecar.url, token=TOKEN) as client:
            for source in (0, 1):
                client.close_source("op", source)
            out = client.read_all("op", TIMEOUT_S)
        expected = run_sn(build("scalejoin", case.params), case.tables)
        assert out.equals(expected), _first_difference(out, expected)
        assert any(interrupted), "every kill came after the last batch: nothing was in flight"
    except BaseException:
        print(sidecar.log())  # noqa: T201 - the server's side of a failure
        raise
    finally:
        sidecar.stop()


def test_a_commit_waiting_for_its_rows_survives_a_checkpoint_and_a_restart(
    tmp_path: Path,
) -> None:
    """A reader's commit ahead of the output (as after a restart, while the rows are
    produced again) is kept by a checkpoint taken meanwhile: the journal before it is gone,
    and the restored log used to start where the rows had got to."""
    sidecar = Sidecar(tmp_path / "state", tmp_path, checkpoint_interval_s=3600)
    sidecar.start()
    try:
        with StretchClient(sidecar.url, token=TOKEN) as client:
            client.create_operator("ahead", "forward", {"columns": "v:int", "inputs": 1})
            client.add_batch("ahead", 0, pa.table({"ts": [1, 2, 3], "v": [1, 2, 3]}))
            client.commit("ahead", 5)  # two rows beyond the end: applied when they come
            client._request("POST", "/v1/operators/ahead/checkpoint")
        sidecar.kill()
        sidecar.start()
        with StretchClient(sidecar.url, token=TOKEN) as client:
            assert client.status("ahead")["output"]["committed_offset"] == 5
            client.add_batch("ahead", 0, pa.table({"ts": [4, 5, 6], "v": [4, 5, 6]}))
            client.close_source("ahead", 0)
            client.wait_finished("ahead", TIMEOUT_S)
            assert client.status("ahead")["output"]["start_offset"] == 5
            table, _ = client.output("ahead", 5)
            assert table.column("v").to_pylist() == [6]
    finally:
        sidecar.stop()


def test_a_shards_committed_cut_survives_a_checkpoint_and_a_restart(tmp_path: Path) -> None:
    """The cut a sharded reader committed is in the checkpoint (the journal before it gone)."""
    sidecar = Sidecar(tmp_path / "state", tmp_path, checkpoint_interval_s=3600)
    sidecar.start()
    try:
        with StretchClient(sidecar.url, token=TOKEN) as client:
            params = {"columns": "v:int", "inputs": 1}
            client.create_operator("cut", "forward", params, shard=(1, 3))
            client.commit("cut", 4, [7, 4, 2])
            client.commit("cut", 3, [6, 3, 2])  # earlier: the later cut is kept
            client._request("POST", "/v1/operators/cut/checkpoint")
        sidecar.kill()
        sidecar.start()
        with StretchClient(sidecar.url, token=TOKEN) as client:
            output = client.status("cut")["output"]
            assert (output["committed_offset"], output["committed_cut"]) == (4, [7, 4, 2])
    finally:
        sidecar.stop()
