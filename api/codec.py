"""Batches on the wire: Arrow IPC streams and JSON rows in, JSON rows or Arrow out.

A batch body is decoded to an Arrow table shaped like the source's schema (``ts`` first);
checking the types is ``stretch.model.schema.conform``'s job, done by the runtime on ``add``.
Rows of a batch are put in ``ts`` order (a stable sort: rows of one ``ts`` keep their
order), since Spark micro-batches arrive unsorted.

Float columns may hold NaN and +-Infinity: the runtime orders them (NaN after +inf,
``stretch.model.order``) and the joins compare them as the reference does, as ``stretch
replay`` does with a Parquet file holding them. An Arrow body carries them as values. JSON
has no such numbers, so a JSON body spelling ``NaN``, ``Infinity`` or a number beyond
float64 (``1e400``) is malformed (400), naming the row and column.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import ValidationError

from stretch.api.errors import TooLargeError, UnsupportedMediaError
from stretch.api.guard import ARROW_STREAM, JSON, media_type
from stretch.api.ipc import decoded_size
from stretch.api.json_body import DuplicateKeyError, loads_unique
from stretch.api.schemas import INT64_MAX, INT64_MIN, BatchRows
from stretch.errors import InputError, SchemaError
from stretch.model.schema import TS, Schema

__all__ = ["ARROW_STREAM", "ROWS_BODY", "decode_batch", "encode_arrow", "json_rows"]

ROWS_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            JSON: {"schema": BatchRows.model_json_schema()},
            ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}},
        },
    }
}
"""The OpenAPI body of a route taking rows (``openapi_extra``): the route reads the raw
body itself (``decode_batch``), so FastAPI cannot see it."""


@dataclass(frozen=True)
class _NotJsonNumber:
    """A number a JSON body spells but JSON cannot hold, kept until its row is known."""

    problem: str


class _Numbers:
    """``json.loads`` hooks that keep NaN, Infinity and float64 overflows as markers."""

    def __init__(self) -> None:
        self.first: _NotJsonNumber | None = None

    def _mark(self, problem: str) -> _NotJsonNumber:
        marker = _NotJsonNumber(problem)
        self.first = self.first or marker
        return marker

    def parse_constant(self, name: str) -> _NotJsonNumber:
        return self._mark(f"{name} is not a JSON number (send non-finite floats as Arrow)")

    def parse_float(self, text: str) -> float | _NotJsonNumber:
        value = float(text)
        if math.isfinite(value):
            return value
        return self._mark(f"{text} is beyond the range of a float64")


def _refuse_not_json_numbers(rows: list[dict[str, Any]], first: _NotJsonNumber, where: str) -> None:
    """Raise ``InputError`` naming the first row and column holding a marker of ``_Numbers``."""
    for row, values in enumerate(rows, 1):
        for column, value in values.items():
            if isinstance(value, _NotJsonNumber):
                msg = f"{where}: malformed JSON body: row {row}, column {column!r}: {value.problem}"
                raise InputError(msg)
    msg = f"{where}: malformed JSON body: {first.problem}"  # nested in a value
    raise InputError(msg)


def decode_batch(
    body: bytes, content_type: str, schema: Schema, where: str, max_decoded_bytes: int
) -> pa.Table:
    """The table a batch body holds: Arrow IPC stream or JSON ``{"rows": [...]}``.

    Args:
        body: The request body.
        content_type: Its ``Content-Type``.
        schema: The source's payload columns (used to shape JSON rows and empty batches).
        where: What the batch is for, for messages ("source 1 of 'j'").
        max_decoded_bytes: The most bytes an Arrow stream may decode to, checked from its
            metadata before anything is decompressed.

    Raises:
        InputError: a malformed body.
        TooLargeError: an Arrow stream that decodes to more than ``max_decoded_bytes``.
        SchemaError: JSON rows whose values do not form typed columns.
        UnsupportedMediaError: any other content type.

    """
    media = media_type(content_type)
    if media == ARROW_STREAM:
        try:
            size = decoded_size(body)
            if size > max_decoded_bytes:
                msg = (
                    f"{where}: the Arrow stream decodes to {size} bytes, more than the "
                    f"limit of {max_decoded_bytes}; send smaller batches"
                )
                raise TooLargeError(msg)
            table = pa.ipc.open_stream(pa.BufferReader(body)).read_all()
            table.validate(full=True)  # offsets in bounds, strings valid UTF-8
            _ = table.column_names  # names valid UTF-8 (UnicodeDecodeError otherwise)
        except (pa.ArrowException, OSError, ValueError) as exc:
            msg = f"{where}: malformed Arrow IPC stream: {exc}"
            raise InputError(msg) from exc
        return table
    if media != JSON:
        msg = f"{where}: unsupported Content-Type {media!r}; send JSON or {ARROW_STREAM}"
        raise UnsupportedMediaError(msg)
    numbers = _Numbers()
    try:
        parsed = loads_unique(
            body, parse_constant=numbers.parse_constant, parse_float=numbers.parse_float
        )
        rows = BatchRows.model_validate(parsed).rows
    except DuplicateKeyError as exc:
        place = "the body" if exc.key == "rows" else f"row {exc.objects}"
        msg = f"{where}: {place}: {exc}; give each column once"
        raise SchemaError(msg) from exc
    except RecursionError:
        msg = f"{where}: malformed JSON body: nested too deeply"
        raise InputError(msg) from None
    except (ValueError, ValidationError) as exc:
        detail = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        msg = f'{where}: malformed JSON body (want {{"rows": [{{...}}]}}): {detail}'
        raise InputError(msg) from exc
    if numbers.first is not None:
        _refuse_not_json_numbers(rows, numbers.first, where)
    return _rows_table(rows, schema, where)


def _rows_table(rows: list[dict[str, Any]], schema: Schema, where: str) -> pa.Table:
    if not rows:
        return schema.empty_table()
    names = [TS, *schema.names]
    arrays = {}
    for name in names:
        values = [row.get(name) for row in rows]
        try:
            arrays[name] = pa.array(values)
        except UnicodeEncodeError as exc:
            row = next(i for i, v in enumerate(values) if isinstance(v, str) and _unpaired(v))
            msg = (
                f"{where}: malformed JSON body: row {row + 1}, column {name!r}: the string "
                "holds an unpaired surrogate (not valid Unicode)"
            )
            raise InputError(msg) from exc
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            outside = [
                i
                for i, v in enumerate(values)
                if isinstance(v, int) and not INT64_MIN <= v <= INT64_MAX
            ]
            if outside:
                msg = (
                    f"{where}: row {outside[0] + 1}, column {name!r}: integer "
                    f"{values[outside[0]]} is outside the int64 range"
                )
                raise SchemaError(msg) from exc
            kinds = sorted({type(v).__name__ for v in values})
            msg = f"{where}: column {name!r} mixes value types {', '.join(kinds)}"
            raise SchemaError(msg) from exc
    return pa.table(arrays)


def _unpaired(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def json_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts; non-finite floats become null (JSON has no NaN)."""
    columns = [
        pc.if_else(pc.is_finite(c), c, None) if pa.types.is_floating(c.type) else c
        for c in table.columns
    ]
    rows: list[dict[str, Any]] = pa.Table.from_arrays(columns, names=table.column_names).to_pylist()
    return rows


def encode_arrow(table: pa.Table) -> bytes:
    """``table`` as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())
