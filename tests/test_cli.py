"""The ``stretch`` command: replay and generate, and one clear line for each bad input."""

from __future__ import annotations

import logging
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import IO, Any, cast

import httpx
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from stretch import cli, external_sort, generate
from stretch import io as stretch_io
from stretch.bench import BENCHMARKS
from stretch.cli import main
from stretch.errors import InputError
from stretch.io import read_table, write_table
from stretch.model.sn import run_sn
from stretch.operators.catalog import CATALOG, build
from stretch.progress import ReplayProgress
from stretch.vsn import Pipeline, runtime


def stretch(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the real command in a subprocess, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "stretch.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def assert_clean_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture(scope="module")
def scalejoin_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("scalejoin")
    left, right = folder / "l.csv", folder / "r.csv"
    result = stretch(
        "generate",
        "scalejoin",
        "--rows",
        "300",
        "--rate",
        "50",
        "--seed",
        "3",
        "--output",
        str(left),
        "--output",
        str(right),
    )
    assert result.returncode == 0, result.stderr
    return left, right


def test_replay_scalejoin_writes_the_reference_output(
    scalejoin_files: tuple[Path, Path], tmp_path: Path
) -> None:
    left, right = scalejoin_files
    out = tmp_path / "o.csv"
    result = stretch(
        "replay",
        "scalejoin",
        "--input",
        str(left),
        "--input",
        str(right),
        "--output",
        str(out),
        "--param",
        "ws=2000",
    )
    assert result.returncode == 0, result.stderr
    written = read_table(out)
    assert written.column_names == ["ts", "x", "y", "a", "b", "c", "d"]
    expected = run_sn(build("scalejoin", {"ws": 2000}), [read_table(left), read_table(right)])
    assert written.num_rows == expected.num_rows > 0
    assert written.to_pylist() == expected.to_pylist()


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet", ".arrow"])
def test_replay_formats_and_parallelism(
    tmp_path: Path, suffix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tweets = tmp_path / f"t{suffix}"
    assert (
        main(["generate", "tweets", "--rows", "200", "--rate", "5", "--output", str(tweets)]) == 0
    )
    outputs = []
    for parallelism in ("1", "3"):
        out = tmp_path / f"o{parallelism}{suffix}"
        assert (
            main(
                [
                    "replay",
                    "wordcount",
                    "--input",
                    str(tweets),
                    "--parallelism",
                    parallelism,
                    "--param",
                    "ws=20000",
                    "--param",
                    "wa=10000",
                    "--output",
                    str(out),
                ]
            )
            == 0
        )
        outputs.append(read_table(out))
    assert outputs[0].num_rows > 0
    assert outputs[0].equals(outputs[1])
    capsys.readouterr()


def test_replay_to_stdout_and_hedge_from_one_file(tmp_path: Path) -> None:
    trades = tmp_path / "trades.parquet"
    assert (
        stretch(
            "generate", "hedge", "--rows", "200", "--rate", "20", "--output", str(trades)
        ).returncode
        == 0
    )
    result = stretch("replay", "hedge", "--input", str(trades), "--param", "ws=5000")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "ts,l_symbol,l_price,r_symbol,r_price"


def test_csv_on_stdout_reads_back_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Empty strings and carriage returns are quoted: unquoted they read as null, or split.

    The text is the same, byte for byte, as ``--output`` writes to a .csv file.
    """
    source = tmp_path / "in.parquet"
    texts = ["", "a\rb", "x,y", 'say "hi"', "two\nlines", "plain"]
    write_table(pa.table({"ts": list(range(len(texts))), "s": texts}), str(source))
    assert main(["replay", "forward", "--input", str(source)]) == 0
    written = tmp_path / "out.csv"
    written.write_bytes(capsys.readouterr().out.encode())
    assert read_table(str(written)).column("s").to_pylist() == texts
    to_file = tmp_path / "file.csv"
    assert main(["replay", "forward", "--input", str(source), "--output", str(to_file)]) == 0
    assert to_file.read_bytes() == written.read_bytes()


def test_a_param_given_twice_is_refused(scalejoin_files: tuple[Path, Path]) -> None:
    left, right = scalejoin_files
    result = stretch(
        "replay", "scalejoin", "--input", str(left), "--input", str(right),
        "--param", "ws=1", "--param", "ws=300000",
    )  # fmt: skip
    assert_clean_error(result, "--param ws is given twice")
    result = stretch("replay", "scalejoin", "--input", str(left), "--max-parallelism", "0")
    assert_clean_error(result, "--max-parallelism must be in 1..64, got 0")


def test_replay_loads_a_module_of_operators(tmp_path: Path) -> None:
    """``--operators MODULE`` registers a user's operators for replay, as for serve."""
    (tmp_path / "my_ops.py").write_text(
        "import stretch\n"
        "stretch.register('copy_v', lambda params: stretch.build("
        "'forward', {'columns': 'v:int', 'inputs': '1'}))\n"
    )
    source = tmp_path / "in.csv"
    source.write_text("ts,v\n1,7\n2,8\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "stretch.cli", "replay", "copy_v", "--operators", "my_ops",
         "--input", str(source)],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["ts,v", "1,7", "2,8"]


def test_forward_infers_columns(tmp_path: Path) -> None:
    a, b, out = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "o.csv"
    a.write_text("ts,v\n1,10\n5,50\n")
    b.write_text("ts,v\n1,11\n3,31\n")
    assert (
        stretch(
            "replay", "forward", "--input", str(a), "--input", str(b), "--output", str(out)
        ).returncode
        == 0
    )
    assert read_table(out).to_pylist() == [
        {"ts": 1, "v": 10},
        {"ts": 1, "v": 11},
        {"ts": 3, "v": 31},
        {"ts": 5, "v": 50},
    ]


def test_forward_widens_narrow_and_encoded_columns(tmp_path: Path) -> None:
    data, out = tmp_path / "a.parquet", tmp_path / "o.parquet"
    table = pa.table(
        {
            "ts": [1, 2, 3],
            "f": pa.array([0.25, 1.5, -2.0], pa.float32()),
            "i": pa.array([7, -8, 9], pa.int32()),
            "name": pa.array(["a", "b", "a"]).dictionary_encode(),
            "big": pa.array(["x", "", "z"], pa.large_string()),
        }
    )
    write_table(table, data)
    result = stretch("replay", "forward", "--input", str(data), "--output", str(out))
    assert result.returncode == 0, result.stderr
    got = read_table(out)
    assert got.schema.types == [pa.int64(), pa.float64(), pa.int64(), pa.string(), pa.string()]
    assert got.to_pylist() == table.cast(got.schema).to_pylist()


def test_forward_names_the_file_of_a_column_it_cannot_carry(tmp_path: Path) -> None:
    binary, only_ts = tmp_path / "b.parquet", tmp_path / "t.csv"
    write_table(pa.table({"ts": [1], "v": pa.array([b"x"])}), binary)
    only_ts.write_text("ts\n1\n")
    assert_clean_error(
        stretch("replay", "forward", "--input", str(binary)), str(binary), "type binary"
    )
    assert_clean_error(stretch("replay", "forward", "--input", str(only_ts)), "no column besides")
    header_only = tmp_path / "h.csv"
    header_only.write_text("ts,v\n")  # no row: the type of v cannot be told
    assert_clean_error(
        stretch("replay", "forward", "--input", str(header_only)),
        str(header_only),
        "type null",
        "holds no value, so its type is unknown",
    )
    assert_clean_error(
        stretch("replay", "forward", "--input", str(only_ts), "--param", "columns=v:foo"),
        "columns: 'v' has type 'foo', not one of int, float, bool, str",
    )
    assert_clean_error(
        stretch("generate", "tweets", "--seed", "-1", "--output", str(tmp_path / "x.csv")),
        "--seed must be >= 0",
    )


def test_missing_column(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("ts,user\n1,u\n")
    assert_clean_error(
        stretch("replay", "wordcount", "--input", str(bad)), str(bad), "missing column 'tweet'"
    )


def test_wrong_type_names_row_and_column(tmp_path: Path) -> None:
    left, right = tmp_path / "l.csv", tmp_path / "r.csv"
    left.write_text("ts,x,y\n1,5,1.5\n2,seven,2.5\n")
    right.write_text("ts,a,b,c,d\n1,5,1.5,2.0,true\n")
    assert_clean_error(
        stretch("replay", "scalejoin", "--input", str(left), "--input", str(right)),
        str(left),
        "row 2",
        "column 'x'",
        "seven",
    )


def test_unknown_operator_and_param(tmp_path: Path) -> None:
    data = tmp_path / "t.csv"
    data.write_text("ts,user,tweet\n1,u,hello\n")
    assert_clean_error(
        stretch("replay", "nosuch", "--input", str(data)), "unknown operator 'nosuch'"
    )
    assert_clean_error(
        stretch("replay", "wordcount", "--input", str(data), "--param", "q=1"), "no parameter 'q'"
    )
    assert_clean_error(stretch("replay", "wordcount", "--input", str(data), "--param", "ws"), "K=V")


def _squeezed(table: pa.Table) -> pa.Table:
    """A scalejoin side with its values in [0, 40): many matches."""
    for name in set(table.column_names) & {"x", "y", "a", "b"}:
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, pc.remainder(table.column(name), 40))
    return table


def _in_row_groups(table: pa.Table, path: Path, rows: int) -> Path:
    """``table`` as a Parquet file of row groups of ``rows`` rows."""
    pq.write_table(table, path, row_group_size=rows)
    return path


@pytest.fixture
def small_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> Path:
    """Input read in batches of 64 rows, sorted by runs of 8 KiB spilled under the test's
    own directory (returned), with the sort's log kept."""
    monkeypatch.setattr(stretch_io, "BATCH_ROWS", 64)
    monkeypatch.setattr(external_sort, "SORT_RUN_BYTES", 8192)
    monkeypatch.setattr(external_sort, "MERGE_BATCH_BYTES", 1024)
    spill = tmp_path / "tmp"
    spill.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill))
    caplog.set_level(logging.INFO, "stretch.external_sort")
    return spill


