"""A writing query in a process of its own, for the crash-and-restart test.

``python -m tests.spark.writer_job URL OPERATOR DIRECTORY CHECKPOINT`` writes the Parquet
files of DIRECTORY, one per micro-batch, into source 0 of OPERATOR, then exits. The test
kills it (and its JVM) part way.
"""

from __future__ import annotations

import sys
from pathlib import Path

from stretch.spark.session import local_session
from tests.spark.conftest import finish, stream_into


def main(url: str, operator: str, directory: str, checkpoint: str) -> None:
    spark = local_session("stretch-writer-job", "local[1]")
    finish(stream_into(spark, url, operator, 0, Path(directory), Path(checkpoint)))


if __name__ == "__main__":
    main(*sys.argv[1:5])
