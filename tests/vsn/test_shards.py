"""Sharding (docs/design.md "Sharding"): N pipelines, each owning the key groups g % N == i,
fed the same input, give together, merged by (ts, cause), exactly the reference output."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stretch.errors import OperatorError, ReconfigurationError
from stretch.generate import scalejoin
from stretch.merge import merge_outputs
from stretch.model.mapping import NOT_OWNED, Shard, default_mapping, validate_mapping
from stretch.model.sn import run_sn
from stretch.operators.catalog import build
from stretch.vsn import CAUSE, RuntimeSettings, setup
from tests.vsn.support import Step, no_thread_leak, run_schedule
from tests.vsn.test_vsn_operators import MAX_PARALLELISM, PARAMS, inputs_for

__all__ = ["no_thread_leak"]

OPERATORS = {**PARAMS, "forward": {"columns": "v:int", "inputs": "2", "keys": 4}}


def inputs(name: str) -> st.SearchStrategy[list[pa.Table]]:
    if name == "forward":
        return st.lists(st.integers(0, 50), max_size=30).map(
            lambda ts: (
                [pa.table({"ts": pa.array(sorted(ts), pa.int64()), "v": pa.array(ts, pa.int64())})]
                * 2
            )
        )
    return inputs_for(name)


@st.composite
def shard_schedules(draw: st.DrawFn, tables: list[pa.Table]) -> list[Step]:
    times = [t for table in tables for t in table.column("ts").to_pylist()] or [0]
    return [
        (draw(st.sampled_from(times)), draw(st.integers(1, MAX_PARALLELISM)), None)
        for _ in range(draw(st.integers(0, 3)))
    ]


@pytest.mark.parametrize("name", sorted(OPERATORS))
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_merged_shards_equal_the_reference(name: str, data: st.DataObject) -> None:
    op = build(name, OPERATORS[name])
    tables = data.draw(inputs(name))
    count = data.draw(st.integers(1, 4), label="shards")
    if name in ("scalejoin", "hedge", "forward") and count > OPERATORS[name]["keys"]:
        count = int(OPERATORS[name]["keys"])
    parts = []
    for index in range(count):
        m = data.draw(st.integers(1, MAX_PARALLELISM), label=f"m of shard {index}")
        schedule = data.draw(shard_schedules(tables), label=f"schedule of shard {index}")
        out, _ = run_schedule(
            op,
            tables,
            m,
            MAX_PARALLELISM,
            schedule,
            settings=RuntimeSettings(shard=Shard(index, count)),
        )
        assert out.column_names[-1] == CAUSE
        parts.append(out)
    merged, _ = merge_outputs(parts)
    assert merged.equals(run_sn(op, tables))


def test_shards_split_a_join_comparisons_and_stored_tuples() -> None:
    op = build("scalejoin", {"ws": 1000, "keys": 16})
    left = pa.table({"ts": pa.array(range(200), pa.int64()), "x": range(200), "y": [1.0] * 200})
    right = pa.table(
        {
            "ts": pa.array(range(200), pa.int64()),
            "a": range(200),
            "b": [1.0] * 200,
            "c": [0.0] * 200,
            "d": [True] * 200,
        }
    )
    comparisons = []
    for index in range(2):
        with setup(op, 2, 2, settings=RuntimeSettings(shard=Shard(index, 2))) as pipeline:
            pipeline.add(0, left)
            pipeline.add(1, right)
            pipeline.close()
            assert pipeline.join(60)
            comparisons.append(pipeline.load().comparisons)
    with setup(op, 2, 2) as whole:
        whole.add(0, left)
        whole.add(1, right)
        whole.close()
        assert whole.join(60)
        total = whole.load().comparisons
    assert sum(comparisons) == total
    assert max(comparisons) <= 0.65 * total


def test_a_shard_maps_only_its_groups_round_robin() -> None:
    shard = Shard(1, 3)
    mapping = default_mapping(12, 2, shard)
    assert mapping == [NOT_OWNED, 0, NOT_OWNED, NOT_OWNED, 1, NOT_OWNED] * 2
    assert mapping[7] == 0 and mapping[10] == 1
    # another shard's entries are ignored; its own are checked
    assert validate_mapping([5] * 11 + [1], 12, 2, Shard(11, 12)) == [NOT_OWNED] * 11 + [1]
    with pytest.raises(ReconfigurationError, match="key group 4"):
        validate_mapping([0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0], 12, 2, shard)


def test_fewer_keys_than_shards_is_refused() -> None:
    op = build("scalejoin", {"ws": 10, "keys": 2})
    with pytest.raises(OperatorError, match="over 2 keys, fewer than the 3 shards"):
        setup(op, 1, 1, settings=RuntimeSettings(shard=Shard(0, 3)))
    with pytest.raises(OperatorError, match="need 0 <= index < count"):
        Shard(3, 3)


@pytest.mark.parametrize("count", [2, 3])
def test_band_partitioned_shards_merge_to_the_reference(count: int) -> None:
    """``partition=band``: each shard stores the blocks of its keys; merged, run_sn's rows."""
    op = build("scalejoin", {"ws": 300, "keys": 8, "partition": "band"})
    tables = scalejoin(1500, 500.0, seed=4)
    parts = []
    for index in range(count):
        schedule: list[Step] = [(1000, 1 + index % 2, None)]
        out, _ = run_schedule(
            op,
            tables,
            2,
            MAX_PARALLELISM,
            schedule,
            settings=RuntimeSettings(shard=Shard(index, count)),
        )
        parts.append(out)
    merged, _ = merge_outputs(parts)
    expected = run_sn(op, tables)
    assert expected.num_rows > 0
    assert merged.equals(expected)
