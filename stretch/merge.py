"""Merging the outputs of an operator sharded over several sidecars (docs/design.md "Sharding").

Each shard's output log holds the rows of the key groups it owns, in ``(ts, cause)`` order,
with the cause as the column ``CAUSE``. The output of one unsharded sidecar is all shards'
rows in that same order, so a merge needs each shard's rows only up to a common cut: a
``ts`` below every unfinished shard's output watermark (each shard holds every row before
its watermark). A ``Cut`` records where each shard's log is at the cut; the merged offset
of a cut is the sum of the shards' offsets, since the merged rows before it are exactly
the shards' rows before it. So a merged offset with its shard offsets is a position that
any reader can resume from, and committing it commits each shard's offset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from stretch.model.oplus import END_OF_INPUT
from stretch.model.schema import CAUSE

__all__ = ["Cut", "common_watermark", "merge_outputs", "split_urls"]


@dataclass(frozen=True)
class Cut:
    """A position in a sharded operator's merged output.

    Attributes:
        shards: Each shard's output offset at the cut.

    """

    shards: tuple[int, ...]

    @property
    def offset(self) -> int:
        """The merged offset: the rows of every shard before the cut."""
        return sum(self.shards)

    @classmethod
    def start(cls, count: int) -> Cut:
        """The start of the output of ``count`` shards."""
        return cls((0,) * count)


def common_watermark(watermarks: Sequence[int], finished: Sequence[bool]) -> int:
    """The ``ts`` below which every shard's rows are in its log (``END_OF_INPUT``: all)."""
    open_marks = [w for w, done in zip(watermarks, finished, strict=True) if not done]
    return min(open_marks) if open_marks else END_OF_INPUT


def merge_outputs(tables: Sequence[pa.Table]) -> tuple[pa.Table, NDArray[np.int64]]:
    """The rows of the shards' tables (each a cut-to-cut range, sorted) in output order.

    Sorts by ``(ts, cause)`` and drops ``CAUSE``. Returns the rows and, for each, its
    position in the tables concatenated (so which shard it came from). O(n log n).
    """
    if not any(t.num_rows for t in tables):
        return tables[0].drop_columns([CAUSE]), np.empty(0, dtype=np.int64)
    table = pa.concat_tables(tables).combine_chunks()
    causes = table.column(CAUSE).combine_chunks()
    width = causes.type.list_size
    key = causes.values.to_numpy().reshape(-1, width)
    ts = table.column(0).to_numpy()
    order = np.lexsort([*(key[:, i] for i in reversed(range(width))), ts])
    return table.drop_columns([CAUSE]).take(pa.array(order)), order


def split_urls(url: str) -> list[str]:
    """The sidecar URLs of a ``url`` option: one, or several separated by commas.

    Raises:
        ValueError: an empty URL in the list, or the same URL twice.

    """
    urls = [u.strip().rstrip("/") for u in url.split(",")]
    if any(not u for u in urls):
        msg = f"url {url!r}: an empty URL in the comma-separated list"
        raise ValueError(msg)
    if len(set(urls)) != len(urls):
        msg = f"url {url!r}: a sidecar is named twice; each shard needs its own sidecar"
        raise ValueError(msg)
    return urls
