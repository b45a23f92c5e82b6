"""A failed query of ``stretch pipeline`` told in one line; Spark's traces to a log file.

Spark reports a query's failure as the Java exception around the Python worker's
traceback around the sidecar's answer: hundreds of lines, the useful one in the middle.
``explain`` keeps the whole text in the job's log file and makes one line of it: the
error our code raised (the last ``stretch.*`` exception of the traces), and for rows
refused as late, the input file they came from and the options that would accept them:
the least allowed lateness that admits every micro-batch of the inputs
(``stretch.spark.lateness``), not only the one refused.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from stretch.errors import StretchError
from stretch.spark.files import FILE, batch_sizes
from stretch.spark.lateness import admitting_lateness_ms, file_ts_range_ms
from stretch.spark.preflight import Feed

__all__ = ["QueryFailed", "batch_files", "cause", "explain", "late_file"]

logger = logging.getLogger(__name__)


def _errors(package: str) -> re.Pattern[str]:
    """Lines ``<package>.<...>Error: message`` of a trace: (error's name, message)."""
    return re.compile(rf"^\s*({package}\.[\w.]*(?:Error|Exception)): (.+?)\s*$", re.MULTILINE)


_OURS = _errors("(?:stretch|api)")
_PYSPARK = _errors("pyspark")
_HTTP = _errors("httpx")
_LATE = re.compile(r"row (\d+) has ts (-?\d+), before the released watermark (-?\d+)")
_WRITER = re.compile(r"-in(\d+)$")
_MAX_LINE = 400


class QueryFailed(StretchError):
    """A query of the job failed; ``detail`` is Spark's whole account of it.

    Args:
        query: The query's name.
        detail: Spark's failure text (Java and Python traces).

    """

    def __init__(self, query: str, detail: str) -> None:
        super().__init__(f"query {query} failed: {cause(detail)}")
        self.query = query
        self.detail = detail


def cause(detail: str) -> str:
    """The line of a failure text that says why: the last error our code raised.

    A sidecar that went away is one (``stretch.client.SidecarUnreachableError``: "the
    sidecar at URL did not answer ..."). Else the last error of the HTTP client ("a
    sidecar did not answer: httpx.ConnectError: ..."), else the last PySpark error of a
    Python worker, else the text's first line (cut at 400 characters).
    """
    for pattern in (_OURS, _HTTP, _PYSPARK):
        found = pattern.findall(detail)
        if found:
            name, line = (str(part) for part in found[-1])
            if pattern is _HTTP:
                line = f"a sidecar did not answer: {name}: {line}"
            return line if len(line) <= _MAX_LINE else line[:_MAX_LINE] + " ..."
    lines = [line.strip() for line in detail.splitlines() if line.strip()]
    first = lines[0] if lines else "(no message)"
    return first if len(first) <= _MAX_LINE else first[:_MAX_LINE] + " ..."


def batch_files(checkpoint: Path, feed: Feed) -> tuple[int, list[Path]] | None:
    """The last micro-batch a writing query planned, and its files in reading order.

    Read from the query's offset log (``checkpoint/offsets/N``, the ``stretch-files``
    offsets ``{"file": NAME}``): batch N holds the files after batch N-1's last file, up
    to its own. None if the log is not there.
    """
    offsets = checkpoint / "offsets"
    batches = sorted(int(p.name) for p in offsets.glob("[0-9]*") if p.name.isdigit())
    if not batches:
        return None
    batch = batches[-1]
    end = _last_file(offsets / str(batch))
    start = _last_file(offsets / str(batch - 1)) if batch - 1 in batches else ""
    if end is None or start is None:
        return None
    return batch, [path for path in feed.files if start < path.name <= end]


def _last_file(path: Path) -> str | None:
    """The ``file`` of an offset log entry (its last line is the source's offset)."""
    try:
        offset = json.loads(path.read_text(encoding="utf-8").splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return None
    value = offset.get(FILE) if isinstance(offset, dict) else None
    return value if isinstance(value, str) else None


def late_file(files: Sequence[Path], feed: Feed, row: int) -> Path | None:
    """The file holding row ``row`` (1-based) of a micro-batch made of ``files`` in order."""
    rows = dict(zip(feed.files, feed.rows, strict=True))
    seen = 0
    for path in files:
        seen += rows.get(path, 0)
        if row <= seen:
            return path
    return None


def _admitting(feeds: Sequence[Feed], max_files: int | None, max_rows: int | None) -> int | None:
    """The least lateness admitting every micro-batch of every feed (None: unknown)."""
    try:  # None if a file changed or went since the checks, or holds a ts beyond ms
        return max(
            admitting_lateness_ms(
                [file_ts_range_ms(p) for p in feed.files],
                batch_sizes(feed.rows, max_files, max_rows),
            )
            for feed in feeds
        )
    except (OSError, ValueError, pa.ArrowException, StretchError):
        return None


def explain(
    failure: QueryFailed,
    feeds: Sequence[Feed],
    checkpoint: Path,
    allowed_lateness_ms: int | None,
    log: Path | None,
    max_files: int | None = 1,
    max_rows: int | None = None,
) -> StretchError:
    """One line for ``failure``: its cause, where late rows came from, where the traces are.

    For late rows it names the least ``--allowed-lateness-ms`` under which no micro-batch
    of any feed is late (in name order, whole files per micro-batch: at most ``max_files``,
    at most ``max_rows`` rows unless one file holds more; None: no such limit), from the files'
    ``ts`` ranges; at least what the refused row needs. Appends Spark's whole text to
    ``log`` (if given) and logs it at INFO (stderr with ``-v``).
    """
    logger.info("%s failed:\n%s", failure.query, failure.detail)
    line = str(failure)
    late = _LATE.search(line)
    writer = _WRITER.search(failure.query)
    if late and writer and int(writer.group(1)) < len(feeds):
        feed = feeds[int(writer.group(1))]
        row, ts, released = (int(g) for g in late.groups())
        planned = batch_files(checkpoint / f"in{feed.source}", feed)
        if planned is not None:
            batch, files = planned
            path = late_file(files, feed, row)
            came = (
                f"row {row} came from {path}"
                if path is not None
                else f"the rows came from {', '.join(map(str, files))}"
            )
            line += f"; {came} (micro-batch {batch})"
        needed = (allowed_lateness_ms or 0) + released - ts
        admitting = _admitting(feeds, max_files, max_rows)
        why = (
            f"or more: this row is {released - ts} ms late"
            if admitting is None
            else f"the least under which no micro-batch of the inputs is late, by their files' "
            f"ts ranges; this row is {released - ts} ms late"
        )
        line += (
            f"; to accept late rows run again with --allowed-lateness-ms "
            f"{max(needed, admitting or 0)} ({why}) under a new --name, --checkpoint and "
            "--output (this operator's watermark has passed them, and the output holds this "
            "run's rows), or drop them with --late-rows drop"
        )
    if log is not None:
        with log.open("a", encoding="utf-8") as out:
            out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {failure.query} failed\n")
            out.write(failure.detail.rstrip() + "\n")
        line += f" (Spark's traces: {log})"
    return StretchError(line)
