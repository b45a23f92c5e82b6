"""A class-data sharing archive of the Spark driver's classes, so a local session starts sooner.

A local Spark session's JVM loads and verifies thousands of classes from Spark's jars
before the first query runs, and again in every process. Java's class-data sharing keeps
them parsed and verified in an archive the JVM maps at start (``-XX:SharedArchiveFile``).
``build`` (``stretch.spark.class_archive_job``, which ``stretch warm`` calls) makes one
by running a small ``stretch demo`` job (a file source, the stretch writer and reader, a
Parquet sink) in a JVM that writes the classes it loaded at its exit
(``-XX:ArchiveClassesAtExit``), then checks it with a session that must map it.
``local_session`` starts its JVM with the archive when there is one (``options``).
Measured on two cores: a session 4.7-4.9 s against 6.7-7.6 s, its first query 1.4-1.5 s
against 2.5-3.0 s.

The JVM checks that an archive fits it (the same JDK, the same jars unchanged) and starts
without it otherwise, so a stale archive costs the time it saved, never an error. The
archive is named after Spark's jars and the Java that runs them, under
``$XDG_CACHE_HOME/stretch`` (``~/.cache/stretch``), 160-190 MB each; ``stretch warm``
deletes those no installed Spark can use (``prune``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from stretch.spark.cache import cache_folder

__all__ = ["QUIET", "archive_path", "options", "prune", "record"]

QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""JVM options that keep class-data sharing's notes (an archive that does not fit,
classes it skips) off the console."""


def archive_path() -> Path:
    """Where the archive for this PySpark and this Java is (whether or not it exists).

    Its name changes with Spark's jars and the Java binary (their paths, sizes and
    times), so an upgrade of either looks for a new archive, which ``stretch warm``
    builds.
    """
    import pyspark  # noqa: PLC0415 - the spark extra

    key = hashlib.sha256(os.environ.get("JAVA_HOME", "").encode())
    java = shutil.which("java")
    files = [Path(java).resolve()] if java else []
    files += sorted(_jars().glob("*.jar"))
    for file in files:
        stat = file.stat()
        key.update(f"\0{file}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    return cache_folder() / f"spark-{pyspark.__version__}-{key.hexdigest()[:12]}.jsa"


def options() -> str:
    """The driver JVM's options that use the archive; empty where there is none.

    Only the file ``build`` checked is used (``record``): a JVM that maps a damaged
    archive (one cut short, say) can crash where one that does not fit only starts
    without it.
    """
    path = archive_path()
    try:
        checked = _stamp(path) == _record_of(path).read_text().split("\n")[0]
    except OSError:
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}" if checked else ""


def record(path: Path) -> None:
    """Record beside the archive at ``path``, once checked, its size and time, and its jars."""
    _record_of(path).write_text(f"{_stamp(path)}\n{_jars()}\n")


def prune(current: Path) -> None:
    """Delete the archives beside ``current`` that no installed Spark can use any more.

    Those whose jars' folder is gone (a removed virtual environment), those of this
    install's jars other than ``current`` (made before an upgrade in place), and those
    never checked (left by a build that stopped half way). An archive of another Spark
    still installed stays: each environment keeps its own.
    """
    ours = str(_jars())
    for path in current.parent.glob("spark-*.jsa"):
        try:
            jars = _record_of(path).read_text().split("\n")[1]
            used = bool(jars) and Path(jars).is_dir() and (jars != ours or path == current)
        except (OSError, IndexError):
            used = False
        if not used:
            path.unlink(missing_ok=True)
            _record_of(path).unlink(missing_ok=True)


def _jars() -> Path:
    """The folder of the jars the installed PySpark runs."""
    import pyspark  # noqa: PLC0415 - the spark extra

    return (Path(pyspark.__file__).parent / "jars").resolve()


def _record_of(path: Path) -> Path:
    return path.with_name(path.name + ".checked")


def _stamp(path: Path) -> str:
    stat = path.stat()
    return f"{stat.st_size} {stat.st_mtime_ns}"
