"""The Python that Spark's Python workers run: this one, without Spark's zips on its path.

Spark starts every Python process of a job (the daemons of each worker kind and their
forks, the streaming source runners) with ``$SPARK_HOME/python/lib/pyspark.zip`` and
py4j's zip first on ``PYTHONPATH``. A zip holds no bytecode and Python cannot write any
into it, so each of those processes compiled PySpark's modules from source again: about
0.55 s of CPU a process, over twenty processes in one ``stretch pipeline``. A pip-installed
PySpark is the same code, installed with its bytecode, and its zips lie inside that
package. ``worker_python`` writes a small shell script that removes exactly those two
zips from ``PYTHONPATH`` and runs this interpreter; ``local_session`` makes it
``PYSPARK_PYTHON``. Measured on two cores: ``stretch pipeline scalejoin`` (2 x 100k rows)
0.77x-0.78x the wall time (docs/spark.md, "Cost").
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
import tempfile
from pathlib import Path

from stretch.spark.cache import cache_folder

__all__ = ["uses_this_python", "worker_python"]

_SCRIPT = """#!/bin/sh
# Spark's Python workers for stretch (stretch/spark/worker_python.py): this venv's Python
# without the zips of its own PySpark on PYTHONPATH, so that the installed PySpark, the
# same code with its bytecode, is imported instead of compiling the zip's sources.
set -f
kept=
IFS=:
for entry in $PYTHONPATH; do
    case "$entry" in
        {zips}) ;;
        *) kept="${{kept:+$kept:}}$entry" ;;
    esac
done
unset IFS
if [ -n "$kept" ]; then export PYTHONPATH="$kept"; else unset PYTHONPATH; fi
exec {python} "$@"
"""


def worker_python() -> str:
    """The interpreter to give Spark as ``PYSPARK_PYTHON``: the script, or this Python.

    This Python itself where the script cannot be written (a read-only home) or PySpark
    has no zips (a distribution laid out otherwise).
    """
    import pyspark  # noqa: PLC0415 - the spark extra

    package = Path(pyspark.__file__).parent
    if not (package / "python" / "lib" / "pyspark.zip").is_file():
        return sys.executable
    libs = sorted({str(package / "python" / "lib"), str(package.resolve() / "python" / "lib")})
    zips = [f"{shlex.quote(lib)}/{name}" for lib in libs for name in _ZIPS]
    text = _SCRIPT.format(zips=" | ".join(zips), python=shlex.quote(sys.executable))
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    cache = cache_folder()
    path = cache / f"{_PREFIX}{digest}"
    if path.is_file() and os.access(path, os.X_OK):
        return str(path)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=cache, prefix=".", delete=False) as file:
            file.write(text)
        partial = Path(file.name)
        try:
            partial.chmod(0o755)
            partial.replace(path)  # whole or not at all, for sessions started at once
        finally:
            partial.unlink(missing_ok=True)
    except OSError:
        return sys.executable
    return str(path)


def uses_this_python(python: str | None) -> bool:
    """Whether ``PYSPARK_PYTHON`` (None: unset) means this interpreter, or the script."""
    if python is None:
        return True
    path = Path(python)
    if path.parent == cache_folder() and path.name.startswith(_PREFIX):
        return True
    try:
        return path.resolve() == Path(sys.executable).resolve()
    except OSError:
        return False


_ZIPS = ("pyspark.zip", "py4j-*-src.zip")
"""The zips under PySpark's ``python/lib`` that Spark puts first on a worker's path."""

_PREFIX = "spark-python-"
"""The name of a script ``worker_python`` wrote, before the digest of its text."""
