"""The ``stretch`` command: replay and generate, and one clear line for each bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from stretch.cli import main
from stretch.io import read_table, write_table
from stretch.model.sn import run_sn
from stretch.operators.catalog import build


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


def test_generate_rejects_bad_arguments(tmp_path: Path) -> None:
    assert_clean_error(
        stretch("generate", "tweets", "--rows", "-1", "--output", str(tmp_path / "t.csv")), "rows"
    )


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
