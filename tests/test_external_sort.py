"""The external sort against a stable in-memory sort of the same rows."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stretch import external_sort
from stretch.errors import InputError
from stretch.external_sort import remove_spill_directories, sorted_by_ts


@pytest.fixture(autouse=True)
def _spill_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Spill directories under the test's own directory."""
    spill = tmp_path / "spill"
    spill.mkdir(exist_ok=True)
    monkeypatch.setattr(tempfile, "tempdir", str(spill))
    return spill


def _tables(ts_lists: list[list[int]]) -> list[pa.Table]:
    """Tables of the given ts, each row numbered (``i``) and labelled (``s``) in input order."""
    tables, start = [], 0
    for ts in ts_lists:
        i = range(start, start + len(ts))
        tables.append(
            pa.table(
                {
                    "ts": pa.array(ts, pa.int64()),
                    "i": pa.array(i, pa.int64()),
                    "s": pa.array([f"row{j}" for j in i], pa.string()),
                }
            )
        )
        start += len(ts)
    return tables


def _stable(tables: list[pa.Table]) -> pa.Table:
    whole = pa.concat_tables(tables)
    return whole.take(pa.array(np.argsort(whole.column("ts").to_numpy(), kind="stable")))


@settings(max_examples=150, deadline=None)
@given(
    ts_lists=st.lists(st.lists(st.integers(-5, 30), max_size=40), min_size=1, max_size=12),
    run_bytes=st.integers(1, 3000),
    batch_bytes=st.integers(1, 400),
    fan_in=st.integers(2, 5),
)
def test_the_sort_is_a_stable_sort_of_all_rows(
    ts_lists: list[list[int]], run_bytes: int, batch_bytes: int, fan_in: int
) -> None:
    """Runs of a few rows, batches on disk of one row up, merges in passes: ties keep the
    input's order."""
    tables = _tables(ts_lists)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(external_sort, "MERGE_BATCH_BYTES", batch_bytes)
        patch.setattr(external_sort, "MERGE_FAN_IN", fan_in)
        out = list(sorted_by_ts(tables, run_bytes=run_bytes))
    if not sum(t.num_rows for t in tables):
        assert sum(t.num_rows for t in out) == 0
        return
    assert pa.concat_tables(out).equals(_stable(tables))


def test_extreme_ts_and_many_runs(_spill_here: Path) -> None:
    """int64's ends, equal ts across every run, and many runs of one batch row each."""
    low, high = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    rng = np.random.default_rng(3)
    ts = rng.choice([low, -1, 0, 7, high], 3000).tolist()
    tables = _tables([ts[k : k + 100] for k in range(0, 3000, 100)])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(external_sort, "MERGE_BATCH_BYTES", 1)
        sort = sorted_by_ts(tables, run_bytes=2000)
        first = next(sort)
        runs = list(next(_spill_here.iterdir()).iterdir())
        out = [first, *sort]
    assert len(runs) > 20
    assert pa.concat_tables(out).equals(_stable(tables))


def test_an_input_that_fits_is_sorted_in_memory(_spill_here: Path) -> None:
    tables = _tables([[3, 1, 2], [0, 5]])
    out = list(sorted_by_ts(tables))
    assert len(out) == 1
    assert out[0].equals(_stable(tables))
    assert not list(_spill_here.iterdir())


def test_the_spill_directory_goes_at_the_end_and_when_closed(_spill_here: Path) -> None:
    tables = _tables([[5, 4, 3, 2, 1]] * 50)
    sort = sorted_by_ts(tables, run_bytes=500)
    assert sum(t.num_rows for t in sort) == 250
    assert not list(_spill_here.iterdir())
    sort = sorted_by_ts(tables, run_bytes=500)
    next(sort)
    (spill,) = _spill_here.iterdir()
    assert list(spill.iterdir())  # its runs
    sort.close()
    assert not spill.exists()