def spilled(caplog: pytest.LogCaptureFixture) -> list[int]:
    """The runs each external sort that spilled wrote, as its log says."""
    return [r.args[1] for r in caplog.records if "sorted runs written" in r.getMessage()]


@pytest.mark.parametrize("runtime_name", ["vsn", "sn"])
@pytest.mark.parametrize("unsorted", [False, True])
@pytest.mark.parametrize("extension", [".parquet", ".csv"])
def test_replay_reads_its_input_a_batch_at_a_time(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    small_runs: Path,
    runtime_name: str,
    unsorted: bool,
    extension: str,
) -> None:
    """Many batches of 64 rows (CSV: blocks of 2 KiB, streamed): the output is the
    reference, sorted input or not (vsn: sorted by runs of 8 KiB spilled to disk)."""
    monkeypatch.setattr(stretch_io, "TEXT_STREAM_BYTES", 0)
    monkeypatch.setattr(stretch_io, "TEXT_BLOCK_BYTES", 2048)
    left, right = (_squeezed(t) for t in generate.scalejoin(1500, 100.0, seed=5))
    expected = run_sn(build("scalejoin", {"ws": 2000}), [left, right])
    if unsorted:  # two rows of a late row group swapped: the file is read whole and sorted
        order = list(range(left.num_rows))
        order[1200], order[1201] = order[1201], order[1200]
        left = left.take(order)
    paths = []
    for side, table in (("l", left), ("r", right)):
        path = tmp_path / f"{side}{extension}"
        if extension == ".csv":
            write_table(table, path)
        else:
            _in_row_groups(table, path, 500)
        paths.append(str(path))
    out = tmp_path / "o.parquet"
    args = ["replay", "scalejoin", "--input", paths[0], "--input", paths[1], "--param", "ws=2000"]
    rc = main([*args, "--parallelism", "2", "--runtime", runtime_name, "--output", str(out)])
    assert rc == 0
    assert expected.num_rows > 0
    assert read_table(out).equals(expected)
    runs = spilled(caplog)
    if unsorted and runtime_name == "vsn":
        assert len(runs) == 1  # the left input
        assert runs[0] > 1  # runs of 8 KiB
    else:
        assert not runs
    assert not list(small_runs.iterdir())  # the runs are deleted


