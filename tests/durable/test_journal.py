"""The journal: records read back as written, group commit, cut-short tails and damage."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stretch.durable import CheckpointStore, Journal, JournalRecords, read_journal
from stretch.errors import DamagedStateError


def _write(directory: Path, payloads: list[bytes], rotate_at: set[int] = frozenset()) -> Journal:
    journal = Journal(directory)
    for i, payload in enumerate(payloads):
        if i in rotate_at:
            journal.rotate()
        journal.sync(journal.append(payload))
    return journal


@settings(max_examples=30, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=30),
    rotate_at=st.sets(st.integers(0, 29), max_size=4),
    data=st.data(),
)
def test_records_come_back_in_order_across_segments(
    tmp_path_factory: pytest.TempPathFactory,
    payloads: list[bytes],
    rotate_at: set[int],
    data: st.DataObject,
) -> None:
    """Read from the first segment or from any rotation (where a checkpoint would be)."""
    directory = tmp_path_factory.mktemp("journal")
    _write(directory, payloads, rotate_at).close()
    starts = sorted({1} | {i + 1 for i in rotate_at if i < len(payloads)})
    start = data.draw(st.sampled_from(starts), label="start")
    read = read_journal(directory, start)
    assert read.records == [(i + 1, p) for i, p in enumerate(payloads) if i + 1 >= start]
    assert read.next_lsn == max(len(payloads) + 1, start)
    assert read.dropped_tail == 0


def test_concurrent_syncs_share_fsyncs(tmp_path: Path) -> None:
    fsyncs: list[float] = []
    journal = Journal(tmp_path, on_fsync=fsyncs.append)
    barrier = threading.Barrier(8)

    def writer(k: int) -> None:
        barrier.wait()
        for i in range(50):
            journal.sync(journal.append(f"{k}-{i}".encode()))

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    journal.close()
    assert len(read_journal(tmp_path).records) == 400
    assert len(fsyncs) < 400  # every sync returned, and callers shared fsyncs


@pytest.mark.parametrize("cut", [1, 7, 20, 33])
def test_a_cut_short_last_record_is_dropped_and_truncated(tmp_path: Path, cut: int) -> None:
    _write(tmp_path, [b"a" * 10, b"b" * 10]).close()
    (segment,) = tmp_path.glob("*.log")
    size = segment.stat().st_size
    with segment.open("r+b") as file:
        file.truncate(size - cut)
    read = read_journal(tmp_path)
    assert read.records == [(1, b"a" * 10)] and read.next_lsn == 2
    assert read.dropped_tail > 0
    assert read_journal(tmp_path).dropped_tail == 0  # truncated: clean from now on


def test_zeros_at_the_end_count_as_a_cut(tmp_path: Path) -> None:
    _write(tmp_path, [b"a" * 10]).close()
    (segment,) = tmp_path.glob("*.log")
    with segment.open("ab") as file:
        file.write(b"\0" * 100)
    assert read_journal(tmp_path).records == [(1, b"a" * 10)]


@pytest.mark.parametrize("offset", [2, 10, 25, 40])
def test_a_flipped_byte_is_damage_naming_the_file(tmp_path: Path, offset: int) -> None:
    _write(tmp_path, [b"a" * 10, b"b" * 10]).close()
    (segment,) = tmp_path.glob("*.log")
    data = bytearray(segment.read_bytes())
    data[offset] ^= 0x40
    segment.write_bytes(bytes(data))
    with pytest.raises(DamagedStateError, match=segment.name):
        read_journal(tmp_path)


def test_a_cut_record_before_the_last_segment_is_damage(tmp_path: Path) -> None:
    _write(tmp_path, [b"a" * 10, b"b" * 10, b"c" * 10], rotate_at={2}).close()
    first = min(tmp_path.glob("*.log"))
    with first.open("r+b") as file:
        file.truncate(first.stat().st_size - 3)
    with pytest.raises(DamagedStateError, match="cut short"):
        read_journal(tmp_path)


def test_a_crash_in_any_phase_of_a_checkpoint_leaves_a_restorable_state(tmp_path: Path) -> None:
    """Rotated but not written, written under a temporary name, written but the old one
    not pruned: each state restores from the newest complete checkpoint and the journal."""
    journal = _write(tmp_path / "journal", [b"1", b"2"])
    store = CheckpointStore(tmp_path / "checkpoints")
    first = journal.rotate()
    store.write(first, {"n": 2}, {"t": pa.table({"x": [1, 2]})})
    journal.remove_before(first)
    journal.sync(journal.append(b"3"))
    second = journal.rotate()  # crash 1: rotated, no checkpoint written yet
    assert store.latest().lsn == first  # type: ignore[union-attr]
    assert [p for _, p in read_journal(tmp_path / "journal", first).records] == [b"3"]
    (store.directory / f".tmp-{second:020d}").mkdir()  # crash 2: a half-written one
    (store.directory / f".tmp-{second:020d}" / "t.arrow").write_bytes(b"partial")
    assert store.latest().lsn == first  # type: ignore[union-attr]
    store.write(second, {"n": 3}, {"t": pa.table({"x": [1, 2, 3]})})  # crash 3: not pruned
    latest = store.latest()
    assert latest is not None and latest.lsn == second and latest.meta == {"n": 3}
    assert latest.tables["t"].column("x").to_pylist() == [1, 2, 3]
    assert read_journal(tmp_path / "journal", second).records == []
    store.remove_except(second)
    assert store.lsns() == [second]
    journal.close()


def _segment(directory: Path, first_lsn: int) -> Path:
    return directory / f"{first_lsn:020d}.log"


def test_a_journal_with_nothing_written_reads_back_empty(tmp_path: Path) -> None:
    """A new journal, and one rotated with nothing after: no records, and no damage."""
    _write(tmp_path, []).close()
    assert read_journal(tmp_path) == JournalRecords([], 1, 0)
    journal = _write(tmp_path / "rotated", [b"a", b"b"])
    assert journal.rotate() == 3
    journal.close()
    assert read_journal(tmp_path / "rotated", 3) == JournalRecords([], 3, 0)
    unmade = tmp_path / "rotated" / "00000000000000000009.log.tmp"  # a crash mid-creation
    unmade.write_bytes(b"half")
    reopened = Journal(tmp_path / "rotated", 3)  # a restart: continues in the same segment
    assert not unmade.exists()
    reopened.sync(reopened.append(b"c"))
    reopened.close()
    assert read_journal(tmp_path / "rotated", 3).records == [(3, b"c")]


@pytest.mark.parametrize("start", [1, 3])
def test_a_missing_first_segment_is_damage(tmp_path: Path, start: int) -> None:
    """The segment named after the LSN to read from (1, or a checkpoint's) must exist:
    without it the records before the next segment are lost, or all records after it."""
    _write(tmp_path, [b"a", b"b", b"c", b"d"], rotate_at={2}).close()
    _segment(tmp_path, start).unlink()
    with pytest.raises(DamagedStateError, match=_segment(tmp_path, start).name):
        read_journal(tmp_path, start)


def test_a_journal_without_segments_is_damage(tmp_path: Path) -> None:
    with pytest.raises(DamagedStateError, match=f"{_segment(tmp_path, 1).name} is missing"):
        read_journal(tmp_path)


@pytest.mark.parametrize("rotate_at", [set(), {2}])
def test_a_segment_emptied_is_damage(tmp_path: Path, rotate_at: set[int]) -> None:
    """A segment truncated to 0 bytes, the last one or not, is not "nothing written"."""
    _write(tmp_path, [b"a", b"b", b"c"], rotate_at).close()
    victim = _segment(tmp_path, 3 if rotate_at else 1)
    victim.write_bytes(b"")
    with pytest.raises(DamagedStateError, match=victim.name):
        read_journal(tmp_path, 3 if rotate_at else 1)


def test_a_missing_segment_in_the_middle_is_a_gap(tmp_path: Path) -> None:
    """Segments whose names do not follow each other: records between are missing, even
    where the segments around the gap hold no record."""
    journal = _write(tmp_path, [b"a", b"b", b"c", b"d"], rotate_at={1, 3})
    journal.rotate()
    journal.close()
    assert [p.name for p in sorted(tmp_path.glob("*.log"))] == [
        _segment(tmp_path, lsn).name for lsn in (1, 2, 4, 5)
    ]
    _segment(tmp_path, 4).unlink()
    with pytest.raises(DamagedStateError, match=_segment(tmp_path, 5).name):
        read_journal(tmp_path, 2)


def test_segments_before_the_start_are_not_read(tmp_path: Path) -> None:
    """Segments a checkpoint covers (left by a crash before they were deleted) are skipped,
    damaged or not."""
    _write(tmp_path, [b"a", b"b", b"c"], rotate_at={2}).close()
    _segment(tmp_path, 1).write_bytes(b"junk")
    assert read_journal(tmp_path, 3).records == [(3, b"c")]
