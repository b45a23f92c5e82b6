"""Checkpoints: written whole, verified against their meta.json, never lost to a rewrite."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from stretch.durable import CheckpointStore
from stretch.errors import DamagedStateError

TABLES = {"t": pa.table({"x": [1, 2, 3]})}


def test_a_checkpoint_reads_back_as_written(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    size = store.write(7, {"n": 1}, TABLES)
    latest = store.latest()
    assert latest is not None and (latest.lsn, latest.meta, latest.bytes) == (7, {"n": 1}, size)
    assert latest.tables["t"].equals(TABLES["t"])


def test_a_checkpoint_moved_to_another_lsn_is_damage(tmp_path: Path) -> None:
    """Its meta.json says which records it covers; a folder renamed would skip or repeat."""
    store = CheckpointStore(tmp_path)
    store.write(7, {}, TABLES)
    (tmp_path / f"{7:020d}").rename(tmp_path / f"{9:020d}")
    with pytest.raises(DamagedStateError, match="meta.json"):
        store.latest()


def test_a_second_checkpoint_at_the_same_lsn_keeps_the_first(tmp_path: Path) -> None:
    """Nothing was journaled between them, so they hold the same state: the one on disk
    stays (replacing it would leave a moment with neither, and a crash then loses both)."""
    store = CheckpointStore(tmp_path)
    first = store.write(7, {"n": 1}, TABLES)
    folder = tmp_path / f"{7:020d}"
    inode = folder.stat().st_ino
    assert store.write(7, {"n": 1}, TABLES) == first
    assert folder.stat().st_ino == inode
    assert not list(tmp_path.glob(".tmp-*"))
    latest = store.latest()
    assert latest is not None and latest.meta == {"n": 1} and latest.bytes == first
