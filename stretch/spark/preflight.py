"""What ``stretch pipeline`` checks before it starts Spark, so a mistake costs a second.

Spark takes tens of seconds to start and reports a bad input as hundreds of lines of
Java and Python traces. Everything that can be known without it is checked first, and
each failure is one ``InputError`` naming the file, column or option and what would fix
it:

* each input directory exists and holds files, every file (``stretch.spark.files``: those
  directly in it, names not starting with ``_`` or ``.``) is Parquet (its footer is read),
  and each file's Parquet schema has the operator's columns in types it accepts (the rules
  of ``stretch.model.schema.conform``, which ``stretch replay`` applies);
* with ``--url``, each sidecar answers and accepts the token.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq

from stretch.client import ServiceError, StretchClient
from stretch.errors import InputError
from stretch.merge import split_urls
from stretch.model.schema import TS, ColumnType, Schema
from stretch.operators.catalog import CATALOG, build
from stretch.spark.files import input_files

__all__ = ["CHECK_TIMEOUT_S", "Feed", "check_inputs", "check_sidecars", "expected_columns"]

CHECK_TIMEOUT_S = 5.0
"""How long a sidecar has to answer a check."""
_UNAUTHORIZED = (401, 403)


@dataclass(frozen=True)
class Feed:
    """One source of the operator and the files that feed it, in the order they are read.

    Attributes:
        source: The operator's REST source index.
        directory: The input directory.
        files: Its input files, by name.
        rows: Each file's row count (from its Parquet footer).
        schema: The payload columns the source takes.

    """

    source: int
    directory: Path
    files: tuple[Path, ...]
    rows: tuple[int, ...]
    schema: Schema


def expected_columns(schema: Schema) -> str:
    """``ts (long ms or timestamp), x (int), y (float)``: what a source needs."""
    return ", ".join([f"{TS} (long ms or timestamp)", *(f"{n} ({k.value})" for n, k in schema)])


def check_inputs(operator: str, params: Mapping[str, str], inputs: Sequence[Path]) -> list[Feed]:
    """Check the input directories against the operator; return one feed per source.

    Raises:
        InputError: naming the directory, file or column and what would fix it (also for
            an unknown operator or parameter).

    """
    op = build(operator, params)
    schemas = op.inputs[:1] if CATALOG[operator].one_stream else op.inputs
    if len(inputs) != len(schemas):
        msg = (
            f"operator {operator!r} takes {len(schemas)} --input director"
            f"{'y' if len(schemas) == 1 else 'ies'} (one per source), got {len(inputs)}"
        )
        raise InputError(msg)
    feeds = []
    for source, (directory, schema) in enumerate(zip(inputs, schemas, strict=True)):
        files = _files(directory)
        where = f"source {source} of {operator!r}"
        rows = tuple(_check_file(path, schema, where) for path in files)
        feeds.append(Feed(source, directory, tuple(files), rows, schema))
    return feeds


def _files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        what = "is not a directory" if directory.exists() else "does not exist"
        msg = f"--input {directory} {what}; give a directory of Parquet files"
        raise InputError(msg)
    subdirectories = [
        p for p in directory.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))
    ]
    if subdirectories:
        msg = (
            f"--input {directory} holds the directory {subdirectories[0].name!r}; the pipeline "
            "reads only the files directly in an input directory: move it out (or name it "
            "with a leading '_')"
        )
        raise InputError(msg)
    files = input_files(directory)
    if not files:
        msg = (
            f"--input {directory} holds no input files (names starting with '_' or '.' are "
            "skipped); put the source's Parquet files in it"
        )
        raise InputError(msg)
    return files


def _check_file(path: Path, schema: Schema, where: str) -> int:
    """Check one file's footer and schema; return its row count."""
    try:
        metadata = pq.read_metadata(path)
        arrow = metadata.schema.to_arrow_schema()
    except (OSError, pa.ArrowException) as exc:
        msg = (
            f"{path} is not a Parquet file ({exc}); every file of an input directory is "
            "read as Parquet: move it out of the directory (or rename it with a leading '_')"
        )
        raise InputError(msg) from exc
    names = arrow.names
    for name, kind in [(TS, None), *schema]:
        if name not in names:
            msg = (
                f"{path}: missing column {name!r} (has {', '.join(names)}); {where} needs "
                f"{expected_columns(schema)}"
            )
            raise InputError(msg)
        if names.count(name) > 1:
            msg = f"{path}: column {name!r} appears {names.count(name)} times; names must be unique"
            raise InputError(msg)
        actual = arrow.field(name).type
        if not _fits(actual, kind):
            want = "a long in ms or a timestamp" if kind is None else kind.value
            msg = (
                f"{path}: column {name!r} is {actual}, not {want}; {where} needs "
                f"{expected_columns(schema)}"
            )
            raise InputError(msg)
    return int(metadata.num_rows)


def _fits(actual: pa.DataType, kind: ColumnType | None) -> bool:
    """Whether a column of type ``actual`` can be read as ``kind`` (None: ``ts``).

    The type rules of ``stretch.model.schema.conform``; values are checked when read.
    """
    if kind is None:
        return bool(pa.types.is_integer(actual) or pa.types.is_timestamp(actual))
    target = kind.arrow
    return bool(
        actual == target
        or pa.types.is_null(actual)
        or (pa.types.is_integer(actual) and (kind in (ColumnType.INT, ColumnType.FLOAT)))
        or (pa.types.is_floating(actual) and kind is ColumnType.FLOAT)
        or (
            kind is ColumnType.STR
            and (pa.types.is_dictionary(actual) or pa.types.is_large_string(actual))
        )
    )


def check_sidecars(url: str, token: str | None) -> None:
    """Check that each sidecar of ``url`` answers and accepts ``token``.

    Raises:
        InputError: naming the sidecar and what to do (start it, fix the URL, the token).

    """
    try:
        urls = split_urls(url)
    except ValueError as exc:
        msg = f"--url: {exc}"
        raise InputError(msg) from None
    for one in urls:
        with StretchClient(one, token=token, timeout_s=CHECK_TIMEOUT_S) as client:
            try:
                client.operators()
            except httpx.HTTPError as exc:
                msg = (
                    f"--url {one}: no sidecar answers ({type(exc).__name__}: {exc}); start "
                    "one with 'stretch serve' or fix the URL"
                )
                raise InputError(msg) from None
            except ServiceError as exc:
                if exc.status not in _UNAUTHORIZED:
                    msg = f"--url {one}: the sidecar answered {exc}"
                    raise InputError(msg) from None
                fix = (
                    "the token in --token-file is not its token"
                    if token
                    else "it needs a token: give --token-file"
                )
                msg = f"--url {one}: the sidecar refused the request ({exc}); {fix}"
                raise InputError(msg) from None
