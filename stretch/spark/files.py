"""The ``stretch-files`` source: a directory of Parquet files as a stream, in file name order.

Spark's own file source takes new files in modification-time order, and files written in
the same instant come in any order: a directory a batch job wrote (``part-00000``,
``part-00001``, ...) within one second then streams in a different order from run to run,
and a file with later event times read first makes the rows of the others late. This
source takes the files in the order of their names (Python string order: zero-pad
numbers), whatever their modification times, so every run sees the same stream.

* A file counts if it lies directly in the directory and its name does not start with
  ``_`` or ``.`` (``_SUCCESS``, ``.crc`` files and ``_checkpoint`` are skipped, as Spark
  skips them); every such file must be Parquet.
* An offset is ``{"file": NAME}``, the last file taken so far (``""`` before the first):
  a micro-batch takes the files whose names sort after it, in name order: at most
  ``maxFilesPerTrigger`` files and, with ``maxRowsPerTrigger``, no more files than fit in
  that many rows (counted from the files' Parquet footers), but always at least one. A
  file added later whose name sorts before the last one taken is never read: add files in
  name order.
* A read task reads consecutive files up to ``ROWS_PER_TASK`` rows (a larger file alone):
  every task costs Spark a fixed tens of milliseconds, so a directory of many small files
  is read in few tasks.
* The schema is ``ts`` (long, ms; a Parquet timestamp column is floored to ms) and payload
  columns of the types the sidecar knows (long, double, boolean, string). Each file is
  checked and cast as ``stretch replay`` checks its inputs (``stretch.model.schema.conform``):
  a missing column or a value of another type fails the read naming the file, the row and
  the column. Give the schema with ``.schema(...)`` to read only those columns; without it
  the columns are the first file's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from stretch.errors import InputError
from stretch.model.schema import TS, ColumnType, Schema, conform

__all__ = [
    "FILES",
    "OrderedFiles",
    "OrderedFilesReader",
    "batch_sizes",
    "files_per_batch",
    "input_files",
    "spark_schema",
]

FILES = "stretch-files"
"""The source's format name."""
FILE = "file"
"""The key of an offset naming the last file taken."""
ROWS_PER_BATCH = 65_536
"""Rows per record batch handed to Spark."""
ROWS_PER_TASK = 65_536
"""A read task takes as many consecutive files as hold this many rows (a larger file alone)."""

_SPARK: dict[ColumnType, DataType] = {
    ColumnType.INT: LongType(),
    ColumnType.FLOAT: DoubleType(),
    ColumnType.BOOL: BooleanType(),
    ColumnType.STR: StringType(),
}
_KINDS = {type(kind): column for column, kind in _SPARK.items()}


def input_files(directory: Path) -> list[Path]:
    """The files of ``directory`` the source reads, in the order it reads them (by name).

    Skips subdirectories and names starting with ``_`` or ``.``. O(files log files).
    """
    return sorted(
        (p for p in directory.iterdir() if not p.name.startswith(("_", ".")) and p.is_file()),
        key=lambda p: p.name,
    )


def files_per_batch(rows: Iterable[int], max_files: int | None, max_rows: int | None) -> int:
    """How many of the next files (their row counts, in reading order) one micro-batch takes.

    At most ``max_files``, and no more than fit in ``max_rows`` rows (None: no such limit),
    but at least one file when there is one. Reads ``rows`` only as far as it must.
    """
    taken = total = 0
    for n in rows:
        if max_files is not None and taken >= max_files:
            break
        if max_rows is not None and taken and total + n > max_rows:
            break
        taken += 1
        total += n
    return taken


def batch_sizes(rows: Sequence[int], max_files: int | None, max_rows: int | None) -> list[int]:
    """The files of each micro-batch that reads files of ``rows`` rows, from the first on."""
    sizes: list[int] = []
    at = 0
    while at < len(rows):  # each batch reads its files' rows and the next one's: O(files)
        sizes.append(files_per_batch((rows[i] for i in range(at, len(rows))), max_files, max_rows))
        at += sizes[-1]
    return sizes


def spark_schema(schema: Schema) -> StructType:
    """The Spark schema of a stream of ``schema``: ``ts`` (long ms), then the payload."""
    fields = [StructField(TS, LongType())]
    fields += [StructField(name, _SPARK[kind]) for name, kind in schema]
    return StructType(fields)


def _payload(schema: StructType, path: str) -> Schema:
    """The payload ``Schema`` of a Spark schema whose first column is ``ts`` (long)."""
    names = schema.fieldNames()
    if not names or names[0] != TS or not isinstance(schema.fields[0].dataType, LongType):
        msg = f"{FILES} source at {path}: the schema must start with {TS!r} (long), got {names}"
        raise InputError(msg)
    columns = []
    for field in schema.fields[1:]:
        kind = _KINDS.get(type(field.dataType))
        if kind is None:
            msg = (
                f"{FILES} source at {path}: column {field.name!r} is "
                f"{field.dataType.simpleString()}; the sidecar takes long, double, boolean or "
                "string columns"
            )
            raise InputError(msg)
        columns.append((field.name, kind))
    return Schema(tuple(columns))


