"""A failed query told in one line (no Spark session): the cause, the late file, the log,
and the lateness that admits every micro-batch of the inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from stretch.model.schema import Schema
from stretch.spark.failures import QueryFailed, batch_files, cause, explain
from stretch.spark.lateness import admitting_lateness_ms, file_ts_range_ms
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
    named = worker + (  # the client's own error (stretch.client) names the sidecar
        "\nThe above exception was the direct cause of the following exception:\n"
        "stretch.client.SidecarUnreachableError: the sidecar at http://127.0.0.1:4100 did "
        "not answer POST /v1/operators/j/sources/0/batches: ConnectError: [Errno 111] "
        "Connection refused\n"
    )
    assert cause(named) == (
        "the sidecar at http://127.0.0.1:4100 did not answer POST "
        "/v1/operators/j/sources/0/batches: ConnectError: [Errno 111] Connection refused"
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


def test_the_lateness_named_admits_every_later_micro_batch_too(tmp_path: Path) -> None:
    """The first refused batch is 499 ms late; the next two are later still (1999, 2999)."""
    spans = [(1000, 2000), (1500, 2500), (500, 3000), (0, 3500)]  # ts ranges, name order
    files = []
    for k, (lo, hi) in enumerate(spans):
        files.append(tmp_path / f"part-{k}.parquet")
        ts = pa.array(np.arange(lo, hi, dtype=np.int64)[::-1])  # out of order inside a file
        pq.write_table(pa.table({"ts": ts, "v": pa.array(np.arange(len(ts)))}), files[-1],
                       row_group_size=100)  # fmt: skip
    feed = Feed(0, tmp_path, tuple(files), tuple(hi - lo for lo, hi in spans), Schema.of(v="int"))
    offsets(tmp_path / "ck" / "in0", ["part-0.parquet", "part-1.parquet"])
    trace = TRACE.replace("row 7 has ts 100, before the released watermark 400",
                          "row 1 has ts 1500, before the released watermark 1999")  # fmt: skip
    line = str(explain(QueryFailed("job-in0", trace), [feed], tmp_path / "ck", None, None))
    assert f"row 1 came from {files[1]} (micro-batch 1)" in line
    assert "run again with --allowed-lateness-ms 2999 (the least under which no micro-batch" in line
    assert "this row is 499 ms late" in line
    # two files per micro-batch: (1000..2499) then (0..3499)
    line = str(explain(QueryFailed("job-in0", trace), [feed], tmp_path / "ck", None, None, 2))
    assert "run again with --allowed-lateness-ms 2499 (the least" in line
    # whole files up to 2,000 rows (the files hold 1000, 1000, 2500 and 3500): part-0 and
    # part-1 (1000..2499), then part-2 alone (500..2999), then part-3 (0..3499)
    line = str(explain(QueryFailed("job-in0", trace), [feed], tmp_path / "ck", None, None,
                       None, 2000))  # fmt: skip
    assert "run again with --allowed-lateness-ms 2999 (the least" in line
    # up to 8,000 rows: one micro-batch, late nowhere; the row refused still needs 499
    line = str(explain(QueryFailed("job-in0", trace), [feed], tmp_path / "ck", None, None,
                       None, 8000))  # fmt: skip
    assert "run again with --allowed-lateness-ms 499 (the least" in line


def test_the_admitting_lateness_reads_footers_of_any_ts_unit(tmp_path: Path) -> None:
    micros = pa.array([-1500, 7_999, 3], pa.int64()).cast(pa.timestamp("us", "UTC"))
    pq.write_table(pa.table({"ts": micros}), tmp_path / "us.parquet", row_group_size=2)
    assert file_ts_range_ms(tmp_path / "us.parquet") == (-2, 7)  # floored to ms
    pq.write_table(pa.table({"ts": pa.array([5, 9], pa.int64())}), tmp_path / "bare.parquet",
                   write_statistics=False)  # fmt: skip
    assert file_ts_range_ms(tmp_path / "bare.parquet") == (5, 9)  # no statistics: read
    pq.write_table(pa.table({"ts": pa.array([], pa.int64())}), tmp_path / "empty.parquet")
    assert file_ts_range_ms(tmp_path / "empty.parquet") is None
    ranges = [(0, 100), (50, 60), None, (70, 200)]
    assert admitting_lateness_ms(ranges, [1, 1, 1, 1]) == 50  # (50, 60) after (0, 100)
    assert admitting_lateness_ms(ranges, [2, 2]) == 30  # one batch (0..100), then (70..200)
    assert admitting_lateness_ms(ranges, [3, 1]) == 30  # the empty file changes nothing
    assert admitting_lateness_ms(ranges, [4]) == 0  # one batch, sorted before it is added
    assert admitting_lateness_ms([(0, 10), (10, 20), (20, 30)], [1, 1, 1]) == 0
