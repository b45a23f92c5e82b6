"""The local session's driver JVM: the quick JIT tier, and the archive of Spark's classes."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyspark
import pytest
from pyspark.sql import SparkSession

from stretch import cli
from stretch.spark import class_archive, class_archive_job
from stretch.spark.cache import cache_folder
from stretch.spark.class_archive import archive_path, options
from stretch.spark.class_archive_job import build
from stretch.spark.session import JAVA_OPTIONS
from stretch.spark.worker_python import uses_this_python, worker_python


def jvm_arguments(spark: SparkSession) -> list[str]:
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    return list(runtime.getInputArguments())


def test_the_local_driver_jvm_takes_the_quick_jit_tier(spark: SparkSession) -> None:
    assert JAVA_OPTIONS == "-XX:TieredStopAtLevel=1"
    assert JAVA_OPTIONS in jvm_arguments(spark)


def test_the_local_driver_jvm_maps_the_archive_that_warm_built(spark: SparkSession) -> None:
    """``./dev install`` runs ``stretch warm``, which builds the archive; a session uses it."""
    sharing = [arg for arg in jvm_arguments(spark) if arg.startswith("-XX:SharedArchiveFile=")]
    if options():
        assert sharing == [f"-XX:SharedArchiveFile={archive_path()}"]
    else:  # no archive checked here (a plain pip install without stretch warm)
        assert sharing == []


class FakeJobs:
    """``subprocess.run`` for ``build``'s two steps: archive (writes the file) and check."""

    def __init__(self, check_status: int = 0) -> None:
        self.check_status = check_status
        self.steps: list[str] = []

    def __call__(self, args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        step, partial = args[-2], Path(args[-1])
        self.steps.append(step)
        assert kwargs["timeout"] > 0
        if step == "archive":
            partial.write_bytes(b"classes")
            return subprocess.CompletedProcess(args, 0, "", "")
        return subprocess.CompletedProcess(args, self.check_status, "", "no sharing\n")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "stretch"


def test_build_puts_the_archive_in_place_once_a_session_used_it(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = FakeJobs()
    monkeypatch.setattr(class_archive_job.subprocess, "run", jobs)
    assert archive_path().parent == cache
    assert options() == ""  # none built yet
    cache.mkdir()
    unchecked = cache / "spark-4.0.0-0123456789ab.jsa"  # a build stopped half way: goes
    unchecked.write_bytes(b"half")
    gone = cache / "spark-4.0.0-0123456789ac.jsa"  # its Spark install is gone: goes
    gone.write_bytes(b"old")
    (cache / f"{gone.name}.checked").write_text(f"3 1\n{cache / 'removed-venv' / 'jars'}\n")
    upgraded = cache / "spark-4.0.0-0123456789ae.jsa"  # these jars before an upgrade: goes
    upgraded.write_bytes(b"before")
    jars = Path(pyspark.__file__).parent / "jars"
    (cache / f"{upgraded.name}.checked").write_text(f"6 1\n{jars.resolve()}\n")
    other = cache / "spark-4.0.0-0123456789ad.jsa"  # another Spark still installed: stays
    other.write_bytes(b"other")
    (cache / f"{other.name}.checked").write_text(f"5 1\n{cache}\n")
    path = build()
    assert jobs.steps == ["archive", "check"]
    assert path == archive_path()
    assert path.read_bytes() == b"classes"
    assert options() == f"-XX:SharedArchiveFile={path} {class_archive.QUIET}"
    path.write_bytes(b"cut")  # not the file the check used: a JVM could crash on it
    assert options() == ""
    kept = [path.name, f"{path.name}.checked", other.name, f"{other.name}.checked"]
    assert sorted(p.name for p in cache.iterdir()) == sorted(kept)


def test_an_archive_no_session_could_use_is_not_put_in_place(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(class_archive_job.subprocess, "run", FakeJobs(check_status=1))
    with pytest.raises(RuntimeError, match=r"check, status 1\): no sharing"):
        build()
    assert not archive_path().exists()
    assert options() == ""
    assert list(cache.iterdir()) == []


def test_warm_builds_the_archive_once_and_goes_on_without_one(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "warm", lambda run, say: None)  # the kernels: tests/test_cli.py
    jobs = FakeJobs()
    monkeypatch.setattr(class_archive_job.subprocess, "run", jobs)
    assert cli._warm(SimpleNamespace(skip_spark=False, param=[], operators=[])) == 0
    assert f"done: Spark's classes are in {archive_path()}" in capsys.readouterr().err
    assert cli._warm(SimpleNamespace(skip_spark=False, param=[], operators=[])) == 0
    assert "Spark's classes were archived already" in capsys.readouterr().err
    assert jobs.steps == ["archive", "check"]
    archive_path().unlink()
    monkeypatch.setattr(class_archive_job.subprocess, "run", FakeJobs(check_status=1))
    # only a quicker start is lost
    assert cli._warm(SimpleNamespace(skip_spark=False, param=[], operators=[])) == 0
    assert "no archive of Spark's classes: no Spark class archive (check" in (
        capsys.readouterr().err
    )
    assert cli._warm(SimpleNamespace(skip_spark=True, param=[], operators=[])) == 0
    assert "Spark" not in capsys.readouterr().err


def test_spark_python_workers_import_the_installed_pyspark(spark: SparkSession) -> None:
    """Not the sources in Spark's zip, which every worker process compiled again."""
    files = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("pyspark").__file__)
    (imported,) = files.collect()
    assert imported == pyspark.__file__
    assert ".zip" not in imported


def test_the_worker_python_drops_only_pysparks_own_zips(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = worker_python()
    assert Path(script).parent == cache
    assert worker_python() == script  # written once
    assert uses_this_python(script) and uses_this_python(sys.executable)
    assert uses_this_python(None) and not uses_this_python("/usr/bin/python3")
    lib = Path(pyspark.__file__).resolve().parent / "python" / "lib"
    py4j = next(lib.glob("py4j-*-src.zip"))
    show = "import os, sys; print(os.environ.get('PYTHONPATH'), sys.executable)"
    for given, left in [
        ([lib / "pyspark.zip", py4j, cache / "mine.zip", "/x y"], f"{cache / 'mine.zip'}:/x y"),
        ([lib / "pyspark.zip", py4j], "None"),
        ([cache / "pyspark.zip"], str(cache / "pyspark.zip")),  # another Spark's: stays
    ]:
        env = {**os.environ, "PYTHONPATH": ":".join(map(str, given))}
        shown = subprocess.run(  # noqa: S603 - the script just written
            [script, "-c", show], env=env, capture_output=True, text=True, check=True
        ).stdout.split()
        assert shown == [*left.split(), sys.executable]


def test_the_cache_folder_follows_xdg_then_home_then_the_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_folder() == tmp_path / "stretch"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # not a place: ignored, as the spec says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_folder() == tmp_path / "home" / ".cache" / "stretch"
    monkeypatch.setattr(os.path, "expanduser", lambda path: path)  # no home known
    assert cache_folder() == Path(tempfile.gettempdir()) / f"stretch-cache-{os.getuid()}"