def test_an_unsorted_file_read_whole_is_sorted_in_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, small_runs: Path
) -> None:
    """A CSV file read whole when opened: spilling it to disk would only cost."""
    left, right = generate.scalejoin(500, 100.0, seed=2)
    expected = run_sn(build("scalejoin", {"ws": 2000}), [left, right])
    write_table(left.take(list(range(left.num_rows))[::-1]), tmp_path / "l.csv")
    write_table(right, tmp_path / "r.csv")
    out = tmp_path / "o.parquet"
    args = ["replay", "scalejoin", "--param", "ws=2000", "--output", str(out)]
    assert (
        main([*args, "--input", str(tmp_path / "l.csv"), "--input", str(tmp_path / "r.csv")]) == 0
    )
    assert read_table(out).equals(expected)
    assert not spilled(caplog)


@pytest.mark.parametrize("unsorted", [False, True])
def test_a_streamed_text_file_is_read_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unsorted: bool
) -> None:
    """The pass that checks a streamed CSV's types finds its ts order too: then the run
    (or the sort) reads it, and no third pass over its ts is made."""
    monkeypatch.setattr(stretch_io, "TEXT_STREAM_BYTES", 0)
    monkeypatch.setattr(stretch_io, "TEXT_BLOCK_BYTES", 2048)
    left, right = generate.scalejoin(500, 100.0, seed=2)
    if unsorted:
        left = left.take(list(range(left.num_rows))[::-1])
    paths = []
    for side, table in (("l", left), ("r", right)):
        write_table(table, tmp_path / f"{side}.csv")
        paths.append(str(tmp_path / f"{side}.csv"))
    read: list[tuple[str, int]] = []  # per pass: the file, the blocks it read
    batches = stretch_io._TextFile.batches

    def counted(self: Any, columns: list[str] | None) -> Iterator[pa.RecordBatch]:
        read.append((self.path.name, 0))
        at = len(read) - 1
        for batch in batches(self, columns):
            read[at] = (self.path.name, read[at][1] + 1)
            yield batch

    monkeypatch.setattr(stretch_io._TextFile, "batches", counted)
    out = tmp_path / "o.parquet"
    args = ["replay", "scalejoin", "--input", paths[0], "--input", paths[1], "--param", "ws=2000"]
    assert main([*args, "--output", str(out)]) == 0
    for name in ("l.csv", "r.csv"):
        passes = sorted((blocks for file, blocks in read if file == name), reverse=True)
        assert passes[0] > 5
        assert passes[:2] == [passes[0]] * 2  # the type pass, then the run (or the sort)
        assert all(blocks <= 1 for blocks in passes[2:])  # the check of the first rows
    expected = run_sn(
        build("scalejoin", {"ws": 2000}), list(generate.scalejoin(500, 100.0, seed=2))
    )
    assert read_table(out).equals(expected)


