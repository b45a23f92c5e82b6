"""``stretch pipeline`` reads each directory in file name order, whatever the mtimes.

Spark's own file source takes files by modification time, and files of one instant in any
order: a later file read first made the others' rows late, by luck. Here the same tied
inputs (about 5 rows per ms, ties cut across files and micro-batches, two files and so two
partitions per micro-batch) pass through ONE sidecar with every file of a directory
sharing one mtime, created in shuffled orders, and with mtimes in reverse name order:
each run equals ``stretch replay`` row for row. A directory whose names are out of event
time order fails with one line naming the file and the options that accept it.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stretch.cli import main
from stretch.spark.pipeline import read_output
from tests.spark.conftest import TOKEN
from tests.spark.test_pipeline_shards import tied_streams

pytestmark = pytest.mark.spark

FILES = 4


def write_parts(table: pa.Table, directory: Path, order: list[int], mtimes: list[int]) -> None:
    """``table`` cut by row count into ``FILES`` parts, created in ``order``."""
    directory.mkdir(parents=True)
    step = -(-table.num_rows // FILES)
    for k in order:
        path = directory / f"part-{k:05d}.parquet"
        pq.write_table(table.slice(k * step, step), path)
        os.utime(path, (mtimes[k], mtimes[k]))


def test_files_of_one_mtime_in_any_creation_order_equal_replay(
    spark: object, sidecar: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    streams = tied_streams(2000)
    for side, table in zip("lr", streams, strict=True):
        pq.write_table(table, tmp_path / f"{side}.parquet")
    assert main(["replay", "scalejoin", "--param", "ws=20", "--input", str(tmp_path / "l.parquet"),
                 "--input", str(tmp_path / "r.parquet"),
                 "--output", str(tmp_path / "replay.parquet")]) == 0  # fmt: skip
    expected = pq.read_table(tmp_path / "replay.parquet")
    assert expected.num_rows > 1000
    (tmp_path / "token").write_text(TOKEN)
    same = [1_000_000] * FILES
    reverse = [1_000_000 + FILES - k for k in range(FILES)]
    shuffled = random.Random(4).sample(range(FILES), FILES)
    runs = [(list(range(FILES)), same), (shuffled, same), (shuffled[::-1], reverse)]
    for run, (order, mtimes) in enumerate(runs):
        inputs = []
        for side, table in zip("lr", streams, strict=True):
            write_parts(table, tmp_path / f"run{run}" / side, order, mtimes)
            inputs += ["--input", str(tmp_path / f"run{run}" / side)]
        assert main(["pipeline", "scalejoin", "--param", "ws=20", *inputs,
                     "--output", str(tmp_path / f"run{run}" / "out"), "--url", sidecar,
                     "--token-file", str(tmp_path / "token"), "--name", f"order-{run}",
                     "--parallelism", "2", "--files-per-trigger", "2"]) == 0  # fmt: skip
        assert "(files in name order)" in capsys.readouterr().out
        out = read_output(spark, tmp_path / f"run{run}" / "out")  # type: ignore[arg-type]
        assert out.cast(expected.schema).equals(expected), f"run {run}: order {order}"


def test_a_late_file_is_named_with_the_options_that_accept_it(
    spark: object, sidecar: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = pa.table({"ts": pa.array(range(0, 3000, 10), pa.int64()), "user": ["u"] * 300,
                      "tweet": ["a b"] * 300})  # fmt: skip
    pq.write_table(table, tmp_path / "tweets.parquet")
    (tmp_path / "in").mkdir()
    # Names out of event-time order: part-1 (ts 1500..2490) is read first, then part-2
    # (ts 1000..1490: 1490 ms late), then part-3 (ts 0..990 and 2500..2990: 2490 ms late,
    # later than the batch refused first).
    parts = {"part-1": [(150, 250)], "part-2": [(100, 150)], "part-3": [(0, 100), (250, 300)]}
    for name, slices in parts.items():
        rows = pa.concat_tables([table.slice(lo, hi - lo) for lo, hi in slices])
        pq.write_table(rows, tmp_path / "in" / f"{name}.parquet")
    (tmp_path / "token").write_text(TOKEN)
    args = ["pipeline", "wordcount", "--param", "wa=500", "--param", "ws=1000", "--input",
            str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--url", sidecar,
            "--token-file", str(tmp_path / "token"), "--name", "late-files",
            "--files-per-trigger", "1"]  # fmt: skip
    assert main(args) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "row 1 has ts 1000, before the released watermark 2490" in line
    assert f"row 1 came from {tmp_path / 'in' / 'part-2.parquet'} (micro-batch 1)" in line
    assert "run again with --allowed-lateness-ms 2490 (the least under which no" in line
    assert "this row is 1490 ms late" in line
    assert "under a new --name, --checkpoint and --output" in line
    assert "or drop them with --late-rows drop" in line

    # Run again as the line says: the reorder buffer waits for both late files.
    args[args.index("late-files")] = "late-files-2"
    args[args.index(str(tmp_path / "out"))] = str(tmp_path / "out2")
    assert main([*args, "--allowed-lateness-ms", "2490"]) == 0
    assert main(["replay", "wordcount", "--param", "wa=500", "--param", "ws=1000", "--input",
                 str(tmp_path / "tweets.parquet"),
                 "--output", str(tmp_path / "replay.parquet")]) == 0  # fmt: skip
    expected = pq.read_table(tmp_path / "replay.parquet")
    out = read_output(spark, tmp_path / "out2")  # type: ignore[arg-type]
    assert expected.num_rows > 0
    assert out.cast(expected.schema).equals(expected)
