"""The journal: records read back as written, group commit, cut-short tails and damage."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stretch.durable import CheckpointStore, Journal, read_journal
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
    start=st.integers(1, 31),
)
def test_records_come_back_in_order_across_segments(
    tmp_path_factory: pytest.TempPathFactory,
    payloads: list[bytes],
    rotate_at: set[int],
    start: int,
) -> None:
    directory = tmp_path_factory.mktemp("journal")
    _write(directory, payloads, rotate_at).close()
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
