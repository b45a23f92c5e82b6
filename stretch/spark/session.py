"""A local Spark session set up for the ``stretch`` data source.

Spark's Python workers must run the interpreter that has ``stretch`` installed (here
through ``stretch.spark.worker_python``'s script, which spares them compiling PySpark
again), and a local job should stay on loopback; ``local_session`` sees to both, maps the
archive of Spark's classes where ``stretch warm`` built one, and registers the data source.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from stretch.spark.class_archive import options as archive_options
from stretch.spark.source import register
from stretch.spark.worker_python import uses_this_python, worker_python

__all__ = ["JAVA_OPTIONS", "local_session"]

JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
"""The driver JVM's options for a job that moves rows to and from the sidecar.

Its JIT compiles with the quick tier (C1) only: such a job leaves the JVM little work per
row (Arrow batches to and from Python workers), and on a few cores the optimizing tier
(C2) spends more of them compiling than its code gives back (docs/spark.md, "Cost"). A
query that computes in the JVM (a join in Spark SQL) runs faster with the default JIT:
pass ``java_options=""`` for it."""


def local_session(
    app_name: str = "stretch",
    master: str = "local[*]",
    java_options: str = JAVA_OPTIONS,
    *,
    class_archive: bool = True,
) -> SparkSession:
    """A Spark session on this machine with the ``stretch`` data source registered.

    Args:
        app_name: The application's name.
        master: The Spark master (``local[*]``: every core of this machine).
        java_options: The driver JVM's extra options (``spark.driver.extraJavaOptions``;
            none if empty).
        class_archive: Start the JVM with the archive of Spark's classes that ``stretch
            warm`` builds, where there is one (``stretch.spark.class_archive``).

    Returns:
        The session (``getOrCreate``: an active one is reused, its options unchanged).

    """
    if uses_this_python(os.environ.get("PYSPARK_PYTHON")):  # another Python stays as set
        os.environ["PYSPARK_PYTHON"] = worker_python()
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .config("spark.sql.streaming.noDataProgressEventInterval", "1000")
    )
    options = f"{java_options} {archive_options() if class_archive else ''}".strip()
    if options:
        builder = builder.config("spark.driver.extraJavaOptions", options)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
