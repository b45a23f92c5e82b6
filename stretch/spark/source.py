"""The ``stretch`` data source: one name for the writer and the readers.

``stretch.spark.register(spark)`` registers it with a session; then
``df.writeStream.format("stretch")`` feeds an operator's source and
``spark.readStream.format("stretch")`` (or ``spark.read``) reads its output. See
docs/spark.md.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
)
from pyspark.sql.types import StructType

from stretch.client import ServiceError
from stretch.errors import InputError
from stretch.spark.files import OrderedFiles
from stretch.spark.options import ReaderOptions, WriterOptions
from stretch.spark.reader import StretchBatchReader, StretchStreamReader, output_schema
from stretch.spark.writer import StretchStreamWriter

__all__ = ["NAME", "StretchDataSource", "register"]

NAME = "stretch"
"""The data source's format name."""

_NOT_FOUND = 404


class StretchDataSource(DataSource):
    """Reads an operator's output and writes into one of its sources, on a sidecar."""

    @classmethod
    def name(cls) -> str:
        """The format name, ``stretch``."""
        return NAME

    def schema(self) -> StructType:
        """The reader's schema: the operator's output columns (``ts`` first), ``offset``."""
        return output_schema(ReaderOptions.parse(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        """The streaming writer; creates the operator first if ``create`` says how."""
        options = WriterOptions.parse(self.options)
        if options.create is not None:
            _create(options)
        return StretchStreamWriter(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        """The streaming reader of the operator's output log."""
        return StretchStreamReader(ReaderOptions.parse(self.options), schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        """The batch reader: what the output log holds now."""
        return StretchBatchReader(ReaderOptions.parse(self.options), schema)


def _create(options: WriterOptions) -> None:
    """Create the operator unless it exists as ``create`` says and its source is open.

    Raises:
        InputError: an operator of that name exists as another operator, with other
            parameters, or with this writer's source closed (a finished run): naming it
            and the way out.

    """
    assert options.create is not None
    body = dict(options.create)
    with options.client() as client:
        try:
            status = client.status(options.operator)
        except ServiceError as exc:
            if exc.status != _NOT_FOUND:
                raise
        else:
            _reusable(options, body, status)
            return
        try:
            client.create_operator(
                options.operator,
                str(body["operator"]),
                body.get("params"),
                parallelism=int(body.get("parallelism", 1)),
                max_parallelism=body.get("max_parallelism"),
                capacity=body.get("capacity"),
                allowed_lateness_ms=options.allowed_lateness_ms,
            )
        except ServiceError as exc:
            if exc.status != 409:  # another writer created it meanwhile
                raise


def _reusable(options: WriterOptions, body: dict[str, Any], status: dict[str, Any]) -> None:
    """Check that the existing operator ``status`` is the one ``create`` describes, open.

    Raises:
        InputError: naming the operator, what differs, and the way out.

    """
    name = options.operator
    way_out = (
        f"delete it first (DELETE /v1/operators/{name}, StretchClient.delete_operator) or "
        "give the writer a new name (option 'operator')"
    )
    asked = (str(body["operator"]), {str(k): str(v) for k, v in (body.get("params") or {}).items()})
    running = (str(status["operator"]), {str(k): str(v) for k, v in status["params"].items()})
    if asked != running:
        msg = (
            f"option 'create': operator {name!r} exists as {running[0]} with params "
            f"{running[1]}, not as {asked[0]} with params {asked[1]}; {way_out}"
        )
        raise InputError(msg)
    sources = status["sources"]
    if options.source < len(sources) and sources[options.source]["closed"]:
        msg = (
            f"option 'create': operator {name!r} exists and its source {options.source} is "
            f"closed (a finished run); {way_out}"
        )
        raise InputError(msg)


def register(spark: SparkSession) -> None:
    """Register the ``stretch`` data source with ``spark``, and ``stretch-files``."""
    spark.dataSource.register(StretchDataSource)
    spark.dataSource.register(OrderedFiles)
