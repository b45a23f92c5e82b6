"""The output log: reads by offset across batches, commits trim whole and partial batches."""

from __future__ import annotations

import pyarrow as pa
import pytest

from stretch.errors import InputError
from stretch.model.schema import Schema
from stretch.vsn._output_log import OutputLog

SCHEMA = Schema.of(v="int")


def batch(start: int, stop: int) -> pa.RecordBatch:
    return SCHEMA.record_batch(list(range(start, stop)), [(10 * i,) for i in range(start, stop)])


def filled() -> OutputLog:
    log = OutputLog(SCHEMA.arrow(), readers=["a", "b"])
    log.append([batch(0, 3), batch(3, 4)])
    log.append(batch(start, stop) for start, stop in [(4, 4), (4, 9)])
    return log


@pytest.mark.parametrize(("offset", "max_rows"), [(0, None), (2, 2), (3, 1), (5, 100), (9, 3)])
def test_read_spans_batches(offset: int, max_rows: int | None) -> None:
    table, next_offset = filled().read(offset, max_rows)
    expected = list(range(offset, 9 if max_rows is None else min(9, offset + max_rows)))
    assert table.schema == SCHEMA.arrow()
    assert table.column("ts").to_pylist() == expected
    assert table.column("v").to_pylist() == [10 * i for i in expected]
    assert next_offset == offset + len(expected)


def test_commit_trims_what_every_reader_consumed() -> None:
    log = filled()
    log.commit(5, "a")
    assert log.start_offset == 0
    log.commit(2, "b")
    assert log.start_offset == 2
    with pytest.raises(InputError, match="trimmed"):
        log.read(1)
    assert log.read(2)[0].column("ts").to_pylist() == list(range(2, 9))
    log.commit(6, "b")
    assert (log.start_offset, log.end_offset) == (5, 9)
    assert log.read(5, 2)[0].column("ts").to_pylist() == [5, 6]
    log.commit(9, "a")
    log.commit(9, "b")
    assert (log.start_offset, log.end_offset) == (9, 9)
    assert log.read(9)[0].num_rows == 0
    log.append([batch(9, 11)])
    assert log.read(9)[0].column("ts").to_pylist() == [9, 10]


def test_commit_checks_reader_and_offset() -> None:
    log = filled()
    with pytest.raises(InputError, match="unknown output reader"):
        log.commit(1, "c")
    with pytest.raises(InputError, match="outside the log"):
        log.commit(10, "a")


def test_wait_returns_once_a_row_or_the_end_arrives() -> None:
    log = OutputLog(SCHEMA.arrow())
    log.finish()
    table, offset = log.read(0, wait_s=5.0)
    assert (table.num_rows, offset, log.finished) == (0, 0, True)


def test_a_commit_beyond_the_end_frees_a_full_log_at_once() -> None:
    """A journal's commit re-applied beyond the end (a restore whose reader was further
    on) trims every row held at once and the rest as they come: a full log never waits
    for output it holds back (``wait_room``, the drainer's pause)."""
    log = OutputLog(SCHEMA.arrow())
    log.append([batch(0, 10)])
    assert (log.uncommitted, log.wait_room(10, 0)) == (10, 0)
    log.commit(25, when_produced=True)
    assert (log.uncommitted, log.wait_room(10, 0)) == (0, 10)
    log.append([batch(10, 30)])  # the commit applies as the rows come
    assert (log.start_offset, log.uncommitted, log.wait_room(10, 0)) == (25, 5, 5)


def test_a_commit_waiting_for_rows_is_reported_and_kept_by_a_snapshot() -> None:
    """``committed_offset`` says where a reader committed while the rows are produced
    again, and a checkpoint taken meanwhile keeps that commit (it was lost: the restored
    log started from where the rows had got to)."""
    log = OutputLog(SCHEMA.arrow())
    log.append([batch(0, 10)])
    log.commit(25, when_produced=True)
    assert (log.start_offset, log.committed_offset) == (10, 25)
    restored = OutputLog(SCHEMA.arrow())
    restored.restore(log.snapshot())
    assert (restored.start_offset, restored.committed_offset) == (10, 25)
    restored.append([batch(10, 30)])
    assert (restored.start_offset, restored.committed_offset, restored.uncommitted) == (25, 25, 5)
