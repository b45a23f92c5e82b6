"""The sequential shared-nothing (SN) reference runtime: Alg. 1 and Alg. 2 in plain Python.

This is the oracle every other runtime is checked against, and the SN baseline of section
8. Pi instances each keep a private sigma_j; ``forwardSN`` (Alg. 1) sends a copy of each
tuple to every instance responsible for one of its keys; each instance runs ``processSN``
(Alg. 2, ``stretch.model.instance``). Watermarks go to every instance. The instances' outputs
are merged in ``(ts, cause)`` order, which by Theorem 2 / Corollary 1 does not depend on Pi.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial

import pyarrow as pa

from stretch.model.batch import Batch
from stretch.model.instance import OPlusInstance, OutputRow, TraceEvent
from stretch.model.mapping import default_mapping, validate_mapping
from stretch.model.oplus import END_OF_INPUT, OPlus, StreamTuple
from stretch.model.order import in_stream_order
from stretch.model.schema import conform
from stretch.model.windows import WindowStore

__all__ = ["SNRuntime", "Watermark", "merge_sources", "output_table", "run_sn", "tuples_of"]


@dataclass(frozen=True, slots=True)
class Watermark:
    """An explicit watermark from a source: none of its later tuples has ``ts`` below."""

    ts: int
    source: int
    seq: int

    @property
    def order(self) -> tuple[int, int, int]:
        """The watermark's position in the total order."""
        return (self.ts, self.source, self.seq)


Item = StreamTuple | Watermark


class SNRuntime:
    """Pi O+ instances with private state, fed by forwardSN (Alg. 1).

    Args:
        op: The operator.
        parallelism: Pi, the number of instances.
        mapping: Key group -> instance; round robin by default.
        trace: If given, instance 0's state operations are appended to it.

    Raises:
        ValueError: ``parallelism`` is below 1, or ``mapping`` does not fit it.

    """

    def __init__(
        self,
        op: OPlus,
        parallelism: int = 1,
        mapping: Sequence[int] | None = None,
        trace: list[TraceEvent] | None = None,
    ) -> None:
        if parallelism < 1:
            msg = f"parallelism must be >= 1, got {parallelism}"
            raise ValueError(msg)
        self.op = op
        self.mapping = validate_mapping(
            mapping if mapping is not None else default_mapping(op.key_groups, parallelism),
            op.key_groups,
            parallelism,
        )
        self.rows: list[OutputRow] = []
        self.instances = [
            OPlusInstance(
                op,
                [WindowStore() for _ in range(op.key_groups)],
                owns=partial(self._owns, j),
                emit=self.rows.append,
                trace=trace if j == 0 else None,
            )
            for j in range(parallelism)
        ]

    def _owns(self, instance: int, group: int) -> bool:
        return self.mapping[group] == instance

    def forward(self, t: StreamTuple) -> None:
        """forwardSN (Alg. 1): a copy of t to each instance responsible for a key of t."""
        peers = {self.mapping[self.op.group_of(k)] for k in self.op.keys_of(t)}
        for p in sorted(peers):
            self.instances[p].process(t)

    def watermark(self, ts: int) -> None:
        """An explicit watermark, delivered to every instance."""
        for instance in self.instances:
            instance.advance(ts)

    def run(self, items: Iterable[Item]) -> list[OutputRow]:
        """Process a merged, totally ordered stream to its end; return the sorted output."""
        for item in items:
            if isinstance(item, Watermark):
                self.watermark(item.ts)
            else:
                self.forward(item)
        self.watermark(END_OF_INPUT)
        return sorted(self.rows, key=lambda r: (r.ts, r.cause))


def tuples_of(op: OPlus, tables: Sequence[pa.Table]) -> list[list[StreamTuple]]:
    """One list of tuples per source, from tables conformed to the operator's inputs."""
    if len(tables) != op.n_inputs:
        msg = f"operator {op.name!r} takes {op.n_inputs} input streams, got {len(tables)}"
        raise ValueError(msg)
    streams = []
    for source, (table, schema) in enumerate(zip(tables, op.inputs, strict=True)):
        data = in_stream_order(conform(table, schema, f"source {source} of {op.name!r}"))
        batch = Batch.from_arrow(data, schema)
        streams.append(
            [
                StreamTuple(int(ts), source, seq, payload)
                for seq, (ts, payload) in enumerate(
                    zip(batch.ts.tolist(), batch.rows(), strict=True)
                )
            ]
        )
    return streams


def merge_sources(streams: Sequence[Sequence[Item]]) -> Iterator[Item]:
    """Merge timestamp-sorted per-source streams into the total order (ts, source, seq)."""
    return heapq.merge(*streams, key=lambda item: item.order)


def output_table(op: OPlus, rows: Sequence[OutputRow]) -> pa.Table:
    """Output rows as a table: ``ts`` first, then the operator's output columns."""
    return op.output.table([r.ts for r in rows], [r.payload for r in rows])


def run_sn(op: OPlus, tables: Sequence[pa.Table], parallelism: int = 1) -> pa.Table:
    """Run ``op`` over one timestamp-sorted table per input stream with the SN runtime."""
    rows = SNRuntime(op, parallelism).run(merge_sources(tuples_of(op, tables)))
    return output_table(op, rows)
