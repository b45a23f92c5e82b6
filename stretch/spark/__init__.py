"""The Spark side of the service: the ``stretch`` data source and the pipeline job.

Needs the extra ``stretch[spark]`` (PySpark 4). ``register(spark)`` makes the format
``stretch`` available: ``df.writeStream.format("stretch")`` sends a streaming DataFrame into
a source of an operator running in the sidecar, exactly once per checkpoint;
``spark.readStream.format("stretch")`` reads the operator's ordered output back;
``forward_watermarks`` forwards a query's event-time watermark to its source. See
docs/spark.md.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stretch.spark.source import NAME, StretchDataSource, register
    from stretch.spark.watermarks import forward_watermarks

__all__ = ["NAME", "StretchDataSource", "forward_watermarks", "register"]

_LAZY = {
    "NAME": "stretch.spark.source",
    "StretchDataSource": "stretch.spark.source",
    "register": "stretch.spark.source",
    "forward_watermarks": "stretch.spark.watermarks",
}


def __getattr__(name: str) -> Any:
    """Load the data source on first use.

    A Spark Python worker that reads a ``stretch-files`` source imports
    ``stretch.spark.files`` and so this package; loading the ``stretch`` data source here
    (its writer, reader and HTTP client) would cost such a worker 0.1 s for nothing.
    """
    if name not in _LAZY:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value
