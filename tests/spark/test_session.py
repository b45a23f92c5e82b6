"""The local session's driver JVM compiles with the quick JIT tier only (``JAVA_OPTIONS``)."""

from __future__ import annotations

from pyspark.sql import SparkSession

from stretch.spark.session import JAVA_OPTIONS


def test_the_local_driver_jvm_takes_the_quick_jit_tier(spark: SparkSession) -> None:
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert JAVA_OPTIONS == "-XX:TieredStopAtLevel=1"
    assert JAVA_OPTIONS in list(runtime.getInputArguments())
