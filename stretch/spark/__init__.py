"""The Spark side of the service: the ``stretch`` data source and the pipeline job.

Needs the extra ``stretch[spark]`` (PySpark 4). ``register(spark)`` makes the format
``stretch`` available: ``df.writeStream.format("stretch")`` sends a streaming DataFrame into
a source of an operator running in the sidecar, exactly once per checkpoint;
``spark.readStream.format("stretch")`` reads the operator's ordered output back;
``forward_watermarks`` forwards a query's event-time watermark to its source. See
docs/spark.md.
"""

from stretch.spark.source import NAME, StretchDataSource, register
from stretch.spark.watermarks import forward_watermarks

__all__ = ["NAME", "StretchDataSource", "forward_watermarks", "register"]