def test_a_stop_at_once_removes_open_spill_directories(_spill_here: Path) -> None:
    """What the CLI calls before ``os._exit`` on Ctrl-C."""
    sort = sorted_by_ts(_tables([[2, 1]] * 100), run_bytes=100)
    next(sort)
    (spill,) = _spill_here.iterdir()
    remove_spill_directories()
    assert not spill.exists()
    sort.close()


def test_a_dead_process_spill_directory_goes_with_the_next_sort(_spill_here: Path) -> None:
    """A sort killed outright leaves its runs; the next one that spills deletes them."""
    dead = _spill_here / "stretch-sort-999999999-abc"
    alive = _spill_here / f"stretch-sort-{os.getpid()}-abc"
    other = _spill_here / "keep-me"
    for path in (dead, alive, other):
        path.mkdir()
        (path / "run-0.arrow").write_bytes(b"x")
    sort = sorted_by_ts(_tables([[2, 1]] * 100), run_bytes=100)
    next(sort)
    assert not dead.exists()
    assert alive.exists()
    assert other.exists()
    sort.close()


def test_the_merge_holds_about_a_batch_per_run() -> None:
    """200,000 rows in 8 runs: the merge holds a small share of them in Arrow memory."""
    rows = 200_000
    rng = np.random.default_rng(7)
    ts = rng.integers(0, 10**9, rows)
    table = pa.table({"ts": pa.array(ts, pa.int64()), "x": rng.random(rows)})
    tables = [table.slice(k, 10_000) for k in range(0, rows, 10_000)]
    del table
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(external_sort, "MERGE_BATCH_BYTES", 16 << 10)
        sort = sorted_by_ts(tables, run_bytes=rows * 16 // 8)
        first = next(sort)  # every run written: the input is read
        del tables
        base, most, count, last = pa.total_allocated_bytes(), 0, first.num_rows, None
        for piece in sort:
            most = max(most, pa.total_allocated_bytes() - base)
            count += piece.num_rows
            ts_piece = piece.column("ts").to_numpy()
            assert last is None or ts_piece[0] >= last
            last = ts_piece[-1]
    assert count == rows
    assert most < rows * 16 / 10  # the whole input would be 3.2 MB; 8 runs x 16 KiB here


def test_more_runs_than_the_fan_in_are_merged_in_passes(
    _spill_here: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """40 runs, merged 3 at a time: three passes, ties still in input order."""
    caplog.set_level(logging.INFO, "stretch.external_sort")
    tables = _tables([[k % 7 for k in range(j, j + 30)] for j in range(0, 1200, 30)])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(external_sort, "MERGE_FAN_IN", 3)
        patch.setattr(external_sort, "MERGE_BATCH_BYTES", 100)
        sort = sorted_by_ts(tables, run_bytes=tables[0].nbytes)
        first = next(sort)
        (spill,) = _spill_here.iterdir()
        left = list(spill.iterdir())  # the runs of the last pass
        out = [first, *sort]
    passes = [r.getMessage() for r in caplog.records if "merged into" in r.getMessage()]
    assert passes == [f"input: merged into {n} runs" for n in (14, 5, 2)]
    assert len(left) == 2
    assert pa.concat_tables(out).equals(_stable(tables))


def test_a_temporary_directory_that_cannot_be_written_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """E.g. a full disk: an InputError naming the directory and TMPDIR, not a traceback."""
    missing = tmp_path / "no-such-dir"
    monkeypatch.setattr(tempfile, "tempdir", str(missing))
    with pytest.raises(
        InputError, match=r"^l\.parquet: cannot sort it through .*no-such-dir.*TMPDIR"
    ):
        list(sorted_by_ts(_tables([[2, 1]] * 100), "l.parquet", run_bytes=100))


def test_a_run_that_cannot_be_written_leaves_no_directory(
    _spill_here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(self: object, tables: object) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(external_sort._SpillDirectory, "write", full)
    with pytest.raises(InputError, match="No space left on device"):
        list(sorted_by_ts(_tables([[2, 1]] * 100), run_bytes=100))
    assert not list(_spill_here.iterdir())
