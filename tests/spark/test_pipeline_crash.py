"""``stretch pipeline`` killed with SIGKILL mid-run, then rerun with the same arguments.

The first run is its own process (its own Spark driver and embedded sidecar, whose state
is kept under ``<checkpoint>/sidecar``); it is killed once the sidecar has stored some
micro-batches. The rerun (in this process, on the shared session) restores the sidecar
from that state, continues the writers and the reader from their checkpoints, and its
output must equal ``stretch replay``'s row for row.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stretch import generate
from stretch.cli import main
from stretch.spark.pipeline import read_output
from tests.spark.conftest import TIMEOUT_S
from tests.spark.test_pipeline import split_at_ts

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def _state_bytes(state: Path) -> int:
    """Bytes of the sidecar's journal and checkpoints: a checkpoint truncates the journal,
    so the journal alone can shrink while the state grows."""
    if not state.exists():
        return 0
    return sum(p.stat().st_size for p in state.rglob("*") if p.is_file())


def test_a_killed_pipeline_rerun_continues_and_equals_replay(spark: object, tmp_path: Path) -> None:
    (trades,) = generate.hedge(3000, 50.0, 13)
    pq.write_table(trades, tmp_path / "trades.parquet")
    split_at_ts(trades, tmp_path / "in", files=6)
    assert main(["replay", "hedge", "--input", str(tmp_path / "trades.parquet"),
                 "--output", str(tmp_path / "replay.parquet")]) == 0  # fmt: skip
    args = ["pipeline", "hedge", "--input", str(tmp_path / "in"), "--output",
            str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ck"),
            "--trigger-rows", "5000", "--files-per-trigger", "1"]  # fmt: skip
    state = tmp_path / "ck" / "sidecar"
    with (tmp_path / "first-run.log").open("wb") as log:
        first = subprocess.Popen(  # noqa: S603 - our own CLI, fixed arguments
            [sys.executable, "-m", "stretch.cli", *args],
            cwd=ROOT,
            start_new_session=True,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + TIMEOUT_S * 2
        while _state_bytes(state) < 60_000:  # a few micro-batches of trades are in
            assert first.poll() is None, (tmp_path / "first-run.log").read_text()
            assert time.monotonic() < deadline, "the first run stored no micro-batch"
            time.sleep(0.1)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(TIMEOUT_S)
    assert main(args) == 0
    expected = pq.read_table(tmp_path / "replay.parquet")
    out = read_output(spark, tmp_path / "out")  # type: ignore[arg-type]
    assert out.cast(expected.schema).equals(expected)
