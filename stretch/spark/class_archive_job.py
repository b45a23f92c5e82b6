"""Build the archive of Spark's classes (``stretch warm``): see ``stretch.spark.class_archive``.

``build`` runs two processes of this module: one runs a small ``stretch demo`` job in a JVM
that writes the classes it loaded as it exits, the other starts a session that must map
the archive (``-Xshare:on``).
"""

from __future__ import annotations

import io
import subprocess
import sys
import tempfile
from pathlib import Path

from stretch.demo import run_demo
from stretch.spark.class_archive import QUIET, archive_path, prune, record
from stretch.spark.session import JAVA_OPTIONS, local_session

__all__ = ["BUILD_TIMEOUT_S", "build"]

BUILD_TIMEOUT_S = 600.0
"""The longest ``build`` waits for each of its processes (both take about 40 s on two cores)."""

_BUILD_ROWS = 2000
"""Trades of the demo job whose classes go into the archive."""


def build(timeout_s: float = BUILD_TIMEOUT_S) -> Path:
    """Make the archive (replacing one there) from a small demo job in a process of its own.

    A second process then starts a session that must use it (``-Xshare:on``), and only
    then does the archive take its place, its size and time recorded beside it. Archives
    no installed Spark can use are deleted (``prune``).

    Returns:
        The archive's path.

    Raises:
        RuntimeError: the job failed, wrote no archive, or one no session can use (the
            output says why).
        subprocess.TimeoutExpired: a process took longer than ``timeout_s``.

    """
    path = archive_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="stretch-classes-", dir=path.parent) as folder:
        partial = Path(folder) / path.name
        for step in ("archive", "check"):
            # Reads the output to its end: the JVM, which shares it, has exited by then.
            job = subprocess.run(
                [sys.executable, "-m", "stretch.spark.class_archive_job", step, str(partial)],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
                cwd=folder,  # where a JVM that crashes leaves its hs_err file
            )
            if job.returncode or not partial.is_file():
                tail = " / ".join((job.stderr or job.stdout).strip().splitlines()[-3:])
                msg = f"no Spark class archive ({step}, status {job.returncode}): {tail}"
                raise RuntimeError(msg)
        partial.replace(path)  # whole or not at all: unused until recorded
        record(path)
    prune(path)
    return path


def _archive_classes(partial: Path) -> None:
    """Run the demo job in a JVM that writes its classes to ``partial`` as it exits.

    The JVM exits once this process has ended (its stdin closes); ``build`` reads this
    process's output to its end, which the JVM holds open until then.
    """
    java = f"{JAVA_OPTIONS} -XX:ArchiveClassesAtExit={partial} {QUIET}"
    local_session("stretch class archive", java_options=java, class_archive=False)
    # The demo's own local_session gets this session back (getOrCreate), and stops it.
    if not run_demo(_BUILD_ROWS, None, seed=1, parallelism=2, out=io.StringIO(), files=3):
        msg = "the demo job's output differed from the reference"
        raise RuntimeError(msg)


def _check(partial: Path) -> None:
    """Start a session that must map ``partial`` (else its JVM does not start) and query."""
    java = f"{JAVA_OPTIONS} -XX:SharedArchiveFile={partial} -Xshare:on {QUIET}"
    spark = local_session("stretch class archive check", java_options=java, class_archive=False)
    spark.range(10).count()
    spark.stop()


if __name__ == "__main__":
    {"archive": _archive_classes, "check": _check}[sys.argv[1]](Path(sys.argv[2]))
