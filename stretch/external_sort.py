"""Sort a stream of tables by ``ts`` in bounded memory: an external merge sort.

``stretch replay`` gives the runtime each input in ``ts`` order; an input file out of
order goes through :func:`sorted_by_ts`. Its rows come out as a stable sort of all of
them would give them (rows of equal ``ts`` in the order they were read), so the output
of a replay does not depend on how the file was cut into batches or runs.

Up to :data:`SORT_RUN_BYTES` of rows are sorted in memory. A larger input is cut into
*runs* of that size, in the order read; each run is sorted and written to a temporary
Arrow IPC file in batches of about :data:`MERGE_BATCH_BYTES`, and the runs are then
merged a step at a time. A step takes every row at or below a cut: the least ``ts`` that
ends a run's rows held, each run first reading on until it holds every row at that
``ts``. The rows of one step are ordered by a stable sort of the runs' rows in run order,
which keeps ties in the input's order (run ``r`` holds rows read before run ``r + 1``'s).
At most :data:`MERGE_FAN_IN` runs are merged at once: more are first merged in
consecutive groups into longer runs, in order (a pass over the data each time).
Memory: one run (and its sorted copy) while the runs are written, about one batch per
run while they are merged, whatever the input's size. Disk: the input, as Arrow, in the
system's temporary directory (``TMPDIR``; during a pass, also one group's merged run)
until the last row is taken or the sort is closed.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from stretch._processes import running
from stretch.errors import InputError
from stretch.model.schema import TS

__all__ = [
    "MERGE_BATCH_BYTES",
    "MERGE_FAN_IN",
    "SORT_RUN_BYTES",
    "remove_spill_directories",
    "sorted_by_ts",
]

log = logging.getLogger(__name__)

SORT_RUN_BYTES = 64 << 20
"""The most Arrow bytes of rows sorted in memory at once (one run)."""

MERGE_BATCH_BYTES = 1 << 20
"""About the Arrow bytes of a run's batch on disk: what a merge holds per run."""

MERGE_FAN_IN = 64
"""The most runs merged at once; more are first merged in groups of this many (a pass)."""

_PREFIX = "stretch-sort-"
_TS_MAX = int(np.iinfo(np.int64).max)

_SPILL_DIRECTORIES: set[Path] = set()
"""The spill directories of the sorts open in this process."""


def sorted_by_ts(
    tables: Iterable[pa.Table], where: str = "input", run_bytes: int | None = None
) -> Iterator[pa.Table]:
    """The rows of ``tables`` (one schema, an int64 ``ts`` column) in stable ``ts`` order.

    Args:
        tables: The rows, read only as the sort needs them.
        where: What the rows are, for the log (e.g. the file).
        run_bytes: The most bytes sorted in memory (default :data:`SORT_RUN_BYTES`).

    Yields:
        Tables whose concatenation is the input sorted stably by ``ts``. The first is given
        once every row was read (the last run written); then one batch per merge step.

    Raises:
        InputError: The runs could not be written or read (e.g. the disk is full).

    """
    limit = SORT_RUN_BYTES if run_bytes is None else run_bytes
    rows = _Rows(tables)
    first = next(rows, None)
    if first is None:
        return
    rows.push(first)
    run, more = _next_run(rows, limit)
    if not more:  # it fits in memory: no disk
        yield _sorted(run)
        return
    with _spill_errors(where), _SpillDirectory() as spill:
        log.info(
            "%s: out of ts order; sorting it in runs of %.3g MiB in %s",
            where,
            limit / 2**20,
            spill.path,
        )
        paths: list[Path] = []
        read = 0
        while True:
            read += run.num_rows
            paths.append(spill.write([_sorted(run)]))
            del run
            log.info("%s: sorted run %d written (%d rows read)", where, len(paths), read)
            if not more:
                break
            run, more = _next_run(rows, limit)
        log.info("%s: %d sorted runs written; merging them", where, len(paths))
        while len(paths) > MERGE_FAN_IN:  # a pass merges each group into one run, in order
            paths = [
                spill.merge(paths[k : k + MERGE_FAN_IN]) for k in range(0, len(paths), MERGE_FAN_IN)
            ]
            log.info("%s: merged into %d runs", where, len(paths))
        yield from _merge([_Run(path) for path in paths])


@contextlib.contextmanager
def _spill_errors(where: str) -> Iterator[None]:
    """A failure to write or read the runs (e.g. a full disk) as an InputError naming TMPDIR."""
    try:
        yield
    except (OSError, pa.ArrowException) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        msg = (
            f"{where}: cannot sort it through the temporary directory "
            f"{tempfile.gettempdir()}: {reason.splitlines()[0]} (TMPDIR chooses another)"
        )
        raise InputError(msg) from exc


def remove_spill_directories() -> None:
    """Delete the spill directories of every open sort (before ``os._exit``)."""
    for path in list(_SPILL_DIRECTORIES):
        shutil.rmtree(path, ignore_errors=True)


