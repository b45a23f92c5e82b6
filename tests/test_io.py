"""Reading and writing tables by extension: round trips and error messages."""

from __future__ import annotations

import math
import os
import struct
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stretch import io as stretch_io
from stretch.errors import InputError, SchemaError
from stretch.io import FORMATS, InputFile, TableWriter, read_table, write_table
from stretch.model.schema import Schema, conform

TRICKY_STRINGS = ["plain", "", None, 'a,b "quoted"', "line\nbreak\r\n", "é ✓ \\ \x01", "2018-10-01"]


def mixed_table() -> pa.Table:
    n = len(TRICKY_STRINGS)
    return pa.table(
        {
            "ts": pa.array(range(n), pa.int64()),
            "i": pa.array([1, -(2**62), None, 0, 7, 2**63 - 1, 3], pa.int64()),
            "f": [1.0, 0.1, None, -0.0, 1 / 3, 1e300, float("-inf")],
            "b": [True, False, None, True, False, True, True],
            "s": TRICKY_STRINGS,
            "when": ["2018-10-01T00:00:00"] * n,
        }
    )


def float_bits(values: list[float | None]) -> list[int | None]:
    return [None if v is None else struct.unpack("<q", struct.pack("<d", v))[0] for v in values]


def test_formats_are_the_four_extensions() -> None:
    assert FORMATS == (".csv", ".jsonl", ".arrow", ".parquet")


@pytest.mark.parametrize("extension", FORMATS)
def test_round_trip_keeps_types_and_values(tmp_path: Path, extension: str) -> None:
    table = mixed_table()
    path = tmp_path / f"data{extension}"
    write_table(table, path)
    back = read_table(path)
    assert back.schema == table.schema
    assert back.equals(table)
    assert float_bits(back["f"].to_pylist()) == float_bits(table["f"].to_pylist())


@pytest.mark.parametrize("extension", FORMATS)
def test_round_trip_keeps_nan(tmp_path: Path, extension: str) -> None:
    path = tmp_path / f"nan{extension}"
    write_table(pa.table({"f": [float("nan"), 2.5]}), path)
    values = read_table(path)["f"].to_pylist()
    assert math.isnan(values[0])
    assert values[1] == 2.5


@pytest.mark.parametrize("extension", FORMATS)
def test_round_trip_accepts_str_paths_and_creates_parents(tmp_path: Path, extension: str) -> None:
    path = tmp_path / "a" / "b" / f"t{extension}"
    table = pa.table({"ts": pa.array([5], pa.int64())})
    write_table(table, str(path))
    assert read_table(str(path)).equals(table)


@pytest.mark.parametrize("extension", [".arrow", ".parquet"])
def test_empty_table_keeps_its_schema(tmp_path: Path, extension: str) -> None:
    table = mixed_table().slice(0, 0)
    path = tmp_path / f"empty{extension}"
    write_table(table, path)
    back = read_table(path)
    assert back.num_rows == 0
    assert back.schema == table.schema


