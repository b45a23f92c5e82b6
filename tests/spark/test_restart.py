"""Crash and restart: the writing query's process is killed after some micro-batches.

Restarted from its checkpoint, the query replays what Spark had not committed; the
sidecar ignores the batches it had already added (staged commits are idempotent per query
id, which the checkpoint keeps), so the output still equals ``run_sn``: nothing lost or
doubled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from stretch import build, generate, run_sn
from stretch.client import StretchClient
from tests.spark.conftest import (
    TIMEOUT_S,
    finish,
    stream_into,
    wait_output_finished,
    write_files,
)

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = {"wa": 1000, "ws": 2000}
FILES = 4


def wait_for_batches(
    client: StretchClient, name: str, batches: int, job: subprocess.Popen[bytes]
) -> None:
    deadline = time.monotonic() + TIMEOUT_S * 2
    while client.status(name)["sources"][0]["batches"] < batches:
        assert job.poll() is None, "the writer job ended before it was killed"
        assert time.monotonic() < deadline, f"the writer job did not add {batches} batches"
        time.sleep(0.05)


def test_killed_writer_restarts_from_its_checkpoint(
    spark: object, client: StretchClient, sidecar: str, tmp_path: Path
) -> None:
    (tweets,) = generate.tweets(900, 100.0, 9, vocabulary=40)
    tweets = tweets.set_column(0, "ts", pa.array(np.arange(900, dtype=np.int64) * 10))
    write_files(tweets, tmp_path / "in", files=FILES)
    client.create_operator("restart", "wordcount", WORDCOUNT)
    job = subprocess.Popen(  # noqa: S603 - our own module, fixed arguments
        [sys.executable, "-m", "tests.spark.writer_job", sidecar, "restart",
         str(tmp_path / "in"), str(tmp_path / "ck")],
        cwd=ROOT,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for_batches(client, "restart", 2, job)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(TIMEOUT_S)
    killed_at = client.status("restart")["sources"][0]["batches"]
    assert killed_at < FILES
    finish(stream_into(spark, sidecar, "restart", 0, tmp_path / "in", tmp_path / "ck"))
    client.close_source("restart", 0)
    status = wait_output_finished(client, "restart")
    assert status["sources"][0]["tuples_in"] == tweets.num_rows
    out = client.read_all("restart", TIMEOUT_S)
    assert out.equals(run_sn(build("wordcount", WORDCOUNT), [tweets]))