def test_sorted_asserted_names_an_unsorted_row_of_a_later_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows are checked as they are read: the message names the row in the file."""
    monkeypatch.setattr(stretch_io, "BATCH_ROWS", 64)
    (tweets,) = generate.tweets(1000, 50.0, seed=1)
    ts = tweets.column("ts").to_pylist()
    ts[700] = ts[699] - 1
    data = _in_row_groups(tweets.set_column(0, "ts", pa.array(ts)), tmp_path / "t.parquet", 300)
    out = tmp_path / "o.parquet"
    rc = main(["replay", "wordcount", "--input", str(data), "--sorted", "--output", str(out)])
    assert rc == 2
    error = capsys.readouterr().err
    assert f"{data}: row 701, column 'ts': {ts[700]} is before the previous row's" in error
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]  # no partial file either


def test_a_bad_value_in_a_later_batch_is_named_by_its_row_in_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(stretch_io, "BATCH_ROWS", 64)
    left, right = generate.scalejoin(400, 100.0, seed=2)
    y = [int(v) for v in left.column("y").to_pylist()]
    y[250] = 2**53 + 1  # an int column where floats are expected: this one has no float
    left = left.set_column(2, "y", pa.array(y))
    paths = [
        str(_in_row_groups(table, tmp_path / f"{side}.parquet", 100))
        for side, table in (("l", left), ("r", right))
    ]
    rc = main(["replay", "scalejoin", "--input", paths[0], "--input", paths[1], "--sorted"])
    assert rc == 2
    assert (
        f"{paths[0]}: row 251, column 'y': {2**53 + 1} (int64) cannot be held"
        in capsys.readouterr().err
    )


def test_unsorted_input_with_sorted_asserted(tmp_path: Path) -> None:
    data = tmp_path / "t.csv"
    data.write_text("ts,user,tweet\n5,u,a\n9,u,b\n7,u,c\n")
    assert_clean_error(
        stretch("replay", "wordcount", "--input", str(data), "--sorted"),
        str(data),
        "row 3",
        "column 'ts'",
        "7",
    )
    sorted_first = stretch(
        "replay", "wordcount", "--input", str(data), "--param", "ws=10", "--param", "wa=10"
    )
    assert sorted_first.returncode == 0, sorted_first.stderr
    assert sorted_first.stdout.splitlines()[1:] == ["10,a,1", "10,c,1", "10,b,1"]


def test_missing_file_and_wrong_input_count(tmp_path: Path) -> None:
    assert_clean_error(
        stretch("replay", "wordcount", "--input", str(tmp_path / "no.csv")), "no.csv"
    )
    data = tmp_path / "t.csv"
    write_table(pa.table({"ts": [1], "x": [1], "y": [1.0]}), data)
    assert_clean_error(
        stretch("replay", "scalejoin", "--input", str(data)), "takes 2 input file(s), got 1"
    )
    three = ["--input", str(data)] * 3
    assert_clean_error(
        stretch("replay", "hedge", *three),
        "'hedge' takes 1 (fed to each of its 2 streams) or 2 input file(s), got 3",
    )


def test_generate_rejects_bad_arguments(tmp_path: Path) -> None:
    out = str(tmp_path / "t.csv")
    assert_clean_error(
        stretch("generate", "tweets", "--rows", "-1", "--output", out), "--rows must be >= 0"
    )
    assert_clean_error(
        stretch("generate", "tweets", "--rate", "nan", "--output", out),
        "--rate must be a positive, finite number of tuples/s, got nan",
    )


def test_generate_refuses_a_join_that_explodes_unless_forced(tmp_path: Path) -> None:
    """Issue 23: 100 000 trades are over 10**8 hedge pairs; say so before writing them."""
    trades = tmp_path / "t.arrow"
    args = ("generate", "hedge", "--rows", "100000", "--output", str(trades))
    assert_clean_error(stretch(*args), "'hedge'", "--force", "--param ws", "rows")
    assert not trades.exists()
    forced = stretch(*args, "--force")
    assert forced.returncode == 0, forced.stderr
    assert read_table(trades).num_rows == 100_000


def test_generate_warns_before_a_large_join_and_reports_long_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trades = str(tmp_path / "t.arrow")
    assert main(["generate", "hedge", "--rows", "20000", "--output", trades]) == 0
    assert "warning: 'hedge' over these 20000 rows" in capsys.readouterr().err
    assert main(["generate", "hedge", "--output", str(tmp_path / "d.arrow")]) == 0
    assert capsys.readouterr().err == ""  # the default size joins in seconds
    big = tmp_path / "big.arrow"
    assert main(["generate", "tweets", "--rows", "1000000", "--output", str(big)]) == 0
    stages = capsys.readouterr().err.splitlines()
    assert [line.split("] ", 1)[1] for line in stages] == [
        "generating 1,000,000 rows per stream of tweets",
        "wrote 1,000,000 of 1,000,000 rows per stream",
        "done",
    ]


def test_generate_writes_a_chunk_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Memory does not grow with --rows: the streams are made and written in chunks."""
    monkeypatch.setattr(generate, "CHUNK_ROWS", 1000)
    monkeypatch.setattr(cli, "PROGRESS_ROWS", 1)
    monkeypatch.setattr(cli, "PROGRESS_INTERVAL_S", 0.0)
    out = tmp_path / "s.parquet"
    args = ["generate", "scalejoin", "--rows", "2500", "--seed", "3", "--output", str(out)]
    assert main(args) == 0
    stages = [line.split("] ", 1)[1] for line in capsys.readouterr().err.splitlines()]
    assert stages[2:] == [f"wrote {n:,} of 2,500 rows per stream" for n in (1000, 2000, 2500)] + [
        "done"
    ]
    files = [tmp_path / "s_l.parquet", tmp_path / "s_r.parquet"]
    expected = generate.scalejoin(2500, 1000.0, 3)
    assert all(read_table(f).equals(t) for f, t in zip(files, expected, strict=True))
    assert [pq.ParquetFile(f).metadata.num_row_groups for f in files] == [3, 3]
    # A join refused over several chunks (each longer than hedge's window, as the default
    # chunks are) is refused before a file is written.
    monkeypatch.setattr(generate, "CHUNK_ROWS", 50_000)
    trades = tmp_path / "t.arrow"
    args = ["generate", "hedge", "--rows", "200000", "--output", str(trades)]
    capsys.readouterr()
    assert main(args) == 2
    assert "'hedge' over these 200000 rows" in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == files


