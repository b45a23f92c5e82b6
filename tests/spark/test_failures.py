"""A failed query told in one line (no Spark session): the cause, the late file, the log."""

from __future__ import annotations

import json
from pathlib import Path

from stretch.model.schema import Schema
from stretch.spark.failures import QueryFailed, batch_files, cause, explain
from stretch.spark.preflight import Feed

TRACE = """[STREAM_FAILED] Query [id = 1] terminated with exception: [PYTHON_EXCEPTION] An exception
was thrown from the Python worker: Traceback (most recent call last):
  File "/x/pyspark/worker.py", line 1, in main
    raise ServiceError(response.status_code, detail)
stretch.client.ServiceError: HTTP 422: source 0 of 'j': row 7 has ts 100, before the released \
watermark 400 (3 late row(s); the batch was rejected)
\tat org.apache.spark.api.python.BasePythonRunner.handle(PythonRunner.scala:1)
"""


def offsets(checkpoint: Path, ends: list[str]) -> None:
    """Spark's offset log of a ``stretch-files`` query: batch i ends at ``ends[i]``."""
    (checkpoint / "offsets").mkdir(parents=True)
    for batch, end in enumerate(ends):
        text = "v1\n" + json.dumps({"batchWatermarkMs": 0}) + "\n" + json.dumps({"file": end})
        (checkpoint / "offsets" / str(batch)).write_text(text)


def test_the_cause_is_our_last_error_line() -> None:
    assert cause(TRACE).startswith("HTTP 422: source 0 of 'j': row 7 has ts 100")
    assert cause("pyspark.errors.exceptions.base.PySparkRuntimeError: [X] bad\n") == "[X] bad"
    worker = (  # a shard killed mid-job: the worker's trace ends in the HTTP client's error
        "pyspark.errors.exceptions.base.PySparkRuntimeError: An exception was thrown\n"
        "Traceback (most recent call last):\n"
        "httpx.ConnectError: [Errno 111] Connection refused\n"
    )
    assert cause(worker) == (
        "a sidecar did not answer: httpx.ConnectError: [Errno 111] Connection refused"
    )
    assert cause("\nPython worker failed to connect back.\n  at x") == (
        "Python worker failed to connect back."
    )


def test_a_late_row_is_traced_to_its_file_and_the_options_named(tmp_path: Path) -> None:
    files = tuple(tmp_path / f"part-{k}.parquet" for k in range(4))
    feed = Feed(0, tmp_path, files, (5, 5, 5, 5), Schema.of(v="int"))
    offsets(tmp_path / "ck" / "in0", ["part-1.parquet", "part-3.parquet"])
    assert batch_files(tmp_path / "ck" / "in0", feed) == (1, list(files[2:]))
    log = tmp_path / "ck" / "pipeline.log"
    line = str(explain(QueryFailed("job-in0", TRACE), [feed], tmp_path / "ck", 50, log))
    assert "\n" not in line
    assert line.startswith("query job-in0 failed: HTTP 422: source 0 of 'j': row 7 has ts 100")
    assert f"row 7 came from {files[3]} (micro-batch 1)" in line  # 5 rows of part-2, then part-3
    assert "run again with --allowed-lateness-ms 350 (or more: this row is 300 ms late)" in line
    assert line.endswith(f"(Spark's traces: {log})")
    assert "PythonRunner.scala" in log.read_text()
