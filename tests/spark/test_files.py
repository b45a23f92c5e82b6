"""The ``stretch-files`` source's plan (no Spark session): files in name order, whatever mtimes."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles, ReadMaxRows

from stretch.errors import InputError, SchemaError
from stretch.model.schema import Schema
from stretch.spark.files import (
    FILE,
    ROWS_PER_TASK,
    FilePart,
    OrderedFiles,
    OrderedFilesReader,
    batch_sizes,
    files_per_batch,
    input_files,
    spark_schema,
)

SCHEMA = Schema.of(v="int")


def write_parts(directory: Path, names: list[str]) -> None:
    """One small file per name, every one with the same modification time."""
    directory.mkdir()
    for k, name in enumerate(names):
        path = directory / name
        pq.write_table(pa.table({"ts": [k], "v": [k * 10]}), path)
        os.utime(path, (1_000_000, 1_000_000))


def test_files_are_taken_in_name_order_within_the_limit(tmp_path: Path) -> None:
    names = ["part-00003.parquet", "part-00000.parquet", "part-00002.parquet", "part-00001.parquet"]
    write_parts(tmp_path / "in", names)
    (tmp_path / "in" / "_SUCCESS").write_text("")
    (tmp_path / "in" / ".part-00000.parquet.crc").write_text("")
    (tmp_path / "in" / "_spark_metadata").mkdir()
    assert [p.name for p in input_files(tmp_path / "in")] == sorted(names)

    reader = OrderedFilesReader(tmp_path / "in", spark_schema(SCHEMA), max_files=3)
    assert reader.getDefaultReadLimit() == ReadMaxFiles(3)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxFiles(3))
    assert end == {FILE: "part-00002.parquet"}
    (part,) = reader.partitions(start, end)  # three one-row files: one read task
    assert isinstance(part, FilePart)
    assert [Path(p).name for p in part.paths] == sorted(names)[:3]
    last = reader.latestOffset(end, ReadMaxFiles(3))
    assert last == {FILE: "part-00003.parquet"}
    assert reader.latestOffset(last, ReadMaxFiles(3)) == last  # nothing new


def test_a_micro_batch_takes_whole_files_up_to_its_rows() -> None:
    rows = [3, 4, 10, 0, 2, 5]
    assert files_per_batch(rows, None, 7) == 2  # 3 + 4
    assert files_per_batch(rows, None, 6) == 1  # 3; 3 + 4 is over
    assert files_per_batch(rows, None, 2) == 1  # one file, however many rows
    assert files_per_batch(rows, 1, 100) == 1  # both limits count
    assert files_per_batch(rows, None, None) == 6
    assert files_per_batch([], None, 7) == 0
    assert batch_sizes(rows, None, 7) == [2, 1, 3]  # (3 4) (10) (0 2 5)
    assert batch_sizes(rows, 2, 7) == [2, 1, 2, 1]
    assert batch_sizes(rows, 4, None) == [4, 2]


def test_a_read_task_takes_consecutive_files_up_to_its_rows(tmp_path: Path) -> None:
    # a read task groups files as a micro-batch does under a rows limit (batch_sizes)
    assert batch_sizes([3, 4, 10, 0, 2, 5], None, 7) == [2, 1, 3]  # (3 4) (10) (0 2 5)
    assert batch_sizes([9, 1, 1], None, 7) == [1, 2]  # a large file alone
    assert batch_sizes([1] * 5, None, 100) == [5]
    assert batch_sizes([], None, 7) == []

    directory = tmp_path / "in"
    directory.mkdir()
    sizes = {"a": ROWS_PER_TASK - 1, "b": 1, "c": ROWS_PER_TASK + 5, "d": 2, "e": 3}
    for name, n in sizes.items():
        pq.write_table(pa.table({"ts": range(n), "v": [0] * n}), directory / f"{name}.parquet")
    reader = OrderedFilesReader(directory, spark_schema(SCHEMA), max_files=None)
    start = reader.initialOffset()
    parts = reader.partitions(start, reader.latestOffset(start, ReadAllAvailable()))
    assert [[Path(p).stem for p in part.paths] for part in parts if isinstance(part, FilePart)] == [
        ["a", "b"],
        ["c"],
        ["d", "e"],
    ]
    rows = [sum(b.num_rows for b in reader.read(part)) for part in parts]
    assert rows == [ROWS_PER_TASK, ROWS_PER_TASK + 5, 5]


def test_the_rows_limit_reads_footers_only_as_far_as_the_batch_goes(tmp_path: Path) -> None:
    directory = tmp_path / "in"
    directory.mkdir()
    for name, n in [("a", 3), ("b", 4), ("c", 10), ("d", 1)]:
        pq.write_table(
            pa.table({"ts": list(range(n)), "v": [0] * n}), directory / f"{name}.parquet"
        )
    (directory / "z.parquet").write_text("not parquet")
    options = {"path": str(directory), "maxRowsPerTrigger": "8"}
    reader = OrderedFiles(options).streamReader(spark_schema(SCHEMA))
    assert isinstance(reader, OrderedFilesReader)
    assert reader.getDefaultReadLimit() == ReadMaxRows(8)
    first = reader.latestOffset(reader.initialOffset(), ReadMaxRows(8))
    assert first == {FILE: "b.parquet"}  # 3 + 4 rows; c's 10 would pass 8
    second = reader.latestOffset(first, ReadMaxRows(8))
    assert second == {FILE: "c.parquet"}  # alone: a file is never split
    with pytest.raises(InputError, match=r"z\.parquet: cannot read it as Parquet"):
        reader.latestOffset(second, ReadMaxRows(8))  # d's 1 row, then z's footer
    assert reader.latestOffset(second, ReadAllAvailable()) == {FILE: "z.parquet"}


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_a_bad_limit_option_is_named(tmp_path: Path, value: str) -> None:
    write_parts(tmp_path / "in", ["a.parquet"])
    for option in ("maxRowsPerTrigger", "maxFilesPerTrigger"):
        source = OrderedFiles({"path": str(tmp_path / "in"), option: value})
        with pytest.raises(InputError, match=f"option '{option}' must be an integer >= 1"):
            source.streamReader(spark_schema(SCHEMA))


def test_available_now_stops_at_the_files_present_at_its_start(tmp_path: Path) -> None:
    write_parts(tmp_path / "in", ["a.parquet", "b.parquet"])
    reader = OrderedFilesReader(tmp_path / "in", spark_schema(SCHEMA), max_files=None)
    assert reader.getDefaultReadLimit() == ReadAllAvailable()
    reader.prepareForTriggerAvailableNow()
    pq.write_table(pa.table({"ts": [9], "v": [9]}), tmp_path / "in" / "c.parquet")
    assert reader.latestOffset(reader.initialOffset(), ReadAllAvailable()) == {FILE: "b.parquet"}


def test_a_file_is_read_checked_and_cast_like_replays_inputs(tmp_path: Path) -> None:
    path = tmp_path / "p.parquet"
    pq.write_table(
        pa.table(
            {
                "extra": ["x", "y"],
                "v": pa.array([1, 2], pa.int32()),
                "ts": pa.array([1500, 2500], pa.timestamp("us", "UTC")),
            }
        ),
        path,
    )
    reader = OrderedFilesReader(tmp_path, spark_schema(SCHEMA), max_files=None)
    (batch,) = list(reader.read(FilePart((str(path),))))
    assert batch.schema.names == ["ts", "v"]
    assert batch.column(0).to_pylist() == [1, 2]  # us floored to ms
    assert batch.column(1).type == pa.int64()

    pq.write_table(pa.table({"ts": [1], "v": ["text"]}), path)
    with pytest.raises(SchemaError, match=r"p\.parquet: row 1, column 'v': expected int"):
        list(reader.read(FilePart((str(path),))))


def test_the_spark_schema_maps_the_sidecars_types() -> None:
    schema = spark_schema(Schema.of(a="int", b="float", c="bool", d="str"))
    assert [f.dataType.simpleString() for f in schema.fields] == [
        "bigint",
        "bigint",
        "double",
        "boolean",
        "string",
    ]
    assert np.array_equal(schema.fieldNames(), ["ts", "a", "b", "c", "d"])