def test_bench_runs_the_experiment_scripts() -> None:
    result = stretch("bench", "scalejoin", "--help")
    assert result.returncode == 0, result.stderr
    assert "--parallelism" in result.stdout
    assert stretch("bench", "nosuch").returncode == 2


def test_serve_with_an_unknown_operator_module() -> None:
    """Operators load before the server starts: a bad module ends it with one line."""
    assert_clean_error(
        stretch("serve", "--operators", "no_such_module_of_operators"),
        "no_such_module_of_operators",
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--param", "wa=1", "--param", "ws=1000000"], "at most 1024"),
        (["--param", "ws=1000000000000000000000000000000"], "1..1099511627776"),
        (["--parallelism", "1000000000"], "1..64"),
    ],
)
def test_replay_refuses_parameters_beyond_the_limits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    data = tmp_path / "t.csv"
    data.write_text("ts,user,tweet\n1,u,hello\n")
    assert main(["replay", "wordcount", "--input", str(data), *args]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_serve_refuses_an_open_non_loopback_host(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("STRETCH_TOKEN", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "without a token" in err and "--insecure" in err and "Traceback" not in err


def test_replay_reads_timestamps_as_event_time_in_ms(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parquet = tmp_path / "t.parquet"
    ts = pa.array([1_000_250_999, 1_000_000_000], pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    write_table(pa.table({"ts": ts, "v": [1, 2]}), parquet)
    text = tmp_path / "t.csv"
    text.write_text("ts,v\n1970-01-01T00:16:40.500Z,3\n1970-01-01T00:16:40Z,4\n")
    assert main(["replay", "forward", "--input", str(parquet), "--input", str(text)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["ts,v", "1000000,2", "1000000,4", "1000250,1", "1000500,3"]


def _lines(stream: IO[str]) -> queue.Queue[str]:
    """The lines of ``stream`` as they come, read by a daemon thread."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line)
        lines.put("")  # end of stream

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _wait_for(lines: queue.Queue[str], words: str, seen: list[str]) -> None:
    """Read lines into ``seen`` until one holds ``words`` (each wait bounded)."""
    while True:
        line = lines.get(timeout=60)
        seen.append(line)
        assert line, f"stream ended before {words!r}: {seen}"
        if words in line:
            return


def test_version() -> None:
    result = stretch("--version")
    assert result.returncode == 0 and result.stdout.startswith("stretch ")


def test_verbose_after_the_command_reports_progress(tmp_path: Path) -> None:
    data = tmp_path / "t.csv"
    data.write_text("ts,user,tweet\n1,u,a b\n5000,u,b c\n")
    result = stretch(
        "replay",
        "wordcount",
        "--input",
        str(data),
        "-v",
        "--param",
        "ws=2000",
        "--param",
        "wa=1000",
        "--reconfigure",
        "2500:2",
    )
    assert result.returncode == 0, result.stderr
    assert "wordcount: replaying 2 rows" in result.stderr
    assert "reconfiguration to epoch 1: 1 -> 2 instances in" in result.stderr
    assert "2 rows in, " in result.stderr


def test_progress_lines_say_how_much_of_the_input_went_in(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Rows in are those in ESG_in: released to a source, less its backlog."""
    status = SimpleNamespace(
        sources=[SimpleNamespace(rows=300, backlog=50), SimpleNamespace(rows=100, backlog=0)],
        output=SimpleNamespace(end_offset=7),
        parallelism=2,
        reconfigurations=(),
    )
    pipeline = cast(Pipeline, SimpleNamespace(status=lambda: status))
    with caplog.at_level(logging.INFO, logger="progress-test"):
        ReplayProgress("j", logging.getLogger("progress-test"), rows_total=700)._sample(pipeline)
        ReplayProgress("k", logging.getLogger("progress-test"))._sample(pipeline)
    assert "j: 350 rows in (50%, " in caplog.text
    assert "k: 350 rows in (" in caplog.text
    assert "7 rows out" in caplog.text


def _interrupted_replay(
    tmp_path: Path, extra: list[str], ready: Callable[[queue.Queue[str], list[str]], None]
) -> list[str]:
    """Replay the nested ScaleJoin over 2 x 200k tuples (a minute), press Ctrl-C once
    ``ready(lines, seen)`` returns; the lines it printed to stderr."""
    left, right = generate.scalejoin(200_000, 1000.0, 1)
    write_table(left, tmp_path / "l.arrow")
    write_table(right, tmp_path / "r.arrow")
    command = [sys.executable, "-m", "stretch.cli", "replay", "scalejoin", "-v"]
    command += ["--param", "index=off", *extra]
    command += ["--input", str(tmp_path / "l.arrow"), "--input", str(tmp_path / "r.arrow")]
    with subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stderr is not None
        lines, seen = _lines(proc.stderr), list[str]()
        try:
            ready(lines, seen)
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=10) == 130
        finally:
            proc.kill()
        _wait_for(lines, "interrupted", seen)
    return seen


def test_ctrl_c_stops_a_replay_at_once_without_a_traceback(tmp_path: Path) -> None:
    seen = _interrupted_replay(
        tmp_path, [], lambda lines, seen: _wait_for(lines, "replaying", seen)
    )
    assert not any("Traceback" in line for line in seen), seen


def test_ctrl_c_while_writing_leaves_no_partial_output_file(tmp_path: Path) -> None:
    def writing(lines: queue.Queue[str], seen: list[str]) -> None:
        partial = _wait_until(lambda: list(tmp_path.glob(".o.parquet.*.partial")), 60)
        assert partial, "no output piece was written within 60 s"

    _interrupted_replay(tmp_path, ["--output", str(tmp_path / "o.parquet")], writing)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l.arrow", "r.arrow"]


def _wait_until(found: Callable[[], list[Path]], timeout_s: float) -> list[Path]:
    """Poll ``found`` every 50 ms until it finds something or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while not (paths := found()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return paths


def test_a_closed_stdout_ends_quietly(tmp_path: Path) -> None:
    data = tmp_path / "t.csv"
    data.write_text("ts,v\n" + "".join(f"{i},{i}\n" for i in range(20_000)))
    command = f"{sys.executable} -m stretch.cli replay forward --input {data} | head -n 1"
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.stdout == "ts,v\n"
    assert result.returncode == 141, result.stderr
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr


def test_serve_announces_itself_logs_once_and_stops_on_sigterm() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "stretch.cli", "serve", "--port", str(port), "--access-log"]
    env = {k: v for k, v in os.environ.items() if k != "STRETCH_TOKEN"}
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    ) as proc:
        assert proc.stdout is not None
        lines, seen = _lines(proc.stdout), []
        try:
            _wait_for(lines, "Application startup complete", seen)
            url = f"http://127.0.0.1:{port}"
            with httpx.Client(base_url=url, timeout=30) as http:
                docs = http.get("/docs")
                assert docs.status_code == 200 and "://" not in docs.text
                assert http.get("/docs/assets/swagger-ui-bundle.js").status_code == 200
                body = {"name": "a", "operator": "forward", "params": {"columns": "v:int"}}
                assert http.post("/v1/operators", json=body).status_code == 201
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) in (0, -signal.SIGTERM)
        finally:
            proc.kill()
        seen += list(iter(lambda: lines.get(timeout=10), ""))
    text = "".join(seen)
    assert f"stretch serve on http://127.0.0.1:{port} (auth: none" in text
    assert f"docs at http://127.0.0.1:{port}/docs" in text
    assert "no token configured" in text
    assert text.count("started operator 'a'") == 1, text
    assert '"POST /v1/operators HTTP/1.1" 201' in text
    assert "Traceback" not in text


def test_bench_writes_where_the_user_says(tmp_path: Path) -> None:
    committed = Path(__file__).resolve().parents[1] / "benchmarks" / "results"

    def contents() -> dict[str, bytes]:
        files = [p for p in committed.rglob("*") if p.is_file()]
        return {str(p.relative_to(committed)): p.read_bytes() for p in files}

    before = contents()
    small = ["--tuples", "2000", "--tuple-tuples", "200", "--batch", "500", "--runs", "1"]
    small += ["--sources", "2", "--readers", "1"]
    for where, args in [
        (tmp_path / "stretch-bench-results", []),
        (tmp_path / "mine", ["--output", str(tmp_path / "mine")]),
    ]:
        result = subprocess.run(
            [sys.executable, "-m", "stretch.cli", "bench", "scalegate", *small, *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        )
        assert result.returncode == 0, result.stderr
        assert (where / "bench_scalegate.json").is_file()
    assert contents() == before


def test_the_client_needs_no_dev_extra() -> None:
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    runtime = {dep.split(">")[0].split("=")[0].strip() for dep in project["dependencies"]}
    assert {"httpx", "swagger-ui-bundle"} <= runtime
    dev = {dep.split(">")[0].strip() for dep in project["optional-dependencies"]["dev"]}
    assert "httpx" not in dev


def test_stretch_bench_knows_every_benchmark_script() -> None:
    scripts = Path(__file__).resolve().parents[1] / "benchmarks"
    named = {p.stem.removeprefix("bench_") for p in scripts.glob("bench_*.py")}
    assert set(BENCHMARKS) == named


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["panes", "--rows", "-5"], "argument --rows: must be an integer > 0, got '-5'"),
        (["panes", "--runs", "x"], "argument --runs: must be an integer > 0, got 'x'"),
        (["forward", "--rate", "nan"], "argument --rate: must be a finite number > 0, got 'nan'"),
        (["scalejoin", "--parallelism", "1", "0"], "argument --parallelism: must be an integer"),
    ],
)
def test_bench_refuses_a_bad_number_naming_its_option(args: list[str], message: str) -> None:
    result = stretch("bench", *args)
    assert result.returncode == 2
    assert f"stretch bench {args[0]}: error: {message}" in result.stderr
    assert "Traceback" not in result.stderr


def test_every_numeric_bench_option_is_checked() -> None:
    """Plain ``int`` or ``float`` would let -5 or nan through to a traceback mid-run."""
    scripts = Path(__file__).resolve().parents[1] / "benchmarks"
    for script in scripts.glob("bench_*.py"):
        text = script.read_text(encoding="utf-8")
        assert not re.search(r"type=(int|float)\b", text), script.name


def test_a_replay_does_not_import_pandas_yet_pandas_still_works(tmp_path: Path) -> None:
    data, out = tmp_path / "a.parquet", tmp_path / "o.parquet"
    write_table(pa.table({"ts": [1, 2, 2], "v": [1.5, 2.5, 3.5]}), data)
    script = f"""
import sys
from stretch.cli import main
sys.argv = ["stretch", "replay", "forward", "--input", {str(data)!r}, "--output", {str(out)!r}]
assert main() == 0
print("pandas" in sys.modules)
import pandas, pyarrow
print(pyarrow.Table.from_pandas(pandas.DataFrame({{"c": pandas.Categorical(["x"])}}))["c"].type)
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr  # nor in the thread that loads Numba's registries
    assert result.stdout.split("\n")[:2] == [
        "False",
        "dictionary<values=string, indices=int8, ordered=0>",
    ]
    assert read_table(out).column("v").to_pylist() == [1.5, 2.5, 3.5]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet", ".arrow", None])
def test_replay_writes_its_output_a_piece_at_a_time(
    tmp_path: Path,
    suffix: str | None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Pieces of 50 rows from a log bounded to 100: the file is the reference output."""
    monkeypatch.setattr(runtime, "HELD_ROWS", 100)
    given: list[int] = []

    def pieces(*args: Any, **kwargs: Any) -> Iterator[pa.Table]:
        for piece in runtime.run_vsn_pieces(*args, **kwargs, piece_rows=50):
            given.append(piece.num_rows)
            yield piece

    monkeypatch.setattr(cli, "run_vsn_pieces", pieces)
    (table,) = generate.tweets(rows=300, rate=20.0, seed=1)
    source = tmp_path / "t.parquet"
    write_table(table, source)
    params = {"ws": 20_000, "wa": 5000}
    argv = ["replay", "wordcount", "--input", str(source), "--parallelism", "2"]
    argv += [x for k, v in params.items() for x in ("--param", f"{k}={v}")]
    capsys.readouterr()
    if suffix is None:
        assert main(argv) == 0
        written = capsys.readouterr().out
        reference = tmp_path / "reference.csv"
        write_table(run_sn(build("wordcount", params), [table]), reference)
        assert written == reference.read_text()
    else:
        out = tmp_path / f"o{suffix}"
        assert main([*argv, "--output", str(out)]) == 0
        expected = tmp_path / f"expected{suffix}"
        write_table(run_sn(build("wordcount", params), [table]), expected)
        assert read_table(out).equals(read_table(expected))
    assert len(given) > 4 and max(given) == 50


def test_a_replay_that_fails_midway_leaves_the_output_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o.csv"
    out.write_text("ts\n1\n")

    def pieces(*args: Any, **kwargs: Any) -> Iterator[pa.Table]:
        yield pa.table({"ts": [1, 2]})
        msg = "the run failed after a piece"
        raise InputError(msg)

    monkeypatch.setattr(cli, "run_vsn_pieces", pieces)
    source = tmp_path / "t.csv"
    source.write_text("ts,v\n1,1\n")
    argv = ["replay", "forward", "--input", str(source), "--output", str(out)]
    assert main(argv) == 2
    assert "the run failed after a piece" in capsys.readouterr().err
    assert out.read_text() == "ts\n1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.csv", "t.csv"]


def test_an_output_of_unknown_format_is_refused_before_the_input_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "not-there.parquet"
    argv = ["replay", "forward", "--input", str(missing), "--output", str(tmp_path / "o.txt")]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert "unknown extension '.txt'" in error and "not-there" not in error


def test_an_output_that_is_an_input_is_refused_and_the_input_kept(
    scalejoin_files: tuple[Path, Path], tmp_path: Path
) -> None:
    left, right = scalejoin_files
    copy = tmp_path / "l.csv"
    copy.write_bytes(left.read_bytes())
    link = tmp_path / "link.csv"
    link.symlink_to(copy)
    for output in (copy, link):
        args = ["replay", "scalejoin", "--input", str(copy), "--input", str(right)]
        assert_clean_error(stretch(*args, "--output", str(output)), f"--output {output} is also")
    assert copy.read_bytes() == left.read_bytes()


def test_warm_replays_every_operator_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """The kernels are in the cache already here (install warmed it): this checks the
    steps run and pass, each operator in both input layouts. (The archive of Spark's
    classes: tests/spark/test_session.py.)"""
    assert main(["warm", "--skip-spark"]) == 0
    err = capsys.readouterr().err
    for op in ("forward", "scalejoin", "hedge", "wordcount", "paircount", "longest_tweet"):
        assert f" {op} --input" in err
    assert "index=off" in err
    assert "--reconfigure 700:2" in err
    assert ".parts.parquet" in err
    assert err.rstrip().endswith("done: the kernels are in Numba's cache")


def test_warm_names_a_replay_that_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    replays: list[list[str]] = []

    def fail_third(argv: list[str]) -> int:
        replays.append(argv)
        return 2 if len(replays) == 3 else 0

    monkeypatch.setattr(cli, "main", fail_third)
    assert cli._warm(SimpleNamespace(param=[], operators=[])) == 1
    assert len(replays) == 3
    assert f"stretch: warm failed: stretch {' '.join(replays[2])} ended with status 2" in (
        capsys.readouterr().err
    )


def test_warm_replays_the_operators_a_module_registers_and_names_one_that_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each with the --param given; a replay that fails names its operator: status 1."""
    (tmp_path / "warm_cli_ops.py").write_text(
        "import stretch\n"
        "from tests.custom_operators import sensor_mean\n"
        "stretch.register('warm_cli_mean', sensor_mean)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    replays: list[list[str]] = []

    def replay(argv: list[str]) -> int:
        replays.append(argv)
        return 2 if "warm_cli_mean" in argv else 0

    monkeypatch.setattr(cli, "main", replay)
    monkeypatch.setattr(cli, "warm", lambda run, say: None)  # the catalog: tested above
    args = SimpleNamespace(param=["ws=400"], operators=["warm_cli_ops"], skip_spark=True)
    try:
        assert cli._warm(args) == 1
    finally:
        CATALOG.pop("warm_cli_mean", None)
    mine = [argv for argv in replays if "warm_cli_mean" in argv]
    assert mine == [mine[0]]  # the first failed: the operator's other replays are skipped
    assert mine[0][:3] == ["replay", "--param", "ws=400"]
    assert mine[0].count("--input") == 1  # one input schema, one file
    err = capsys.readouterr().err
    assert (
        "stretch: warm: operator warm_cli_mean: a replay on generated rows ended with status "
        "2; it compiles on its first run"
    ) in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--param", "ws=5"], "--param is for the operators of --operators modules"),
        (["--operators", "no_such_module_here"], "cannot load operators from module"),
    ],
)
def test_warm_refuses_what_it_cannot_use_before_any_work(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["warm", "--skip-spark", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "[1/" not in err


@pytest.mark.parametrize("is_cold", [True, False])
def test_a_replay_on_a_cold_cache_says_why_it_is_slow(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    is_cold: bool,
) -> None:
    """Run as a command (no argv given) by a person (stderr a terminal), a replay before
    ``stretch warm`` says so."""
    paths = []
    for side, table in zip("lr", generate.scalejoin(50, 100.0, seed=1), strict=True):
        write_table(table, tmp_path / f"{side}.parquet")
        paths.append(str(tmp_path / f"{side}.parquet"))
    argv = ["stretch", "replay", "scalejoin", "--input", paths[0], "--input", paths[1]]
    monkeypatch.setattr(sys, "argv", [*argv, "--output", str(tmp_path / "o.parquet")])
    monkeypatch.setattr(cli, "cold", lambda: is_cold)
    monkeypatch.setattr(cli, "_interactive", lambda: True)
    assert main() == 0
    said = [r.getMessage() for r in caplog.records if "stretch warm" in r.getMessage()]
    assert said == (
        [
            "stretch: the kernels of this install are not compiled yet: this run compiles "
            "those it uses (seconds each, once); 'stretch warm' compiles them all ahead"
        ]
        if is_cold
        else []
    )


def test_a_bad_row_met_while_sorting_names_it_and_leaves_no_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], small_runs: Path
) -> None:
    """The pass over ``ts`` does not read ``x``: its missing value is met by the sort."""
    left, right = generate.scalejoin(1000, 100.0, seed=3)
    left = left.take(list(range(left.num_rows))[::-1])  # out of ts order
    x = left.column("x").to_pylist()
    x[900] = None
    left = left.set_column(left.schema.get_field_index("x"), "x", pa.array(x, pa.int64()))
    pq.write_table(left, tmp_path / "l.parquet", row_group_size=100)
    pq.write_table(right, tmp_path / "r.parquet")
    out = tmp_path / "o.parquet"
    args = ["replay", "scalejoin", "--output", str(out)]
    args += ["--input", str(tmp_path / "l.parquet"), "--input", str(tmp_path / "r.parquet")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'l.parquet'}: row 901, column 'x': missing value" in err
    assert not list(small_runs.iterdir())
    assert not out.exists()


def test_a_self_join_file_is_read_and_sorted_once_for_both_streams(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, small_runs: Path
) -> None:
    """hedge's one file feeds L and R: one pass and one external sort serve both."""
    (trades,) = generate.hedge(600, 100.0, seed=4)
    expected = run_sn(build("hedge", {"ws": 2000}), [trades, trades])
    pq.write_table(trades.take(list(range(trades.num_rows))[::-1]), tmp_path / "t.parquet")
    out = tmp_path / "o.parquet"
    args = ["replay", "hedge", "--param", "ws=2000", "--parallelism", "2", "--output", str(out)]
    assert main([*args, "--input", str(tmp_path / "t.parquet")]) == 0
    assert expected.num_rows > 0
    assert read_table(out).equals(expected)
    assert len(spilled(caplog)) == 1
