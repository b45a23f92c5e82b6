"""``stretch pipeline`` fails fast and readably: real processes, one line on stderr, exit 2.

The inputs, the sidecar of ``--url`` and its token are checked before Spark starts, so
these runs start no JVM. Ctrl-C once Spark runs prints one line and exits 130.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stretch.spark.preflight import check_inputs
from tests.api.test_serve_parent import gone, lock_is_free
from tests.spark.conftest import TIMEOUT_S, TOKEN

ROOT = Path(__file__).resolve().parents[2]


def pipeline(*args: str) -> subprocess.CompletedProcess[str]:
    """``stretch pipeline ARGS`` as its own process (no Spark should start)."""
    return subprocess.run(  # noqa: S603 - our own CLI, fixed arguments
        [sys.executable, "-m", "stretch.cli", "pipeline", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def interrupted(args: list[str], ready: str, signum: int) -> tuple[int, str, str]:
    """``stretch pipeline ARGS``, sent ``signum`` once a line starting ``ready`` is printed.

    Returns its exit status and the rest of its stdout and its stderr.
    """
    process = subprocess.Popen(  # noqa: S603 - our own CLI, fixed arguments
        [sys.executable, "-m", "stretch.cli", "pipeline", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith(ready):
                break
        process.send_signal(signum)
        out, err = process.communicate(timeout=TIMEOUT_S)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(TIMEOUT_S)
    return process.returncode, out, err


def scalejoin_dirs(tmp_path: Path, rows: int = 50) -> tuple[Path, Path]:
    """Directories ``l`` and ``r`` of two good ScaleJoin files each."""
    rng = np.random.default_rng(3)
    ts = np.arange(rows, dtype=np.int64)
    left = pa.table({"ts": ts, "x": rng.integers(0, 9, rows), "y": rng.random(rows)})
    right = pa.table(
        {
            "ts": ts,
            "a": rng.integers(0, 9, rows),
            "b": rng.random(rows),
            "c": rng.random(rows),
            "d": rng.integers(0, 2, rows).astype(bool),
        }
    )
    for name, table in (("l", left), ("r", right)):
        (tmp_path / name).mkdir()
        for k in range(2):
            part = table.slice(k * rows // 2, rows // 2)
            pq.write_table(part, tmp_path / name / f"part-{k}.parquet")
    return tmp_path / "l", tmp_path / "r"


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The run's stderr, which must be one line; exit status 2."""
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("stretch: error: ")
    return lines[0]


def test_a_missing_column_is_named_with_the_expected_columns(tmp_path: Path) -> None:
    left, right = scalejoin_dirs(tmp_path)
    table = pq.read_table(left / "part-1.parquet").rename_columns(["ts", "sensor_id", "y"])
    pq.write_table(table, left / "part-1.parquet")
    line = one_line(pipeline("scalejoin", "--input", str(left), "--input", str(right),
                             "--output", str(tmp_path / "out")))  # fmt: skip
    assert f"{left / 'part-1.parquet'}: missing column 'x' (has ts, sensor_id, y)" in line
    assert "needs ts (long ms or timestamp), x (int), y (float)" in line
    assert not (tmp_path / "out").exists()  # nothing was started


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--max-parallelism", "0"], "--max-parallelism must be >= 1, got 0"),
        (["--parallelism", "4", "--max-parallelism", "2"], "--parallelism 4 is above"),
        (["--sidecars", "0"], "--sidecars must be >= 1, got 0"),  # was a traceback, exit 1
        (["--trigger-rows", "0"], "--trigger-rows must be >= 1, got 0"),  # was "no cap"
    ],
)
def test_pool_flags_are_named_before_a_sidecar_starts(
    tmp_path: Path, flags: list[str], words: str
) -> None:
    left, right = scalejoin_dirs(tmp_path)
    line = one_line(pipeline("scalejoin", "--input", str(left), "--input", str(right),
                             "--output", str(tmp_path / "out"), *flags))  # fmt: skip
    assert words in line
    assert not (tmp_path / "out").exists()  # nothing was started


@pytest.mark.parametrize("where", ["l", "l/out", "."])
def test_an_output_that_overlaps_an_input_is_refused(tmp_path: Path, where: str) -> None:
    """The file source would read the output's files as new input."""
    left, right = scalejoin_dirs(tmp_path)
    output = tmp_path / where
    line = one_line(pipeline("scalejoin", "--input", str(left), "--input", str(right),
                             "--output", str(output)))  # fmt: skip
    assert f"--output {output} and --input {left} overlap" in line
    assert sorted(p.name for p in left.iterdir()) == ["part-0.parquet", "part-1.parquet"]


def test_a_stray_file_among_the_parts_is_named(tmp_path: Path) -> None:
    left, right = scalejoin_dirs(tmp_path)
    (right / "stray.csv").write_text("ts,a\n1,2\n")
    line = one_line(pipeline("scalejoin", "--input", str(left), "--input", str(right),
                             "--output", str(tmp_path / "out")))  # fmt: skip
    assert f"{right / 'stray.csv'} is not a Parquet file" in line
    assert "move it out of the directory" in line


def test_a_wrong_token_is_refused_before_spark_starts(sidecar: str, tmp_path: Path) -> None:
    left, right = scalejoin_dirs(tmp_path)
    token = tmp_path / "token"
    token.write_text("not-" + TOKEN)
    line = one_line(pipeline("scalejoin", "--input", str(left), "--input", str(right),
                             "--output", str(tmp_path / "out"), "--url", sidecar,
                             "--token-file", str(token)))  # fmt: skip
    assert f"--url {sidecar}: the sidecar refused the request (HTTP 401" in line
    assert "the token in --token-file is not its token" in line