def test_empty_table_as_csv_keeps_column_names(tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    write_table(mixed_table().slice(0, 0), path)
    back = read_table(path)
    assert back.num_rows == 0
    assert back.column_names == mixed_table().column_names


def test_empty_table_as_jsonl_reads_back_empty(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    write_table(mixed_table().slice(0, 0), path)
    assert path.read_text() == ""
    assert read_table(path).num_rows == 0


def test_csv_writes_booleans_as_words_and_floats_with_a_point(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    write_table(pa.table({"b": [True, False], "f": [3.0, 0.5]}), path)
    assert path.read_text().splitlines()[1:] == ["true,3.0", "false,0.5"]


def test_csv_quotes_only_the_strings_that_need_it_and_reads_them_back(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    texts = ["plain", "", None, "a,b", 'say "hi"', "two\nlines", " spaced "]
    table = pa.table({"s": texts, "n": pa.array(range(len(texts)), pa.int64())})
    write_table(table, path)
    lines = path.read_text().split("\n")
    assert lines[:4] == ["s,n", "plain,0", '"",1', ",2"]
    assert lines[4:6] == ['"a,b",3', '"say ""hi""",4']
    assert read_table(path).equals(table)


def test_csv_header_only_gives_empty_table(tmp_path: Path) -> None:
    path = tmp_path / "header.csv"
    path.write_text("ts,x\n")
    table = read_table(path)
    assert table.num_rows == 0
    assert table.column_names == ["ts", "x"]


def test_jsonl_skips_blank_lines_and_fills_missing_keys(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"ts": 1, "a": "x"}\n\n{"ts": 2, "b": true}\n')
    assert read_table(path).to_pylist() == [
        {"ts": 1, "a": "x", "b": None},
        {"ts": 2, "a": None, "b": True},
    ]


def test_jsonl_mixing_ints_and_floats_gives_floats(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"v": 1}\n' * 50_000 + '{"v": 2.5}\n')
    column = read_table(path)["v"]
    assert column.type == pa.float64()
    assert column[-1].as_py() == 2.5


def test_jsonl_line_longer_than_a_read_block(tmp_path: Path) -> None:
    table = pa.table({"s": ["a" * 3_000_000, "b"], "i": [1, 2]})
    path = tmp_path / "long.jsonl"
    write_table(table, path)
    assert read_table(path).equals(table)


def test_arrow_stream_format_is_read_too(tmp_path: Path) -> None:
    table = mixed_table()
    path = tmp_path / "stream.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    assert read_table(path).equals(table)


def test_arrow_writes_the_file_format(tmp_path: Path) -> None:
    path = tmp_path / "file.arrow"
    write_table(mixed_table(), path)
    assert path.read_bytes()[:6] == b"ARROW1"


def test_extension_is_case_insensitive(tmp_path: Path) -> None:
    path = tmp_path / "UPPER.CSV"
    write_table(pa.table({"x": [1]}), path)
    assert read_table(path).to_pylist() == [{"x": 1}]


# Hypothesis: exactness of floats and strings in every format.

finite_or_infinite = st.floats(allow_nan=False) | st.none()
texts = st.text(st.characters(codec="utf-8")) | st.none()


@settings(max_examples=60, deadline=None)
@given(values=st.lists(finite_or_infinite, min_size=1, max_size=20))
def test_floats_round_trip_bit_for_bit(
    tmp_path_factory: pytest.TempPathFactory, values: list[float | None]
) -> None:
    directory = tmp_path_factory.mktemp("examples")
    table = pa.table({"f": pa.array(values, pa.float64())})
    for extension in FORMATS:
        path = directory / f"floats{extension}"
        write_table(table, path)
        back = read_table(path)["f"]
        if all(v is None for v in values):
            assert back.null_count == len(values)
        else:
            assert float_bits(back.to_pylist()) == float_bits(values), extension


@settings(max_examples=60, deadline=None)
@given(values=st.lists(texts, min_size=1, max_size=20))
def test_strings_round_trip(
    tmp_path_factory: pytest.TempPathFactory, values: list[str | None]
) -> None:
    directory = tmp_path_factory.mktemp("examples")
    # The "x" prefix keeps CSV inference from reading numbers, booleans or dates.
    prefixed = [None if v is None else "x" + v for v in values]
    for extension in FORMATS:
        column = prefixed if extension == ".csv" else values
        if all(v is None for v in column):
            continue
        table = pa.table({"s": pa.array(column, pa.string())})
        path = directory / f"strings{extension}"
        write_table(table, path)
        assert read_table(path).equals(table), extension


# Errors name the file, and the line and column where they can be known.


@pytest.mark.parametrize("extension", FORMATS)
def test_missing_file_is_an_input_error(tmp_path: Path, extension: str) -> None:
    path = tmp_path / f"missing{extension}"
    with pytest.raises(InputError, match=rf"{path.name}: no such file"):
        read_table(path)


def test_directory_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "dir.csv"
    path.mkdir()
    with pytest.raises(InputError, match="dir.csv: a directory"):
        read_table(path)


@pytest.mark.parametrize("extension", [".csv", ".jsonl"])
def test_event_time_text_may_mix_zoned_and_zoneless(tmp_path: Path, extension: str) -> None:
    """Each ISO 8601 ``ts`` is read in its own zone; one without a zone is UTC."""
    texts = ["2024-01-01T00:00:00Z", "2024-01-01T00:00:01", "2024-01-01T02:00:02+01:00"]
    path = tmp_path / f"mixed{extension}"
    write_table(pa.table({"ts": texts, "v": [1, 2, 3]}), path)
    table = conform(read_table(path), Schema.of(v="int"), path.name)
    ts = table.column("ts").to_pylist()
    assert [t - 1_704_067_200_000 for t in ts] == [0, 1_000, 3_602_000]


def test_event_time_text_names_the_first_value_that_is_not_a_time(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("ts,v\n2024-01-01T00:00:00Z,1\n2024-01-01T00:00:01,2\nsoon,3\n")
    with pytest.raises(InputError, match="bad.csv: row 3, column 'ts': 'soon' is not ISO 8601"):
        read_table(path)


def test_unknown_extension_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "data.xlsx"
    path.write_text("x")
    with pytest.raises(InputError, match=r"data\.xlsx: unknown extension '\.xlsx'"):
        read_table(path)
    with pytest.raises(InputError, match=r"data\.txt: unknown extension"):
        write_table(pa.table({"x": [1]}), tmp_path / "data.txt")


def test_bad_json_line_names_its_line_number(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"ts": 1}\n{"ts": 2}\n{"ts": 3,}\n{"ts": 4}\n')
    with pytest.raises(InputError, match=r"bad\.jsonl: line 3: invalid JSON") as caught:
        read_table(path)
    assert "\n" not in str(caught.value)


def test_json_line_that_is_not_an_object_is_named(tmp_path: Path) -> None:
    path = tmp_path / "array.jsonl"
    path.write_text('{"ts": 1}\n\n[1, 2]\n')
    with pytest.raises(
        InputError, match=r"array\.jsonl: line 3: expected a JSON object, got array"
    ):
        read_table(path)


def test_json_type_change_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "types.jsonl"
    path.write_text('{"ts": 1, "x": 1}\n{"ts": 2, "x": null}\n{"ts": 3, "x": "three"}\n')
    with pytest.raises(InputError, match=r"types\.jsonl: line 3, column 'x': string value"):
        read_table(path)


def test_json_values_arrow_cannot_hold_name_the_column(tmp_path: Path) -> None:
    path = tmp_path / "nested.jsonl"
    path.write_text('{"ts": 1, "a": [1]}\n{"ts": 2, "a": ["x"]}\n')
    with pytest.raises(InputError, match=r"nested\.jsonl: column 'a': Could not convert 'x'"):
        read_table(path)


def test_jsonl_that_is_not_utf8_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"s": "a"}\n{"s": "\xe9"}\n')
    with pytest.raises(InputError, match=r"latin1\.jsonl: line 2: not UTF-8"):
        read_table(path)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("a,b,c\n1,2,3\n4,5\n", r"ragged\.csv: row 2: expected 3 columns, got 2"),
        ("a,b\n1,2\n3,4\n5,6,7\n", r"ragged\.csv: row 3: expected 2 columns, got 3"),
    ],
)
def test_ragged_csv_names_the_row(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "ragged.csv"
    path.write_text(content)
    with pytest.raises(InputError, match=expected):
        read_table(path)


def test_empty_csv_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_text("")
    with pytest.raises(InputError, match=r"empty\.csv: Empty CSV file"):
        read_table(path)


@pytest.mark.parametrize("extension", [".arrow", ".parquet"])
def test_garbage_binary_file_is_an_input_error(tmp_path: Path, extension: str) -> None:
    path = tmp_path / f"garbage{extension}"
    path.write_bytes(b"this is not a table" * 10)
    with pytest.raises(InputError, match=rf"garbage\{extension}") as caught:
        read_table(path)
    assert "\n" not in str(caught.value)


def test_jsonl_rejects_duplicate_column_names(tmp_path: Path) -> None:
    table = pa.table([pa.array([1]), pa.array([2])], names=["x", "x"])
    with pytest.raises(SchemaError, match="duplicate column names"):
        write_table(table, tmp_path / "dup.jsonl")


def test_jsonl_rejects_values_json_cannot_hold(tmp_path: Path) -> None:
    table = pa.table({"raw": pa.array([b"\x00"], pa.binary())})
    with pytest.raises(SchemaError, match="not JSON serializable"):
        write_table(table, tmp_path / "raw.jsonl")


def test_unwritable_path_is_an_input_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError, match="cannot write"):
        write_table(pa.table({"x": [1]}), blocker / "t.csv")


@pytest.mark.parametrize("extension", FORMATS)
def test_a_table_written_in_pieces_is_the_table_written_at_once(
    tmp_path: Path, extension: str
) -> None:
    table = mixed_table()
    whole, pieces = tmp_path / f"whole{extension}", tmp_path / f"pieces{extension}"
    write_table(table, whole)
    with TableWriter(pieces) as writer:
        for start in range(0, table.num_rows, 2):
            writer.write(table.slice(start, 2))
    assert read_table(pieces).equals(read_table(whole))
    if extension in (".csv", ".jsonl"):  # text: the same bytes (one header)
        assert pieces.read_bytes() == whole.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([whole.name, pieces.name])


@pytest.mark.parametrize("extension", FORMATS)
def test_a_failed_write_leaves_the_file_as_it_was(tmp_path: Path, extension: str) -> None:
    path = tmp_path / f"out{extension}"
    write_table(pa.table({"x": [1, 2]}), path)
    before = path.read_bytes()
    with pytest.raises(RuntimeError, match="the run failed"), TableWriter(path) as writer:
        writer.write(pa.table({"x": [3]}))
        msg = "the run failed"
        raise RuntimeError(msg)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no partial file left


def test_the_file_appears_whole_when_the_writer_closes(tmp_path: Path) -> None:
    path = tmp_path / "out.parquet"
    with TableWriter(path) as writer:
        writer.write(pa.table({"x": [1]}))
        assert not path.exists()
    assert read_table(path).to_pylist() == [{"x": 1}]


def _written_in_parts(table: pa.Table, path: Path, part_rows: int, arrow_stream: bool) -> None:
    """``table`` written as several Parquet row groups or Arrow batches."""
    if path.suffix == ".parquet":
        pq.write_table(table, path, row_group_size=part_rows)
    elif path.suffix == ".arrow":
        with pa.OSFile(str(path), "wb") as sink:
            opened = pa.ipc.new_stream if arrow_stream else pa.ipc.new_file
            with opened(sink, table.schema) as writer:
                writer.write_table(table, max_chunksize=part_rows)
    else:
        write_table(table, path)


def _stream_text(monkeypatch: pytest.MonkeyPatch, block_bytes: int = 64) -> None:
    """Stream every CSV and JSON lines file, in blocks of ``block_bytes``."""
    monkeypatch.setattr(stretch_io, "TEXT_STREAM_BYTES", 0)
    monkeypatch.setattr(stretch_io, "TEXT_BLOCK_BYTES", block_bytes)


@pytest.mark.parametrize(
    ("extension", "arrow_stream"),
    [
        (".csv", False),
        (".csv", True),
        (".jsonl", False),
        (".jsonl", True),
        (".parquet", False),
        (".arrow", False),
        (".arrow", True),
    ],
)
def test_input_file_batches_are_the_file_in_order(
    tmp_path: Path, extension: str, arrow_stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``arrow_stream``: Arrow's stream format, or a text file streamed in blocks."""
    monkeypatch.setattr(stretch_io, "BATCH_ROWS", 7)
    if arrow_stream and extension != ".arrow":
        _stream_text(monkeypatch)
    n = 60
    table = pa.table(
        {
            "ts": pa.array(range(0, 10 * n, 10), pa.int64()),
            "x": pa.array([i * 3 - 50 for i in range(n)], pa.int64()),
            "s": [f"w{i % 4}" for i in range(n)],
        }
    )
    path = tmp_path / f"t{extension}"
    _written_in_parts(table, path, 25, arrow_stream and extension == ".arrow")
    whole = read_table(path)
    file = InputFile(path)
    batches = list(file.batches())
    assert file.num_rows == n
    assert file.schema == whole.schema
    assert all(0 < b.num_rows <= 7 for b in batches)
    assert pa.concat_tables(batches).equals(whole)
    assert pa.concat_tables(file.batches(["ts"])).equals(whole.select(["ts"]))
    assert file.read().equals(whole)


def test_parquet_batches_hold_one_row_group_at_a_time(tmp_path: Path) -> None:
    """Arrow's reader over several row groups buffers every group it read; ours does not."""
    groups, rows = 16, 50_000
    path = tmp_path / "big.parquet"
    table = pa.table({"ts": pa.array(range(groups * rows), pa.int64()), "x": [1.5] * groups * rows})
    pq.write_table(table, path, row_group_size=rows, compression="none")
    del table
    group_bytes = rows * 16
    base, most = pa.total_allocated_bytes(), 0
    count = 0
    for batch in InputFile(path).batches():
        count += batch.num_rows
        most = max(most, pa.total_allocated_bytes() - base)
    assert count == groups * rows
    assert most < 4 * group_bytes  # the whole file would be 16


@pytest.mark.parametrize("extension", [".csv", ".jsonl"])
def test_a_large_text_file_is_read_a_block_at_a_time(
    tmp_path: Path, extension: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = 400_000
    path = tmp_path / f"big{extension}"
    table = pa.table(
        {
            "ts": pa.array(range(rows), pa.int64()),
            "x": [i / 4 for i in range(rows)],
            "s": ["ab"] * rows,
        }
    )
    write_table(table, path)
    _stream_text(monkeypatch, block_bytes=1 << 14)
    file = InputFile(path)
    base, most, batches = pa.total_allocated_bytes(), 0, 0
    for _ in file.batches():
        batches += 1
        most = max(most, pa.total_allocated_bytes() - base)
    assert batches > 10  # blocks of 16 KiB, not the whole file
    assert most < table.nbytes / 8  # a few blocks read ahead: about 0.65 MB of 8.8 here
    assert file.num_rows == rows
    assert pa.concat_tables(file.batches()).equals(table)


def test_a_block_that_needs_other_types_makes_the_file_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first blocks say int64 and date; a later one says double and text: the whole
    file's types (read whole) win."""
    lines = ["ts,i,d"] + [f"{k},{k},2024-01-01" for k in range(50)] + ["50,1.5,later"]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n")
    _stream_text(monkeypatch)
    file = InputFile(path)
    whole = read_table(path)
    assert whole.schema.field("i").type == pa.float64()
    assert file.schema == whole.schema
    assert pa.concat_tables(file.batches()).equals(whole)


_CSV_VALUES = {
    "int": st.integers(-(2**40), 2**40).map(str),
    "float": st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr),
    "bool": st.sampled_from(["true", "false"]),
    "empty": st.just(""),
    "word": st.sampled_from(["a", "NA", "x y", "nan"]),
    "date": st.sampled_from(["2024-01-01", "2023-12-31"]),
}


@settings(max_examples=60, deadline=None)
@given(
    columns=st.lists(
        st.lists(st.sampled_from(sorted(_CSV_VALUES)), min_size=1, max_size=3),
        min_size=1,
        max_size=3,
    ),
    rows=st.integers(1, 40),
    data=st.data(),
)
def test_a_streamed_csv_reads_as_the_whole_file_does(
    tmp_path_factory: pytest.TempPathFactory,
    columns: list[list[str]],
    rows: int,
    data: st.DataObject,
) -> None:
    """Columns whose values change kind down the file, in blocks of a few rows."""
    values = [
        [data.draw(st.one_of(*(_CSV_VALUES[kind] for kind in kinds))) for _ in range(rows)]
        for kinds in columns
    ]
    header = ",".join(f"c{j}" for j in range(len(columns)))
    lines = [header] + [",".join(column[r] for column in values) for r in range(rows)]
    path = tmp_path_factory.mktemp("csv") / "t.csv"
    path.write_text("\n".join(lines) + "\n")
    try:
        whole = read_table(path)
    except InputError:
        return  # e.g. a one-column file of empty lines only
    with pytest.MonkeyPatch.context() as patch:
        _stream_text(patch)
        file = InputFile(path)
        assert file.schema == whole.schema
        streamed = pa.concat_tables([*file.batches(), whole.schema.empty_table()])
        assert _nan_as_text(streamed.to_pylist()) == _nan_as_text(whole.to_pylist())


def _nan_as_text(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Rows with NaN as ``"NaN"`` (NaN is equal to nothing, itself included)."""
    return [
        {k: "NaN" if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
        for row in rows
    ]


def test_a_later_batch_names_its_row_in_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stretch_io, "BATCH_ROWS", 10)
    stamps = [f"2024-05-01T12:00:{i:02d}Z" for i in range(40)]
    stamps[33] = "noon"
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"ts": stamps}), path, row_group_size=20)
    with pytest.raises(InputError, match=r"t.parquet: row 34, column 'ts': 'noon' is not ISO"):
        list(InputFile(path).batches())


def test_conform_names_rows_after_an_offset() -> None:
    table = pa.table({"ts": pa.array([1, 2, 3], pa.int64()), "x": [1.0, 2.5, 3.0]})
    with pytest.raises(SchemaError, match=r"f.parquet: row 1002, column 'x'"):
        conform(table, Schema.of(x="int"), "f.parquet", row_offset=1000)


def test_a_write_deletes_partial_files_their_killed_writers_left(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])  # a process that has ended
    dead.wait()
    left = tmp_path / f".o.parquet.{dead.pid}.partial"
    running = tmp_path / f".o.parquet.{os.getppid()}.partial"  # a writer still at work
    other = tmp_path / f".p.parquet.{dead.pid}.partial"  # another file's
    for path in (left, running, other):
        path.write_bytes(b"half a file")
    write_table(pa.table({"ts": pa.array([1], pa.int64())}), tmp_path / "o.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["o.parquet", running.name, other.name]
    )


@pytest.mark.parametrize("extension", [".csv", ".jsonl"])
@pytest.mark.parametrize(
    ("ts", "in_order"),
    [
        ([1, 2, 2, 5] * 1 + list(range(6, 300)), True),
        (list(range(300)) + [299, 100], False),  # the last block steps back
        ([5, 1, *range(300)], False),
        ([f"2024-05-01T12:00:{s:02}Z" for s in range(60)] * 2, False),  # read as timestamps
        (["a"] * 300, None),  # text: not known (the replay's pass names the row)
    ],
)
def test_a_streamed_text_file_knows_its_ts_order_from_the_type_pass(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    extension: str,
    ts: list[object],
    in_order: bool | None,
) -> None:
    """The pass that checks the types finds the order too, so the CLI needs no ts pass."""
    path = tmp_path / f"t{extension}"
    write_table(pa.table({"ts": ts, "x": list(range(len(ts)))}), path)
    _stream_text(monkeypatch, block_bytes=256)
    assert InputFile(path).in_ts_order is in_order
    monkeypatch.setattr(stretch_io, "TEXT_STREAM_BYTES", 1 << 30)
    assert InputFile(path).in_ts_order is None  # read whole: not known
