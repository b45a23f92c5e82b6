"""Sharding over real sidecar processes: the merged output of N shards is one sidecar's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from stretch.client import ServiceError, StretchClient
from stretch.errors import InputError
from stretch.merge import Cut
from stretch.model.sn import run_sn
from stretch.operators.catalog import build
from stretch.sharded import ShardedClient, connect
from tests.api.conftest import TOKEN
from tests.api.sidecar import Sidecar


@pytest.fixture(scope="module")
def sidecars(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Sidecar]]:
    started = []
    for k in range(3):
        root = tmp_path_factory.mktemp(f"shard{k}")
        sidecar = Sidecar(root / "state", root, checkpoint_interval_s=3600)
        sidecar.start()
        started.append(sidecar)
    yield started
    for sidecar in started:
        sidecar.stop()


def join_inputs(rows: int, seed: int) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, rows // 4, rows))  # about 4 rows per ms: heavy ties
    left = pa.table(
        {"ts": ts, "x": rng.integers(0, 40, rows), "y": rng.integers(0, 40, rows).astype(float)}
    )
    right = pa.table(
        {
            "ts": np.sort(rng.integers(0, rows // 4, rows)),
            "a": rng.integers(0, 40, rows),
            "b": rng.integers(0, 40, rows).astype(float),
            "c": rng.random(rows),
            "d": rng.integers(0, 2, rows).astype(bool),
        }
    )
    return [left, right]


def finished_join(
    client: ShardedClient, name: str, tables: list[pa.Table], params: dict[str, int]
) -> None:
    """Create ``name``, a scalejoin, send it all of ``tables`` and wait for its output."""
    client.create_operator(name, "scalejoin", params)
    for source, table in enumerate(tables):
        client.add_batch(name, source, table)
        client.close_source(name, source)
    client.wait_finished(name)


def feed(client: StretchClient | ShardedClient, name: str, tables: list[pa.Table]) -> pa.Table:
    """Unsorted batches into every source, reading and committing as rows come."""
    rng = np.random.default_rng(7)
    parts: list[pa.Table] = []
    offset = 0
    for chunk in np.array_split(np.arange(tables[0].num_rows), 5):
        for source, table in enumerate(tables):
            batch = table.take(pa.array(chunk))
            client.add_batch(name, source, batch.take(pa.array(rng.permutation(len(chunk)))))
        table, offset = client.output(name, offset, max_rows=500, wait_ms=100)
        parts.append(table)
        client.commit(name, offset)
    for source in range(len(tables)):
        client.close_source(name, source)
    parts.append(client.read_all(name, timeout_s=60, offset=offset))
    return pa.concat_tables(parts)


def test_two_shards_give_one_sidecars_output_with_half_the_comparisons(
    sidecars: list[Sidecar],
) -> None:
    tables = join_inputs(2000, 1)
    params = {"ws": 20, "keys": 16}
    with ShardedClient([s.url for s in sidecars[:2]], token=TOKEN) as sharded:
        sharded.create_operator("sj", "scalejoin", params, parallelism=2)
        merged = feed(sharded, "sj", tables)
        shard_comparisons = [
            sum(i["comparisons"] for i in s["instances"]) for s in sharded.status("sj")["shards"]
        ]
        status = sharded.status("sj")
        statuses = [s["shard"] for s in status["shards"]]
        assert status["state_bytes"] == sum(s["state_bytes"] for s in status["shards"]) > 0
        sharded.delete_operator("sj")
    with StretchClient(sidecars[2].url, token=TOKEN) as single:
        single.create_operator("sj", "scalejoin", params, parallelism=1)
        alone = feed(single, "sj", tables)
        comparisons = sum(i["comparisons"] for i in single.status("sj")["instances"])
        single.delete_operator("sj")
    reference = run_sn(build("scalejoin", params), tables)
    assert alone.equals(reference)
    assert merged.equals(reference)
    assert sum(shard_comparisons) == comparisons
    assert max(shard_comparisons) <= 0.65 * comparisons
    assert statuses == [{"index": 0, "count": 2}, {"index": 1, "count": 2}]


def test_three_shards_of_wordcount_split_the_output_rows(sidecars: list[Sidecar]) -> None:
    rng = np.random.default_rng(3)
    words = ["a", "b", "c", "d", "e", "f", "g", "h"]
    n = 600
    tweets = pa.table(
        {
            "ts": np.sort(rng.integers(0, 3000, n)),
            "user": [f"u{i % 5}" for i in range(n)],
            "tweet": [" ".join(rng.choice(words, 3)) for _ in range(n)],
        }
    )
    params = {"wa": 100, "ws": 300}
    with connect(",".join(s.url for s in sidecars), token=TOKEN) as sharded:
        assert isinstance(sharded, ShardedClient)
        sharded.create_operator("wc", "wordcount", params, parallelism=1)
        sharded.reconfigure("wc", parallelism=2)
        merged = feed(sharded, "wc", [tweets])
        rows = [int(s["output"]["end_offset"]) for s in sharded.status("wc")["shards"]]
        sharded.delete_operator("wc")
    assert merged.equals(run_sn(build("wordcount", params), [tweets]))
    assert sum(rows) == merged.num_rows
    assert max(rows) <= 0.65 * merged.num_rows


def test_bad_shards_are_refused_naming_why(sidecars: list[Sidecar], tmp_path: Path) -> None:
    with StretchClient(sidecars[0].url, token=TOKEN) as client:
        with pytest.raises(ServiceError, match="shard index 2 must be below its count 2") as bad:
            client.create_operator("x", "wordcount", shard=(2, 2))
        assert bad.value.status == 422
        with pytest.raises(ServiceError, match="over 2 keys, fewer than the 3 shards") as few:
            client.create_operator("x", "scalejoin", {"keys": 2}, shard=(0, 3))
        assert few.value.status == 422
        assert all(o["name"] != "x" for o in client.operators())
    with ShardedClient([sidecars[0].url, sidecars[1].url], token=TOKEN) as sharded:
        sharded.create_operator("f", "forward", {"columns": "v:int", "inputs": "1"})
        with pytest.raises(InputError, match="not a position this client read to"):
            sharded.output("f", 5)
        sharded.delete_operator("f")
    with pytest.raises(ValueError, match="named twice"):
        connect(f"{sidecars[0].url},{sidecars[0].url}")


def test_a_new_client_resumes_from_the_committed_offset(sidecars: list[Sidecar]) -> None:
    tables = join_inputs(1200, 5)
    params = {"ws": 20, "keys": 16}
    urls = [s.url for s in sidecars[:2]]
    with ShardedClient(urls, token=TOKEN) as first:
        finished_join(first, "resume", tables, params)
        head, offset = first.output("resume", 0, max_rows=300)
        first.commit("resume", offset)
    assert head.num_rows == offset == 300
    with ShardedClient(urls, token=TOKEN) as second:
        tail = second.read_all("resume", offset=offset, commit=False)
        with pytest.raises(InputError, match=r"offset last committed \(300\)"):
            second.output("resume", 299)
        second.delete_operator("resume")
    reference = run_sn(build("scalejoin", params), tables)
    assert pa.concat_tables([head, tail]).equals(reference)


def test_a_new_client_resumes_at_commits_the_shards_hold_for_rows_to_come(
    sidecars: list[Sidecar],
) -> None:
    """A restarted shard produces its output again and applies a commit once the rows are
    there; meanwhile its ``committed_offset`` says where it was, so a new client resumes
    (before, the sum of the shards' start offsets did not match and it was refused)."""
    tables = join_inputs(600, 11)
    urls = [s.url for s in sidecars[:2]]
    with ShardedClient(urls, token=TOKEN) as first:
        first.create_operator("ahead", "scalejoin", {"ws": 20, "keys": 16})
        for shard, offset in zip(first.shards, (3, 4), strict=True):
            shard.commit("ahead", offset)  # no rows yet: each waits for its rows
        output = first.status("ahead")["output"]
        assert (output["start_offset"], output["committed_offset"]) == (0, 7)
        with ShardedClient(urls, token=TOKEN) as early:  # resumes before the rows exist
            assert early._cut("ahead", 7) == Cut((3, 4))
        for source, table in enumerate(tables):
            first.add_batch("ahead", source, table)
            first.close_source("ahead", source)
        ends = Cut(tuple(s["output"]["end_offset"] for s in first.wait_finished("ahead")["shards"]))
        expected, _ = first.read_between("ahead", Cut((3, 4)), ends)
    with ShardedClient(urls, token=TOKEN) as second:
        assert second.read_all("ahead", offset=7, commit=False).equals(expected)
        second.delete_operator("ahead")


def test_a_read_between_cuts_holds_only_their_rows(sidecars: list[Sidecar]) -> None:
    """An empty range of one shard adds none of the rows its log holds past the cut."""
    tables = join_inputs(600, 9)
    with ShardedClient([s.url for s in sidecars[:2]], token=TOKEN) as sharded:
        sharded.create_operator("cuts", "scalejoin", {"ws": 20, "keys": 16})
        for source, table in enumerate(tables):
            sharded.add_batch("cuts", source, table)
            sharded.close_source("cuts", source)
        ends = Cut(
            tuple(s["output"]["end_offset"] for s in sharded.wait_finished("cuts")["shards"])
        )
        assert min(ends.shards) > 0
        empty, _ = sharded.read_between("cuts", Cut.start(2), Cut.start(2))
        only_first, shards = sharded.read_between("cuts", Cut.start(2), Cut((ends.shards[0], 0)))
        whole, _ = sharded.read_between("cuts", Cut.start(2), ends)
        sharded.delete_operator("cuts")
    assert empty.num_rows == 0
    assert only_first.num_rows == ends.shards[0]
    assert set(shards) == {0}
    assert whole.equals(run_sn(build("scalejoin", {"ws": 20, "keys": 16}), tables))


def test_a_batch_resent_after_a_partial_send_is_taken_where_it_was_missing(
    sidecars: list[Sidecar],
) -> None:
    rows = pa.table({"ts": [1, 2, 3], "v": [1, 2, 3]})
    with ShardedClient([s.url for s in sidecars[:2]], token=TOKEN) as sharded:
        sharded.create_operator("partial", "forward", {"columns": "v:int", "inputs": "1"})
        sharded.shards[0].add_batch("partial", 0, rows, batch_id=1)  # shard 1 missed it
        assert sharded.add_batch("partial", 0, rows, batch_id=1) == (3, False)
        assert sharded.add_batch("partial", 0, rows, batch_id=1) == (0, True)
        tuples_in = [s["sources"][0]["tuples_in"] for s in sharded.status("partial")["shards"]]
        sharded.delete_operator("partial")
    assert tuples_in == [3, 3]


def test_a_new_client_resumes_exactly_after_a_commit_that_failed_on_a_shard(
    sidecars: list[Sidecar],
) -> None:
    """The commit reached shard 0 only, then the reader died and shard 0 was killed.

    Shard 0 kept the whole cut (journaled, so across its restart too), so a new client
    resumes at it: every row once. Before, it resumed at the shards' mixed offsets.
    """
    tables = join_inputs(1200, 13)
    params = {"ws": 20, "keys": 16}
    urls = [s.url for s in sidecars[:2]]
    with ShardedClient(urls, token=TOKEN) as first:
        finished_join(first, "failed", tables, params)
        head, offset = first.output("failed", 0, max_rows=300)
        first.commit("failed", offset)
        committed = first.committed("failed").shards
        middle, offset = first.output("failed", offset, max_rows=400)
        cut = first._cut("failed", offset).shards
        assert all(c > before for c, before in zip(cut, committed, strict=True))
        first.shards[0].commit("failed", cut[0], cut)  # shard 1 never got it
    sidecars[0].kill()
    sidecars[0].start()
    with ShardedClient(urls, token=TOKEN) as second:
        status = second.status("failed")["shards"]
        assert [s["output"]["committed_cut"] for s in status] == [list(cut), list(committed)]
        assert second.committed("failed") == Cut(cut)
        tail = second.read_all("failed", timeout_s=60, offset=offset)
        second.delete_operator("failed")
    reference = run_sn(build("scalejoin", params), tables)
    assert pa.concat_tables([head, middle, tail]).equals(reference)


def test_a_commit_cut_is_refused_unless_it_fits_the_shard(sidecars: list[Sidecar]) -> None:
    with StretchClient(sidecars[0].url, token=TOKEN) as plain:
        plain.create_operator("unsharded", "forward", {"columns": "v:int", "inputs": "1"})
        with pytest.raises(ServiceError, match="is not a shard") as refused:
            plain.commit("unsharded", 0, [0])
        assert refused.value.status == 400
        plain.delete_operator("unsharded")
    with ShardedClient([s.url for s in sidecars[:2]], token=TOKEN) as sharded:
        sharded.create_operator("cutcheck", "forward", {"columns": "v:int", "inputs": "1"})
        shard = sharded.shards[1]
        for bad in ([5], [0, 5, 0], [5, 4]):
            with pytest.raises(ServiceError, match=r"shard 1 of 2: a commit's cut has 2 offsets"):
                shard.commit("cutcheck", 5, bad)
        shard.commit("cutcheck", 5, [3, 5])
        assert sharded.status("cutcheck")["shards"][1]["output"]["committed_cut"] == [3, 5]
        sharded.delete_operator("cutcheck")