def test_a_mistyped_column_and_a_subdirectory_are_named(tmp_path: Path) -> None:
    left, right = scalejoin_dirs(tmp_path)
    pq.write_table(pa.table({"ts": [1], "x": ["seven"], "y": [1.0]}), left / "part-2.parquet")
    with pytest.raises(Exception, match=r"part-2\.parquet: column 'x' is string, not int"):
        check_inputs("scalejoin", {}, [left, right])
    (left / "part-2.parquet").unlink()
    (right / "more").mkdir()
    with pytest.raises(Exception, match="holds the directory 'more'"):
        check_inputs("scalejoin", {}, [left, right])
    (right / "more").rename(right / "_more")  # a leading '_' is skipped, as Spark does
    feeds = check_inputs("scalejoin", {}, [left, right])
    assert [f.rows for f in feeds] == [(25, 25), (25, 25)]


@pytest.mark.spark
def test_ctrl_c_prints_one_line_and_exits_130(tmp_path: Path) -> None:
    left, right = scalejoin_dirs(tmp_path, rows=4000)
    for directory in (left, right):  # many small files: many micro-batches to interrupt
        table = pq.read_table(directory)
        for path in directory.iterdir():
            path.unlink()
        for k in range(40):
            pq.write_table(table.slice(k * 100, 100), directory / f"part-{k:03d}.parquet")
    returncode, out, err = interrupted(
        ["scalejoin", "--input", str(left), "--input", str(right),
         "--output", str(tmp_path / "out"), "--files-per-trigger", "1"],
        "created ",  # Spark runs once the operator's line is printed
        signal.SIGINT,
    )  # fmt: skip
    assert returncode == 130, err
    assert err.splitlines() == [
        "stretch: interrupted (SIGINT); rerun with the same --checkpoint to continue"
    ]
    assert "done:" not in out


def test_sigterm_stops_the_sidecars_it_started(tmp_path: Path) -> None:
    """SIGTERM, as Ctrl-C: the ``--sidecars`` processes stop, so a rerun can take their state."""
    left, right = scalejoin_dirs(tmp_path)
    returncode, _, err = interrupted(
        ["scalejoin", "--input", str(left), "--input", str(right),
         "--output", str(tmp_path / "out"), "--sidecars", "1"],
        "started 1 sidecar",
        signal.SIGTERM,
    )  # fmt: skip
    assert returncode == 128 + signal.SIGTERM, err
    assert err.splitlines()[-1].startswith("stretch: interrupted (SIGTERM)")
    lock = (tmp_path / "out" / "_checkpoint" / "sidecars").glob("*/lock")
    with next(lock).open("a") as file:  # the sidecar's lock on its state is free again
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                assert time.monotonic() < deadline, "the sidecar still holds its state"
                time.sleep(0.1)


def test_the_sidecars_end_with_a_killed_pipeline(tmp_path: Path) -> None:
    """kill -9 of the job stops nothing itself: its ``--sidecars`` see their parent gone,
    shut down as on SIGTERM and free their state, so the documented rerun can take it."""
    left, right = scalejoin_dirs(tmp_path)
    sidecars = tmp_path / "out" / "_checkpoint" / "sidecars"
    with subprocess.Popen(  # noqa: S603 - our own CLI, fixed arguments
        [sys.executable, "-m", "stretch.cli", "pipeline", "scalejoin", "--input", str(left),
         "--input", str(right), "--output", str(tmp_path / "out"), "--sidecars", "2"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        start_new_session=True,
    ) as job:  # fmt: skip
        try:
            assert job.stdout is not None
            for line in job.stdout:
                if line.startswith("started 2 sidecar"):
                    break
            children = [int((sidecars / str(i) / "lock").read_text()) for i in range(2)]
            job.kill()
            job.wait(TIMEOUT_S)
            deadline = time.monotonic() + 30
            for index, child in enumerate(children):
                while not (gone(child) and lock_is_free(sidecars / str(index))):
                    assert time.monotonic() < deadline, f"sidecar {index} outlived the job"
                    time.sleep(0.1)
                log = (sidecars / f"{index}.log").read_text()
                assert f"parent process {job.pid} exited: shutting down" in log, log
        finally:
            with contextlib.suppress(ProcessLookupError):  # the sidecars, if the test failed
                os.killpg(job.pid, signal.SIGKILL)


@pytest.mark.parametrize(
    ("flags", "several"),
    [
        (["--sidecars", "2"], "--sidecars 2"),
        (["--url", "http://127.0.0.1:1,http://127.0.0.1:2"], "--url with 2 sidecars"),
    ],
)
def test_trigger_rows_with_several_sidecars_is_refused(
    tmp_path: Path, flags: list[str], several: str
) -> None:
    """A sharded reader reads up to the shards' common watermark: no row cap to honour."""
    left, right = scalejoin_dirs(tmp_path)
    line = one_line(pipeline("scalejoin", "--input", str(left), "--input", str(right),
                             "--output", str(tmp_path / "out"), "--trigger-rows", "100",
                             *flags))  # fmt: skip
    assert f"--trigger-rows applies to one sidecar only, not with {several}" in line
    assert not (tmp_path / "out").exists()  # nothing was started