def _inferred(arrow: pa.Schema) -> Schema:
    """The payload columns of a Parquet schema, each as the closest type the sidecar knows."""
    columns = []
    for field in arrow:
        if field.name == TS:
            continue
        kind = ColumnType.holding(field.type)
        if kind is not None:
            columns.append((field.name, kind))
    return Schema(tuple(columns))


class OrderedFiles(DataSource):
    """A directory of Parquet files, streamed in file name order (option ``path``)."""

    @classmethod
    def name(cls) -> str:
        """The format name, ``stretch-files``."""
        return FILES

    def _directory(self) -> Path:
        path = self.options.get("path")
        if not path:
            msg = f"the {FILES} source needs a directory: .load(DIR) or the option 'path'"
            raise InputError(msg)
        return Path(path)

    def schema(self) -> StructType:
        """``ts`` and the payload columns of the first file (in name order)."""
        directory = self._directory()
        files = input_files(directory)
        if not files:
            msg = f"{directory} holds no input files; give the schema with .schema(...)"
            raise InputError(msg)
        return spark_schema(_inferred(pq.read_schema(files[0])))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        """The stream of the directory's files, in name order."""
        return OrderedFilesReader(
            self._directory(),
            schema,
            self._limit("maxFilesPerTrigger"),
            self._limit("maxRowsPerTrigger"),
        )

    def _limit(self, option: str) -> int | None:
        """An option that caps a micro-batch: an integer >= 1, None if not given."""
        text = self.options.get(option)
        if not text:
            return None
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            msg = f"option {option!r} must be an integer >= 1, got {text!r}"
            raise InputError(msg)
        return value


@dataclass
class FilePart(InputPartition):
    """One read task: consecutive files, read in this order."""

    paths: tuple[str, ...]


class OrderedFilesReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream of a directory's files in name order; offsets are ``{"file": NAME}``.

    Args:
        directory: The directory.
        schema: The query's schema (``ts`` long first).
        max_files: The most files a micro-batch takes (None: no such limit).
        max_rows: The most rows a micro-batch takes, in whole files, at least one (None: no
            such limit).

    """

    def __init__(
        self,
        directory: Path,
        schema: StructType,
        max_files: int | None,
        max_rows: int | None = None,
    ) -> None:
        self.directory = directory
        self.schema = schema
        self.payload = _payload(schema, str(directory))
        self.max_files = max_files
        self.max_rows = max_rows
        self._target: str | None = None
        self._rows: dict[str, int] = {}  # file name -> its rows, from its footer

    def _names(self) -> list[str]:
        return [p.name for p in input_files(self.directory)]

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        """Before the first file."""
        return {FILE: ""}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        """``maxRowsPerTrigger`` rows or ``maxFilesPerTrigger`` files if set, else all."""
        if self.max_rows is not None:
            return ReadMaxRows(self.max_rows)
        if self.max_files is not None:
            return ReadMaxFiles(self.max_files)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        """Take the files present now, and no later one."""
        names = self._names()
        self._target = names[-1] if names else ""

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        """The next files after ``start`` in name order, within the limit and the target."""
        after = str(start[FILE])
        new = [n for n in self._names() if n > after]
        if self._target is not None:
            new = [n for n in new if n <= self._target]
        if not isinstance(limit, ReadAllAvailable):  # the options' limits, both
            rows: Iterable[int] = (
                (self._file_rows(n) for n in new) if self.max_rows is not None else [0] * len(new)
            )
            new = new[: files_per_batch(rows, self.max_files, self.max_rows)]
        return {FILE: new[-1] if new else after}

    def _file_rows(self, name: str) -> int:
        """The rows of file ``name``, from its Parquet footer (read once)."""
        if name not in self._rows:
            path = self.directory / name
            try:
                self._rows[name] = pq.read_metadata(path).num_rows
            except (OSError, pa.ArrowException) as exc:
                raise _unreadable(path, exc) from exc
        return self._rows[name]

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The files in ``(start, end]``, in name order, in read tasks of ``ROWS_PER_TASK`` rows.

        Grouped as ``batch_sizes`` groups a micro-batch's files under a rows limit.
        """
        low, high = str(start[FILE]), str(end[FILE])
        names = [n for n in self._names() if low < n <= high]
        parts: list[InputPartition] = []
        at = 0
        for size in batch_sizes([self._file_rows(n) for n in names], None, ROWS_PER_TASK):
            parts.append(FilePart(tuple(str(self.directory / n) for n in names[at : at + size])))
            at += size
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The rows of a task's files, checked and cast to the schema (runs on an executor)."""
        assert isinstance(partition, FilePart)
        for path in partition.paths:
            yield from _read(path, self.payload)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the files stay where they are."""


def _read(path: str, payload: Schema) -> Iterator[pa.RecordBatch]:
    names = [TS, *payload.names]
    try:
        table = pq.read_table(path, columns=[c for c in names if c in pq.read_schema(path).names])
    except (OSError, pa.ArrowException) as exc:
        raise _unreadable(path, exc) from exc
    yield from conform(table, payload, path).to_batches(ROWS_PER_BATCH)


def _unreadable(path: str | Path, exc: Exception) -> InputError:
    return InputError(f"{path}: cannot read it as Parquet: {exc}")