def _next_run(rows: _Rows, limit: int) -> tuple[pa.Table, bool]:
    """The next tables of ``rows`` up to ``limit`` bytes, as one, and whether more follow."""
    run: list[pa.Table] = []
    held = 0
    for table in rows:
        run.append(table)
        held += table.nbytes
        if held >= limit:
            break
    after = next(rows, None)
    if after is not None:
        rows.push(after)
    return _concat(run), after is not None


class _Rows(Iterator[pa.Table]):
    """The tables that hold rows, as an iterator that can take one back."""

    def __init__(self, tables: Iterable[pa.Table]) -> None:
        self._tables = (table for table in tables if table.num_rows)
        self._back: list[pa.Table] = []

    def push(self, table: pa.Table) -> None:
        """Give ``table`` again next."""
        self._back.append(table)

    def __next__(self) -> pa.Table:
        return self._back.pop() if self._back else next(self._tables)


def _concat(tables: list[pa.Table]) -> pa.Table:
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def _sorted(table: pa.Table) -> pa.Table:
    """``table`` sorted stably by ``ts`` (itself when it is in order)."""
    ts = _ts(table)
    if not len(ts) or bool(np.all(ts[1:] >= ts[:-1])):
        return table
    return table.take(pa.array(np.argsort(ts, kind="stable")))


def _ts(table: pa.Table) -> NDArray[np.int64]:
    return np.asarray(table.column(TS).to_numpy(), np.int64)


class _SpillDirectory:
    """A temporary directory of sorted runs, deleted when the sort ends or is closed.

    Its name holds this process's id: a directory whose process is gone (killed while
    sorting) is deleted by the next sort that makes one.
    """

    def __init__(self) -> None:
        _remove_abandoned()
        self.path = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))
        _SPILL_DIRECTORIES.add(self.path)
        self._runs = 0

    def write(self, tables: Iterable[pa.Table]) -> Path:
        """Write sorted rows (at least one table) as a run; return its file.

        In batches of about ``MERGE_BATCH_BYTES``: a table's rows are cut by its mean row.
        """
        path = self.path / f"run-{self._runs}.arrow"
        self._runs += 1
        rows = iter(tables)
        first = next(rows)
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, first.schema) as writer:
            for table in itertools.chain([first], rows):
                row_bytes = max(1, table.nbytes // max(1, table.num_rows))
                writer.write_table(table, max_chunksize=max(1, MERGE_BATCH_BYTES // row_bytes))
        return path

    def merge(self, paths: list[Path]) -> Path:
        """Merge the runs ``paths`` into one run, in their order; delete them."""
        merged = self.write(_merge([_Run(path) for path in paths]))
        for path in paths:
            path.unlink()
        return merged

    def __enter__(self) -> _SpillDirectory:
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        _SPILL_DIRECTORIES.discard(self.path)


def _remove_abandoned() -> None:
    """Delete the spill directories whose process is gone."""
    for path in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*-*"):
        pid = path.name[len(_PREFIX) :].partition("-")[0]
        if pid.isdigit() and not running(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


class _Run:
    """A sorted run on disk, read a batch at a time.

    Read into memory, not mapped: a map's pages would stay in the process's resident
    memory as the merge reads on.

    Attributes:
        table: The rows read and not yet taken.
        ts: Their ``ts``.
        ended: Whether every batch is read.

    """

    def __init__(self, path: Path) -> None:
        self._reader = pa.ipc.open_file(pa.OSFile(str(path), "rb"))
        self._next = 0
        self.table: pa.Table = self._reader.schema.empty_table()
        self.ts: NDArray[np.int64] = np.empty(0, np.int64)
        self.ended = self._reader.num_record_batches == 0

    def read(self) -> None:
        """Read the next batch that holds rows (if any) into the rows held."""
        batch = self._reader.schema.empty_table()
        while not self.ended and not batch.num_rows:
            batch = pa.Table.from_batches([self._reader.get_batch(self._next)])
            self._next += 1
            self.ended = self._next == self._reader.num_record_batches
        self.table = _concat([self.table, batch]) if self.table.num_rows else batch
        self.ts = np.concatenate([self.ts, _ts(batch)]) if len(self.ts) else _ts(batch)

    def read_past(self, cut: int) -> None:
        """Read until the rows held include every row with ``ts <= cut``."""
        while not self.ended and (not len(self.ts) or self.ts[-1] <= cut):
            self.read()

    def take(self, cut: int) -> pa.Table:
        """Remove the rows held with ``ts <= cut`` and return them."""
        stop = int(np.searchsorted(self.ts, cut, "right"))
        taken = self.table.slice(0, stop)
        self.table, self.ts = self.table.slice(stop), self.ts[stop:]
        return taken


def _merge(runs: list[_Run]) -> Iterator[pa.Table]:
    """The rows of the sorted ``runs`` in stable ``ts`` order (ties in run order)."""
    while True:
        for run in runs:
            if not run.ended and not len(run.ts):
                run.read()
        if not any(len(run.ts) for run in runs):
            return
        # Every run not ended holds rows: the least of their last ts is the step's cut.
        cut = min((int(run.ts[-1]) for run in runs if not run.ended), default=_TS_MAX)
        for run in runs:
            run.read_past(cut)
        taken = (run.take(cut) for run in runs)
        yield _sorted(_concat([table for table in taken if table.num_rows]))
