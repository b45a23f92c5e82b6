"""One operator sharded over several sidecars, used as if it ran on one (docs/design.md "Sharding").

``ShardedClient`` has the methods of ``StretchClient`` that a job uses. What changes the
operator goes to every shard: the creation (shard i of N owns the key groups ``g % N ==
i``), batches and staged parts, watermarks, closes, reconfigurations, deletion. Every shard
gets every row: each numbers a source's rows alike (stream order is a function of the rows,
``stretch.model.order``), keeps only the keys of its own key groups and drops the rest, so
the shards together store each tuple once and compare each pair once. Reads merge the
shards' outputs (``stretch.merge``) into the output of one sidecar, offsets included.

A merged offset stands for a ``Cut`` (each shard's offset there). This client remembers the
cuts of the offsets it returned, so ``output`` and ``commit`` take those, 0, and the offset
last committed (the sum of the shards' committed offsets, which a new client finds); the
Spark reader keeps cuts in its own offsets (``read_between``, ``available``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from types import TracebackType
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from stretch.client import BatchResult, StretchClient, arrow_bytes, read_until_finished
from stretch.errors import InputError
from stretch.merge import Cut, common_watermark, merge_outputs, split_urls
from stretch.model.oplus import END_OF_INPUT

__all__ = ["ShardedClient", "connect"]

_FETCH_ROWS = 100_000
_POLL_S = 0.05
T = TypeVar("T")


def connect(
    url: str, token: str | None = None, timeout_s: float = 30.0
) -> StretchClient | ShardedClient:
    """A client of the sidecar at ``url``, or of the shards at ``A,B,...``.

    Raises:
        ValueError: an empty URL in the list or one named twice.

    """
    urls = split_urls(url)
    if len(urls) == 1:
        return StretchClient(urls[0], token=token, timeout_s=timeout_s)
    return ShardedClient(urls, token=token, timeout_s=timeout_s)


class ShardedClient:
    """A client of one operator sharded over the sidecars at ``urls`` (shard i at ``urls[i]``).

    Args:
        urls: The shards' addresses, in shard order (at least one).
        token: The bearer token, if the sidecars have one.
        timeout_s: The timeout of each request.

    """

    def __init__(self, urls: Sequence[str], token: str | None = None, timeout_s: float = 30.0):
        if not urls:
            msg = "a sharded client needs at least one sidecar URL"
            raise ValueError(msg)
        self.shards = [StretchClient(u, token=token, timeout_s=timeout_s) for u in urls]
        self._cuts: dict[str, dict[int, Cut]] = {}
        self._pool = ThreadPoolExecutor(len(urls), thread_name_prefix="stretch-shard")

    def _each(self, call: Callable[[StretchClient], T]) -> list[T]:
        """``call`` on every shard at once (one thread each); the answers in shard order.

        Raises:
            StretchError: the first shard's failure, after every call ended.

        """
        futures = [self._pool.submit(call, shard) for shard in self.shards]
        wait(futures)
        return [future.result() for future in futures]

    def __enter__(self) -> ShardedClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close every shard's connection pool and the fan-out threads."""
        self._pool.shutdown()
        for shard in self.shards:
            shard.close()

    # -- operators -------------------------------------------------------------------------

    def create_operator(
        self,
        name: str,
        operator: str,
        params: Mapping[str, str | int | float] | None = None,
        parallelism: int = 1,
        max_parallelism: int | None = None,
        capacity: int | None = None,
        allowed_lateness_ms: int | None = None,
        autoscale: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Create ``name`` on every shard (shard i of N); return the merged status.

        ``parallelism``, ``max_parallelism`` and ``autoscale`` apply to each shard.
        """
        count = len(self.shards)
        for index, shard in enumerate(self.shards):
            shard.create_operator(
                name,
                operator,
                params,
                parallelism,
                max_parallelism,
                capacity,
                allowed_lateness_ms,
                autoscale,
                shard=(index, count),
            )
        return self.status(name)

    def status(self, name: str) -> dict[str, Any]:
        """The merged status: shard 0's sources (every shard gets every row), summed output.

        ``shards`` holds each shard's own status; ``parallelism`` is the threads of all,
        ``state_bytes`` the window state of all (None if a shard runs the generic path).
        """
        each = self._each(lambda shard: shard.status(name))
        outputs = [s["output"] for s in each]
        merged = dict(each[0])
        merged["parallelism"] = sum(int(s["parallelism"]) for s in each)
        merged["instances"] = [i for s in each for i in s["instances"]]
        states = [s["state_bytes"] for s in each]
        merged["state_bytes"] = None if None in states else sum(states)
        merged["output"] = {
            "start_offset": sum(int(o["start_offset"]) for o in outputs),
            "committed_offset": sum(int(o["committed_offset"]) for o in outputs),
            "end_offset": sum(int(o["end_offset"]) for o in outputs),
            "finished": all(bool(o["finished"]) for o in outputs),
            "watermark": common_watermark(
                [int(o["watermark"]) for o in outputs], [bool(o["finished"]) for o in outputs]
            ),
        }
        merged["shards"] = each
        return merged

    def delete_operator(self, name: str) -> None:
        """Delete ``name`` on every shard."""
        self._each(lambda shard: shard.delete_operator(name))
        self._cuts.pop(name, None)

    def reconfigure(
        self, name: str, parallelism: int | None = None, mapping: Sequence[int] | None = None
    ) -> int:
        """Reconfigure every shard alike (each to ``parallelism``); return shard 0's epoch."""
        return self._each(lambda shard: shard.reconfigure(name, parallelism, mapping))[0]

    def reconfigurations(self, name: str) -> list[dict[str, Any]]:
        """Every shard's reconfigurations, each with its ``shard`` index."""
        return [
            {**record, "shard": index}
            for index, shard in enumerate(self.shards)
            for record in shard.reconfigurations(name)
        ]

    # -- input: the same to every shard ------------------------------------------------------

    def add_batch(
        self,
        name: str,
        source: int,
        batch: pa.Table | Sequence[Mapping[str, Any]],
        batch_id: int | None = None,
        retry_s: float = 30.0,
    ) -> BatchResult:
        """Send the batch to every shard; the rows a shard took, duplicate if every shard had it.

        A resend after a send that failed on some shards is taken by the others and
        answered as a duplicate by those that had it.
        """
        answers = self._each(lambda s: s.add_batch(name, source, batch, batch_id, retry_s))
        return BatchResult(max(a.accepted for a in answers), all(a.duplicate for a in answers))

    def stage_part(
        self,
        name: str,
        source: int,
        writer: str,
        batch_id: int,
        part: int,
        table: pa.Table | bytes | Iterable[bytes],
        retry_s: float = 120.0,
    ) -> int:
        """Stage the part on every shard at once, encoded once; the rows shard 0 staged."""
        if isinstance(table, pa.Table):
            body = arrow_bytes(table)
        else:
            body = table if isinstance(table, bytes) else b"".join(table)
        return self._each(
            lambda s: s.stage_part(name, source, writer, batch_id, part, body, retry_s)
        )[0]

    def commit_staged(
        self,
        name: str,
        source: int,
        writer: str,
        batch_id: int,
        parts: Sequence[int],
        late_rows: str = "fail",
        allowed_lateness_ms: int | None = None,
        retry_s: float = 120.0,
        *,
        continues: bool = False,
    ) -> dict[str, Any]:
        """Commit the batch on every shard; shard 0's answer.

        A shard that fails fails the commit; Spark retries the batch, and the shards that
        had committed it answer it as a duplicate.
        """
        answers = self._each(
            lambda s: s.commit_staged(
                name,
                source,
                writer,
                batch_id,
                parts,
                late_rows,
                allowed_lateness_ms,
                retry_s,
                continues=continues,
            )
        )
        return {**answers[0], "duplicate": all(a["duplicate"] for a in answers)}

    def abort_staged(self, name: str, source: int, writer: str, batch_id: int) -> None:
        """Discard the batch's staged parts on every shard."""
        self._each(lambda shard: shard.abort_staged(name, source, writer, batch_id))

    def watermark(self, name: str, source: int, ts_ms: int) -> None:
        """The watermark to every shard."""
        self._each(lambda shard: shard.watermark(name, source, ts_ms))

    def close_source(self, name: str, source: int) -> None:
        """End of input for ``source`` on every shard."""
        self._each(lambda shard: shard.close_source(name, source))

    # -- output: merged ----------------------------------------------------------------------

    def available(self, name: str) -> Cut:
        """The cut at the shards' common output watermark: every row before it is final."""
        outputs = [status["output"] for status in self._each(lambda shard: shard.status(name))]
        finished = [bool(o["finished"]) for o in outputs]
        ts = common_watermark([int(o["watermark"]) for o in outputs], finished)
        if ts == END_OF_INPUT:
            return Cut(tuple(int(o["end_offset"]) for o in outputs))
        return Cut(tuple(self._each(lambda shard: int(shard.output_cut(name, ts)["offset"]))))

    def read_between(self, name: str, start: Cut, end: Cut) -> tuple[pa.Table, list[int]]:
        """The merged rows from cut ``start`` to cut ``end``, and the shard of each row.

        Raises:
            InputError: a shard's log did not hold the rows of its range.

        """
        ranges = dict(zip(self.shards, zip(start.shards, end.shards, strict=True), strict=True))
        tables = self._each(lambda shard: _read_range(shard, name, *ranges[shard]))
        merged, order = merge_outputs(tables)
        bounds = np.cumsum([t.num_rows for t in tables])
        return merged, np.searchsorted(bounds, order, side="right").tolist()

    def output(
        self, name: str, offset: int = 0, max_rows: int = 10_000, wait_ms: int = 0
    ) -> tuple[pa.Table, int]:
        """Merged output rows from ``offset`` (0 or one this client returned), and the next.

        Raises:
            InputError: an offset this client did not return.

        """
        start = self._cut(name, offset)
        deadline = time.monotonic() + wait_ms / 1000
        end = self.available(name)
        while end.offset <= start.offset and time.monotonic() < deadline:
            time.sleep(_POLL_S)
            end = self.available(name)
        end = Cut(tuple(max(a, b) for a, b in zip(start.shards, end.shards, strict=True)))
        table, shard_of_row = self.read_between(name, start, end)
        if table.num_rows > max_rows:
            table, counts = (
                table.slice(0, max_rows),
                np.bincount(
                    np.asarray(shard_of_row[:max_rows], dtype=np.int64), minlength=len(self.shards)
                ),
            )
            end = Cut(tuple(a + int(c) for a, c in zip(start.shards, counts, strict=True)))
        self._cuts.setdefault(name, {})[end.offset] = end
        return table, end.offset

    def read_all(
        self, name: str, timeout_s: float = 60.0, offset: int = 0, commit: bool = True
    ) -> pa.Table:
        """Every merged output row from ``offset`` until every shard's output is finished.

        Raises:
            TimeoutError: the output did not finish within ``timeout_s``.

        """
        return read_until_finished(self, name, timeout_s, offset, commit, max_rows=1_000_000)

    def wait_finished(self, name: str, timeout_s: float = 60.0) -> dict[str, Any]:
        """Wait until every shard's output is finished; the merged status then.

        Raises:
            TimeoutError: the output did not finish within ``timeout_s``.

        """
        self._each(lambda shard: shard.wait_finished(name, timeout_s))
        return self.status(name)

    def commit(self, name: str, offset: int) -> None:
        """Everything before ``offset`` (0 or one this client returned) was consumed.

        Not atomic across the shards: if it raises, some shards may have committed. Each
        shard's commit carries the whole cut, which the shards that took it keep, so a new
        client resumes at that cut all the same (``committed``); this one may call it again
        with the same offset (it keeps the shards' offsets of it).
        """
        cut = self._cut(name, offset).shards
        at = dict(zip(self.shards, cut, strict=True))
        self._each(lambda shard: shard.commit(name, at[shard], cut))
        cuts = self._cuts.get(name, {})
        for known in [k for k in cuts if k < offset]:
            del cuts[known]

    def committed(self, name: str) -> Cut:
        """The cut last committed, where a new reader resumes.

        The latest cut any shard kept from a commit (``committed_cut``): a commit that
        failed on some shards passed it on the others, and no shard's log has yet dropped
        a row past it. Each shard's committed offset (where its log starts, or will once a
        restarted shard has produced again the rows a commit passed) if no shard kept a
        cut, or one shard was committed beyond it by other means.
        """
        outputs = [status["output"] for status in self._each(lambda shard: shard.status(name))]
        offsets = tuple(int(output["committed_offset"]) for output in outputs)
        cuts = [tuple(output["committed_cut"]) for output in outputs if output["committed_cut"]]
        latest = max(cuts, key=sum, default=None)
        if latest is None or any(o > c for o, c in zip(offsets, latest, strict=True)):
            return Cut(offsets)
        return Cut(latest)

    def _cut(self, name: str, offset: int) -> Cut:
        """The cut of merged ``offset``: 0, one this client returned, or the committed one.

        A new client (after a restart) resumes from the cut last committed (``committed``):
        the shards' logs hold its rows, and its sum is the merged offset last committed.
        """
        if offset == 0:
            return Cut.start(len(self.shards))
        cut = self._cuts.get(name, {}).get(offset)
        if cut is not None:
            return cut
        committed = self.committed(name)
        if committed.offset == offset:
            return committed
        msg = (
            f"output offset {offset} of {name!r} is not a position this client read to; "
            "a sharded read starts at 0, at an offset its last read returned, or at the "
            f"offset last committed ({committed.offset})"
        )
        raise InputError(msg)


def _read_range(shard: StretchClient, name: str, offset: int, stop: int) -> pa.Table:
    """A shard's output rows ``[offset, stop)``, fetched in pages.

    Raises:
        InputError: the log did not hold the rows of the range.

    """
    pieces = []
    while True:
        want = stop - offset
        table, next_offset = shard.output(name, offset, max_rows=max(min(want, _FETCH_ROWS), 1))
        if table.num_rows > want:  # an empty range still asks for one row (for the schema)
            table, next_offset = table.slice(0, want), stop
        if table.num_rows:
            pieces.append(table)
        if next_offset >= stop:
            return pa.concat_tables(pieces) if pieces else table
        if next_offset <= offset:
            msg = f"output of {name!r}: offsets {offset}..{stop} were promised but none came"
            raise InputError(msg)
        offset = next_offset
