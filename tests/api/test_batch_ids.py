"""Batch ids per source: a low-water mark and a bounded recent set (issue 10, class 9)."""

from __future__ import annotations

from stretch.api.batch_ids import BatchIds


def test_recent_ids_are_exact_and_older_ones_fall_under_the_low_water_mark() -> None:
    ids = BatchIds(recent=4)
    for batch_id in (10, 12, 11, 15, 13, 20):
        ids.add(batch_id)
    assert len(ids) == 4 and ids.low_water == 11
    assert all(seen in ids for seen in (10, 11, 12, 13, 15, 20))
    assert 14 not in ids and 16 not in ids and 21 not in ids
    assert 3 in ids  # older than every remembered id: counted as seen


def test_memory_stays_bounded_over_many_ids() -> None:
    ids = BatchIds(recent=100)
    for batch_id in range(100_000):
        assert batch_id not in ids
        ids.add(batch_id)
        ids.add(batch_id)
    assert len(ids) == 100 and ids.low_water == 99_899
