"""Read and write tables by file extension: CSV, JSON lines, Arrow IPC and Parquet.

The CLI's ``replay --input PATH`` and ``--output PATH`` go through these two functions, so
every failure is an :class:`~stretch.errors.InputError` whose one-line message names the
file and, where it can be known, the line and column.

Strings stay strings: readers never turn a text column into timestamps or dates, whatever
its values look like, except the event time ``ts``: ISO 8601 text there (``2024-05-01
12:00:00.250``, with an optional zone) reads as a timestamp, which ``conform`` turns into
int64 ms (a zoneless one is UTC). Parquet and Arrow timestamps are kept as they are.
CSV columns otherwise get pyarrow's type inference (``true`` and ``false`` are booleans,
an empty unquoted field is null); the CSV writer prints floats with the shortest text
that parses back to the same double, always with a ``.`` or an exponent so that a float
column never reads back as integers.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from stretch._processes import running
from stretch.errors import InputError, SchemaError, StretchError
from stretch.model.schema import TS, Schema, conform

__all__ = [
    "FORMATS",
    "InputFile",
    "TableWriter",
    "csv_text",
    "read_table",
    "remove_partial_files",
    "write_table",
]

FORMATS: tuple[str, ...] = (".csv", ".jsonl", ".arrow", ".parquet")
"""The file extensions :func:`read_table` and :func:`write_table` accept."""

_ARROW_FILE_MAGIC = b"ARROW1"

_CONTROL_CHARACTER = r"[\x00-\x1f]"

# A float rendered as an optional sign and digits only ("1", "-0") needs a ".0".
_INTEGRAL_TEXT = r"^-?[0-9]+$"
# A CSV field holding one of these (or empty: unquoted, that reads as null) is quoted.
_CSV_SPECIAL = r'[,"\n\r]'
_CSV_ROWS = 65_536
"""Rows rendered at once by ``csv_text``."""


def read_table(path: str | Path) -> pa.Table:
    """Read a table from a file, its format chosen by the file's extension.

    Args:
        path: A ``.csv`` (header row, inferred types), ``.jsonl`` (one JSON object a line;
            blank lines are skipped), ``.arrow`` (Arrow IPC, file or stream format) or
            ``.parquet`` file.

    Returns:
        The table, columns in file order. A CSV file holding only a header gives an empty
        table with those columns (of type null); an empty JSON lines file gives a table
        with no columns.

    Raises:
        InputError: The extension is unknown, the file is missing or unreadable, or its
            content is malformed; the message names the file and, where known, the line
            (1-based) and column.

    """
    path = _readable(path)
    with _input_errors(f"cannot read {path}"):
        return _event_time_text(_READERS[_extension(path)](path), path)


def _readable(path: str | Path) -> Path:
    """``path`` as a Path, checked to be a file in one of :data:`FORMATS`.

    Raises:
        InputError: the extension is unknown, or the file is missing.

    """
    path = Path(path)
    if _extension(path) not in _READERS:
        msg = f"cannot read {path}: unknown extension {path.suffix!r}, expected one of {FORMATS}"
        raise InputError(msg)
    if not path.is_file():
        msg = f"cannot read {path}: {'a directory' if path.is_dir() else 'no such file'}"
        raise InputError(msg)
    return path


BATCH_ROWS = 1 << 16
"""Rows :meth:`InputFile.batches` gives at most at once."""
TEXT_STREAM_BYTES = 256 << 20
"""CSV and JSON lines files larger than this are streamed by :class:`InputFile`."""
TEXT_BLOCK_BYTES = 1 << 20
"""The bytes of a streamed CSV or JSON lines file that Arrow parses at once (a block)."""


class InputFile:
    """A file to read a batch at a time, its format chosen by the file's extension.

    Parquet and Arrow IPC files are read as the batches are asked for, so a large input
    need not fit in memory. CSV and JSON lines files take their column types from the
    whole file: one larger than :data:`TEXT_STREAM_BYTES` is streamed too, with the types
    its first block gives, once a pass over the whole file found that they hold for every
    row (as they then are the whole file's types); other ones, and one where they do not
    hold, are read whole (with :func:`read_table`) when opened. Every batch is what
    :func:`read_table` would give for its rows: a text ``ts`` of ISO 8601 timestamps is
    read as timestamps.

    Args:
        path: A file in one of :data:`FORMATS`.

    Attributes:
        path: The file.
        schema: The columns of its batches (a text ``ts`` as a timestamp).
        num_rows: Its rows.
        in_ts_order: Whether its rows are in ``ts`` order, where the pass of a streamed
            CSV or JSON lines file found it out on the way (None: not known).
        in_memory: Whether it was read whole when opened (a CSV or JSON lines file not
            streamed).

    Raises:
        InputError: as :func:`read_table`, when opened or when a batch is read.

    """

    def __init__(self, path: str | Path) -> None:
        self.path = path = _readable(path)
        self._table: pa.Table | None = None
        self._parquet: pq.ParquetFile | None = None
        self._text: _TextFile | None = None
        self.in_ts_order: bool | None = None
        with _input_errors(f"cannot read {path}"):
            kind = _extension(path)
            if kind == ".parquet":
                self._parquet = pq.ParquetFile(path)
                schema, self.num_rows = self._parquet.schema_arrow, self._parquet.metadata.num_rows
            elif kind == ".arrow":
                reader = _arrow_reader(path)
                schema, self.num_rows = reader.schema, _arrow_rows(reader)
            elif path.stat().st_size > TEXT_STREAM_BYTES and (text := _TextFile.of(path)):
                self._text = text
                schema, self.num_rows = text.schema, text.num_rows
                self.in_ts_order = text.in_ts_order
            else:
                self._table = read_table(path)
                schema, self.num_rows = self._table.schema, self._table.num_rows
        self.in_memory = self._table is not None
        index = schema.get_field_index(TS)
        if index >= 0 and pa.types.is_string(schema.field(index).type):
            schema = schema.set(index, pa.field(TS, _ZONED))
        self.schema: pa.Schema = schema

    def read(self) -> pa.Table:
        """The whole file as one table, as :func:`read_table` reads it."""
        return self._table if self._table is not None else read_table(self.path)

    def batches(self, columns: list[str] | None = None) -> Iterator[pa.Table]:
        """The file's rows in order, at most :data:`BATCH_ROWS` at a time.

        Args:
            columns: Read only these columns (default: all).

        """
        done, iso = 0, None  # iso: whether a text ts is ISO 8601 time (its first batch says)
        for batch in self._read(columns):
            with _input_errors(f"cannot read {self.path}"):
                table = _event_time_text(batch, self.path, done, iso)
            if iso is None and batch.num_rows and TS in batch.column_names:
                iso = table.schema.field(TS).type != batch.schema.field(TS).type
            done += table.num_rows
            yield table

    def _read(self, columns: list[str] | None) -> Iterator[pa.Table]:
        """The file's rows as stored, cut into batches of at most ``BATCH_ROWS`` rows."""
        for table in self._stored(columns):
            for start in range(0, table.num_rows, BATCH_ROWS):
                yield table.slice(start, BATCH_ROWS)

    def _stored(self, columns: list[str] | None) -> Iterator[pa.Table]:
        """The file's rows as stored: the whole table, Parquet batches, Arrow batches."""
        if self._table is not None:
            yield self._table if columns is None else self._table.select(columns)
            return
        stored: Iterator[pa.RecordBatch]
        with _input_errors(f"cannot read {self.path}"):
            if self._parquet is not None:
                # A row group at a time: over several, the reader buffers every one it read.
                parquet = self._parquet
                stored = (
                    batch
                    for group in range(parquet.num_row_groups)
                    for batch in parquet.iter_batches(BATCH_ROWS, [group], columns)
                )
            elif self._text is not None:
                stored = self._text.batches(columns)
            else:
                stored = _arrow_batches(_arrow_reader(self.path))
        while True:
            with _input_errors(f"cannot read {self.path}"):
                batch = next(stored, None)
            if batch is None:
                return
            table = pa.Table.from_batches([batch])
            yield table if columns is None else table.select(columns)


def write_table(table: pa.Table, path: str | Path) -> None:
    """Write a table to a file, its format chosen by the file's extension.

    Missing parent directories are created; an existing file is replaced, once the new one
    is whole (see :class:`TableWriter`). Every format reads back equal with
    :func:`read_table` for integer, float, boolean and string columns, except that CSV
    keeps no types (they are inferred again, so a string column of numbers reads back as
    numbers) and an empty table written as JSON lines reads back with no columns.

    Args:
        table: The table to write.
        path: A path ending in one of :data:`FORMATS`; ``.arrow`` writes the IPC file
            format.

    Raises:
        InputError: The extension is unknown or the file cannot be written.
        SchemaError: JSON lines only: the table has duplicate column names or a value JSON
            cannot represent (e.g. binary or timestamps).

    """
    with TableWriter(path) as writer:
        writer.write(table)


class TableWriter:
    """Write a table to a file a piece at a time, its format chosen by the extension.

    The pieces (tables with the first one's schema) go to a hidden file beside ``path``
    (``.NAME.PID.partial``), which replaces ``path`` when the writer is closed: a reader
    never sees half a file, and a failed write leaves an existing file as it was. Used
    as a context manager, an exception deletes the partial file instead; a process that
    stops at once (the CLI on Ctrl-C) calls :func:`remove_partial_files`, and one killed
    outright leaves its partial file until the next write of ``path`` deletes it. Each piece is
    written as it comes, so the memory a write takes is that of one piece.

    Raises:
        InputError: The extension is unknown or the file cannot be written (here, or
            from ``write`` and ``close``).
        SchemaError: From ``write``, JSON lines only: see :func:`write_table`.

    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        format_writer = _WRITERS.get(_extension(self.path))
        if format_writer is None:
            msg = (
                f"cannot write {self.path}: unknown extension {self.path.suffix!r}, expected "
                f"one of {FORMATS}"
            )
            raise InputError(msg)
        self._format = format_writer
        self._partial = self.path.with_name(f".{self.path.name}.{os.getpid()}.partial")
        self._writer: _PieceWriter | None = None

    def write(self, table: pa.Table) -> None:
        """Append the rows of ``table`` (the first piece's schema is the file's)."""
        with self._errors():
            if self._writer is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                _remove_abandoned(self.path)
                _PARTIAL_FILES.add(self._partial)
                self._writer = self._format(self._partial, table.schema, self.path)
            self._writer.write(table)

    def close(self) -> None:
        """Finish the file and put it at ``path`` (an empty table if nothing was written)."""
        if self._writer is None:
            self.write(pa.table({}))
        assert self._writer is not None
        with self._errors():
            self._writer.close()
            os.replace(self._partial, self.path)
        _PARTIAL_FILES.discard(self._partial)

    def abort(self) -> None:
        """Drop what was written; ``path`` stays as it was."""
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
        with contextlib.suppress(OSError):  # e.g. its directory could not be made
            self._partial.unlink(missing_ok=True)
        _PARTIAL_FILES.discard(self._partial)

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is None:
            try:
                self.close()
            except BaseException:
                self.abort()
                raise
        else:
            self.abort()

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        return _input_errors(f"cannot write {self.path}")


@contextlib.contextmanager
def _input_errors(doing: str) -> Iterator[None]:
    """OSError and Arrow's errors as an InputError: ``doing``, then the error's first line."""
    try:
        yield
    except OSError as exc:
        msg = f"{doing}: {exc.strerror or _first_line(exc)}"
        raise InputError(msg) from exc
    except pa.ArrowException as exc:
        msg = f"{doing}: {_first_line(exc)}"
        raise InputError(msg) from exc


_PARTIAL_FILES: set[Path] = set()
"""The partial files of the writers open in this process."""


def _remove_abandoned(path: Path) -> None:
    """Delete the partial files of ``path`` whose process is gone (killed while writing)."""
    for partial in path.parent.glob(f".{glob.escape(path.name)}.*.partial"):
        pid = partial.name[len(path.name) + 2 : -len(".partial")]
        if pid.isdigit() and not running(int(pid)):
            with contextlib.suppress(OSError):
                partial.unlink()


def remove_partial_files() -> None:
    """Delete the partial files of every open :class:`TableWriter` (before ``os._exit``)."""
    for path in list(_PARTIAL_FILES):
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)


def _extension(path: Path) -> str:
    return path.suffix.lower()


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


_ZONED = pa.timestamp("ns", tz="UTC")
"""What ISO 8601 text in ``ts`` is read as: with a zone offset, or without one as UTC."""
_ZONE = r"[T ]\d\d(:?\d\d)*([.,]\d+)?(Z|[+-]\d\d(:?\d\d)?)$"
"""The end of ISO 8601 text that gives a zone: a time, then ``Z`` or an offset."""
_ISO = r"^\d{4}-\d\d-\d\d([T ]\d\d(:?\d\d)*([.,]\d+)?(Z|[+-]\d\d(:?\d\d)?)?)?$"
"""ISO 8601 text as ``ts`` takes it: a date, then optionally a time and a zone."""


def _event_time_text(
    table: pa.Table, path: Path, row_offset: int = 0, iso: bool | None = None
) -> pa.Table:
    """``table`` with a text ``ts`` of ISO 8601 timestamps read as timestamps.

    Each value with a zone offset is read in its zone, each without one as UTC, so a file
    may mix them. Text that is not such timestamps stays text (``conform`` then names the
    row), unless its first value is one: then the first value that is not is named (as
    row ``row_offset`` + its row in ``table``, 1-based). ``iso``, for a later part of a
    file, says what its first value was instead (False: ``ts`` stays text).
    """
    index = table.schema.get_field_index(TS)
    if index < 0 or not pa.types.is_string(table.schema.field(index).type) or iso is False:
        return table
    text = table.column(index)
    zoned = pc.match_substring_regex(text, _ZONE)
    try:  # each kind of value cast alone, the others standing in as the epoch
        with_zone = pc.if_else(zoned, text, "1970-01-01T00:00:00Z").cast(_ZONED)
        without = pc.if_else(zoned, "1970-01-01T00:00:00", text).cast(pa.timestamp("ns"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        each = pc.fill_null(pc.match_substring_regex(text, _ISO), False).to_numpy()
        if each.size and (iso or each[0]) and not each.all():
            row = int(np.argmin(each))
            msg = (
                f"{path}: row {row_offset + row + 1}, column 'ts': {text[row].as_py()!r} is not "
                "ISO 8601 time (e.g. 2024-05-01T12:00:00.250Z)"
            )
            raise InputError(msg) from None
        return table
    column = pc.if_else(zoned, with_zone, without.cast(_ZONED))
    return table.set_column(index, pa.field(TS, _ZONED), column)


def _temporal_columns(schema: pa.Schema) -> list[str]:
    """Columns read as dates or times that must stay text: all but a timestamp ``ts``."""
    return [
        field.name
        for field in schema
        if pa.types.is_temporal(field.type)
        and not (field.name == TS and pa.types.is_timestamp(field.type))
    ]


def _csv_convert(
    text_columns: list[str] | None = None, columns: list[str] | None = None
) -> pa_csv.ConvertOptions:
    # An empty unquoted field is null; ``""`` is the empty string. Nothing else is null,
    # so that ``nan`` reads back as a float and ``NA`` as a string.
    return pa_csv.ConvertOptions(
        null_values=[""],
        strings_can_be_null=True,
        quoted_strings_can_be_null=False,
        column_types=dict.fromkeys(text_columns or [], pa.string()),
        include_columns=columns,
    )


def _csv_parse(
    *, one_column: bool = False, on_invalid_row: Callable[[Any], str] | None = None
) -> pa_csv.ParseOptions:
    # In a one-column file an empty line is a null, not a blank line to skip.
    return pa_csv.ParseOptions(
        newlines_in_values=True,
        ignore_empty_lines=not one_column,
        invalid_row_handler=on_invalid_row,
    )


def _read_csv(path: Path) -> pa.Table:
    try:
        table = pa_csv.read_csv(path, parse_options=_csv_parse(), convert_options=_csv_convert())
    except pa.ArrowInvalid as exc:
        raise InputError(_locate_csv_error(path, exc)) from exc
    one_column = table.num_columns == 1
    temporal = _temporal_columns(table.schema)
    if one_column or temporal:
        table = pa_csv.read_csv(
            path,
            parse_options=_csv_parse(one_column=one_column),
            convert_options=_csv_convert(temporal),
        )
    return table


def _locate_csv_error(path: Path, exc: pa.ArrowInvalid) -> str:
    """Re-parse serially (row numbers are unknown in parallel) to name the bad row."""
    bad_rows: list[Any] = []

    def record(row: Any) -> str:
        bad_rows.append(row)
        return "error"

    try:
        pa_csv.read_csv(
            path,
            read_options=pa_csv.ReadOptions(use_threads=False),
            parse_options=_csv_parse(on_invalid_row=record),
            convert_options=_csv_convert(),
        )
    except pa.ArrowInvalid:
        if bad_rows and bad_rows[0].number is not None:
            row = bad_rows[0]
            # Arrow numbers records from 1 counting the header; data rows start after it.
            return (
                f"cannot read {path}: row {row.number - 1}: expected "
                f"{row.expected_columns} columns, got {row.actual_columns}"
            )
    return f"cannot read {path}: {_first_line(exc)}"


def _read_jsonl(path: Path) -> pa.Table:
    try:
        table = pa_json.read_json(path)
        # Arrow's JSON reader does not check that strings are UTF-8.
        table.validate(full=True)
    except pa.ArrowInvalid:
        # Arrow's messages count rows per block; the stdlib pass names the exact line.
        return _read_jsonl_line_by_line(path)
    temporal = _temporal_columns(table.schema)
    if not temporal:
        return table
    schema = pa.schema(
        pa.field(f.name, pa.string()) if f.name in temporal else f for f in table.schema
    )
    return pa_json.read_json(path, parse_options=pa_json.ParseOptions(explicit_schema=schema))


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _read_jsonl_line_by_line(path: Path) -> pa.Table:
    columns: dict[str, list[object]] = {}
    kinds: dict[str, str] = {}
    rows = 0
    with path.open("rb") as lines:
        for line_number, raw_line in enumerate(lines, start=1):
            try:
                line = raw_line.decode("utf-8")
            except UnicodeDecodeError as exc:
                msg = f"cannot read {path}: line {line_number}: not UTF-8 text"
                raise InputError(msg) from exc
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                msg = f"cannot read {path}: line {line_number}: invalid JSON: {exc.msg}"
                raise InputError(msg) from exc
            if not isinstance(record, dict):
                msg = (
                    f"cannot read {path}: line {line_number}: expected a JSON object, "
                    f"got {_json_kind(record)}"
                )
                raise InputError(msg)
            for name, value in record.items():
                kind = _json_kind(value)
                seen = kinds.setdefault(name, kind) if kind != "null" else kind
                if seen != kind:
                    msg = (
                        f"cannot read {path}: line {line_number}, column {name!r}: "
                        f"{kind} value in a column of {seen} values"
                    )
                    raise InputError(msg)
                columns.setdefault(name, [None] * rows).append(value)
            rows += 1
            for values in columns.values():
                if len(values) < rows:
                    values.append(None)
    arrays = {}
    for name, values in columns.items():
        try:
            arrays[name] = pa.array(values)
        except (pa.ArrowException, OverflowError) as exc:
            msg = f"cannot read {path}: column {name!r}: {_first_line(exc)}"
            raise InputError(msg) from exc
    return pa.table(arrays)


class _TextFile:
    """A CSV or JSON lines file read a block at a time, with the column types of its first.

    Built by :meth:`of`, which checks by a pass over the whole file that every block reads
    with those types. They are then the types :func:`read_table` infers from the whole
    file: it takes for each column the narrowest type that holds all its values, and the
    first block's type is the narrowest for part of them and holds all of them. The
    options are :func:`read_table`'s: dates and times other than a timestamp ``ts`` as
    text, and the empty lines of a one-column CSV as nulls.

    Args:
        path: The file.
        inferred: The types Arrow infers from its first block.

    Attributes:
        schema: The columns of its batches.
        num_rows: Its rows (counted by :meth:`of`).
        in_ts_order: Whether its ``ts`` is in order, found by :meth:`of` (see
            :class:`_TsOrder`).

    """

    def __init__(self, path: Path, inferred: pa.Schema) -> None:
        self.path = path
        self._one_column = len(inferred) == 1
        self._text_columns = _temporal_columns(inferred)
        self.schema = pa.schema(
            pa.field(f.name, pa.string()) if f.name in self._text_columns else f for f in inferred
        )
        self.num_rows = 0
        self.in_ts_order: bool | None = None

    @classmethod
    def of(cls, path: Path) -> _TextFile | None:
        """The file, or None if one of its blocks does not read with the first's types."""
        try:
            csv = _extension(path) == ".csv"
            inferred = (_csv_stream(path) if csv else _jsonl_stream(path)).schema
            if not len(inferred):  # JSON lines of empty objects: rows without columns
                return None
            text = cls(path, inferred)
            order = _TsOrder(path)
            for batch in text.batches(None):
                text.num_rows += batch.num_rows
                order.see(batch)
            text.in_ts_order = order.in_order
        except pa.ArrowInvalid:
            return None
        return text

    def batches(self, columns: list[str] | None) -> Iterator[pa.RecordBatch]:
        """The file's rows as Arrow parses them, a block at a time.

        Raises:
            pyarrow.ArrowInvalid: A block does not read with the first one's types.

        """
        if _extension(self.path) == ".csv":
            parse = _csv_parse(one_column=self._one_column)
            yield from _csv_stream(self.path, parse, _csv_convert(self._text_columns, columns))
            return
        for batch in _jsonl_stream(self.path, self.schema):
            selected = batch.select(columns) if columns is not None else batch
            selected.validate(full=True)  # Arrow's JSON reader does not check UTF-8
            yield selected


class _TsOrder:
    """Whether a file's ``ts`` is in order, seen a batch at a time by a pass over it.

    Attributes:
        in_order: True or False; None when not known: a ``ts`` that ``conform`` does not
            take as it is (e.g. ISO 8601 text, which the batches of :class:`InputFile`
            read as timestamps) or none at all.

    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._rows = 0
        self._last: int | None = None
        self.in_order: bool | None = True

    def see(self, batch: pa.RecordBatch) -> None:
        """Take in the file's next batch."""
        if self.in_order and batch.num_rows:
            try:
                table = pa.Table.from_batches([batch.select([TS])])
                ts = conform(table, Schema(()), str(self._path), self._rows).column(TS).to_numpy()
            except (KeyError, StretchError):
                self.in_order = None
            else:
                backwards = self._last is not None and ts[0] < self._last
                self.in_order = not backwards and bool(np.all(ts[1:] >= ts[:-1]))
                self._last = int(ts[-1])
        self._rows += batch.num_rows


def _csv_stream(
    path: Path,
    parse: pa_csv.ParseOptions | None = None,
    convert: pa_csv.ConvertOptions | None = None,
) -> pa.ipc.RecordBatchReader:
    """A CSV file in blocks of :data:`TEXT_BLOCK_BYTES` (default: ``read_table``'s options)."""
    return pa_csv.open_csv(
        path,
        read_options=pa_csv.ReadOptions(block_size=TEXT_BLOCK_BYTES),
        parse_options=parse or _csv_parse(),
        convert_options=convert or _csv_convert(),
    )


def _jsonl_stream(path: Path, schema: pa.Schema | None = None) -> pa.ipc.RecordBatchReader:
    """A JSON lines file in blocks of :data:`TEXT_BLOCK_BYTES` (default: inferred types)."""
    return pa_json.open_json(
        path,
        read_options=pa_json.ReadOptions(block_size=TEXT_BLOCK_BYTES),
        parse_options=pa_json.ParseOptions(
            explicit_schema=schema, unexpected_field_behavior="error" if schema else "infer"
        ),
    )


def _read_arrow(path: Path) -> pa.Table:
    return _arrow_reader(path).read_all()


def _arrow_reader(path: Path) -> pa.ipc.RecordBatchFileReader | pa.ipc.RecordBatchStreamReader:
    """A reader of an Arrow IPC file (file or stream format) through a memory map."""
    mapped = pa.memory_map(str(path))
    file_format = mapped.read(len(_ARROW_FILE_MAGIC)) == _ARROW_FILE_MAGIC
    mapped.seek(0)
    return pa.ipc.open_file(mapped) if file_format else pa.ipc.open_stream(mapped)


def _arrow_batches(
    reader: pa.ipc.RecordBatchFileReader | pa.ipc.RecordBatchStreamReader,
) -> Iterator[pa.RecordBatch]:
    """The reader's batches, each read when it is asked for."""
    if isinstance(reader, pa.ipc.RecordBatchFileReader):
        return (reader.get_batch(i) for i in range(reader.num_record_batches))
    return iter(reader)


def _arrow_rows(reader: pa.ipc.RecordBatchFileReader | pa.ipc.RecordBatchStreamReader) -> int:
    """The rows of an Arrow IPC file: from its footer, or by a pass over the stream format."""
    if isinstance(reader, pa.ipc.RecordBatchFileReader):
        return int(reader.count_rows())
    return sum(batch.num_rows for batch in reader)


def _read_parquet(path: Path) -> pa.Table:
    return pq.ParquetFile(path).read()


class _PieceWriter:
    """One format's writer into ``path``: ``write`` pieces, then ``close``.

    Its messages name ``shown``, the file the user asked for.
    """

    def __init__(self, path: Path, shown: Path) -> None:
        self.path = path
        self.shown = shown

    def write(self, table: pa.Table) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class _CsvWriter(_PieceWriter):
    def __init__(self, path: Path, schema: pa.Schema, shown: Path) -> None:
        super().__init__(path, shown)
        self._sink = path.open("w", encoding="utf-8", newline="")
        self._header = True

    def write(self, table: pa.Table) -> None:
        self._sink.writelines(csv_text(table, header=self._header))
        self._header = False

    def close(self) -> None:
        self._sink.close()


def csv_text(table: pa.Table, *, header: bool = True) -> Iterator[str]:
    """The table as CSV text, the header first, in chunks of rows (what ``.csv`` files hold).

    ``header=False`` leaves the header out (a later piece of the same file).

    A field is quoted only when it must be: a string that is empty (unquoted, that reads
    as null) or holds a comma, a quote or a line break. Nulls are empty fields, floats
    keep a ``.0`` when integral, booleans are ``true`` / ``false``; :func:`read_table`
    reads the text back as it was (with CSV's inferred types).
    """
    if header:
        names = _csv_column(pa.array(table.column_names, pa.string()))
        yield ",".join(names.to_pylist()) + "\n"
    if table.num_columns == 0:
        yield "\n" * table.num_rows
        return
    for batch in table.to_batches(max_chunksize=_CSV_ROWS):
        if not batch.num_rows:
            continue
        fields = [pc.fill_null(_csv_column(column), "") for column in batch.columns]
        lines = pc.binary_join_element_wise(*fields, ",")
        yield "\n".join(lines.to_pylist()) + "\n"


def _csv_column(column: pa.Array) -> pa.Array:
    """A column's values as CSV fields (``csv_text``); nulls stay null."""
    kind = column.type
    if pa.types.is_floating(kind):
        return _float_text(column)
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return pc.cast(column, pa.string())
    special = pc.or_(
        pc.equal(pc.utf8_length(column), 0), pc.match_substring_regex(column, _CSV_SPECIAL)
    )
    quoted = pc.binary_join_element_wise('"', pc.replace_substring(column, '"', '""'), '"', "")
    return pc.if_else(special, quoted, column)


def _float_text(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    text = pc.cast(column, pa.string())
    integral = pc.match_substring_regex(text, _INTEGRAL_TEXT)
    return pc.if_else(integral, pc.binary_join_element_wise(text, ".0", ""), text)


class _JsonlWriter(_PieceWriter):
    def __init__(self, path: Path, schema: pa.Schema, shown: Path) -> None:
        names = schema.names
        if len(set(names)) != len(names):
            msg = f"cannot write {shown}: duplicate column names {names} in JSON lines"
            raise SchemaError(msg)
        super().__init__(path, shown)
        # Each line is '{"name":value,...}' joined column-wise: no Python loop over rows.
        self._keys = [
            ("{" if i == 0 else ",") + json.dumps(name) + ":" for i, name in enumerate(names)
        ]
        self._sink = path.open("w", encoding="utf-8")

    def write(self, table: pa.Table) -> None:
        if not self._keys:
            self._sink.write("{}\n" * table.num_rows)
            return
        for batch in table.to_batches():
            parts: list[Any] = []
            for key, column in zip(self._keys, batch.columns, strict=True):
                parts += [key, _json_text(column, self.shown)]
            lines = pc.binary_join_element_wise(*parts, "}\n", "")
            self._sink.write("".join(lines.to_pylist()))

    def close(self) -> None:
        self._sink.close()


def _json_text(column: pa.Array, path: Path) -> pa.Array:
    """Render every value of a column as JSON text, nulls as ``null``."""
    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        text = pc.cast(column, pa.string())
    elif pa.types.is_floating(kind):
        # Python's json spells the non-finite floats NaN, Infinity and -Infinity.
        finite = pc.replace_substring(_float_text(column), "inf", "Infinity")
        text = pc.if_else(pc.is_nan(column), "NaN", finite)
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        text = _json_string(column)
    else:
        try:
            text = pa.array([json.dumps(value) for value in column.to_pylist()], pa.string())
        except TypeError as exc:
            msg = f"cannot write {path} as JSON lines: {exc}"
            raise SchemaError(msg) from exc
    return pc.fill_null(text, "null")


def _json_string(column: pa.Array) -> pa.Array:
    """Quote and escape strings as JSON does, non-ASCII characters kept as they are."""
    text = pc.replace_substring(column, "\\", "\\\\")
    text = pc.replace_substring(text, '"', '\\"')
    if pc.any(pc.match_substring_regex(text, _CONTROL_CHARACTER)).as_py():
        for code in range(0x20):
            text = pc.replace_substring(text, chr(code), json.dumps(chr(code))[1:-1])
    return pc.binary_join_element_wise('"', text, '"', "")


class _ArrowWriter(_PieceWriter):
    def __init__(self, path: Path, schema: pa.Schema, shown: Path) -> None:
        super().__init__(path, shown)
        self._sink = pa.OSFile(str(path), "wb")
        self._writer = pa.ipc.new_file(self._sink, schema)

    def write(self, table: pa.Table) -> None:
        self._writer.write_table(table)

    def close(self) -> None:
        try:
            self._writer.close()
        finally:
            self._sink.close()


class _ParquetWriter(_PieceWriter):
    def __init__(self, path: Path, schema: pa.Schema, shown: Path) -> None:
        super().__init__(path, shown)
        # Dictionary encoding pays for repeated strings; for numbers (event times, prices,
        # measurements) it only costs: about 40% of writing a numeric table.
        strings = [f.name for f in schema if pa.types.is_string(f.type)]
        self._writer = pq.ParquetWriter(path, schema, use_dictionary=strings)

    def write(self, table: pa.Table) -> None:
        self._writer.write_table(table)

    def close(self) -> None:
        self._writer.close()


_READERS: dict[str, Callable[[Path], pa.Table]] = {
    ".csv": _read_csv,
    ".jsonl": _read_jsonl,
    ".arrow": _read_arrow,
    ".parquet": _read_parquet,
}
_WRITERS: dict[str, Callable[[Path, pa.Schema, Path], _PieceWriter]] = {
    ".csv": _CsvWriter,
    ".jsonl": _JsonlWriter,
    ".arrow": _ArrowWriter,
    ".parquet": _ParquetWriter,
}
