"""A local Spark session set up for the ``stretch`` data source.

Spark's Python workers must run the interpreter that has ``stretch`` installed, and a
local job should stay on loopback; ``local_session`` sees to both and registers the data
source.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from stretch.spark.source import register

__all__ = ["local_session"]


def local_session(app_name: str = "stretch", master: str = "local[*]") -> SparkSession:
    """A Spark session on this machine with the ``stretch`` data source registered.

    Args:
        app_name: The application's name.
        master: The Spark master (``local[*]``: every core of this machine).

    Returns:
        The session (``getOrCreate``: an active one is reused).

    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
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
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
