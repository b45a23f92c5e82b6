"""Operator 15 (forward) on the kernel path: each tuple once, vectorised per run.

Implements ``stretch.vsn._instance.CompiledOperator`` for ``ForwardSpec``: the owner of key
``seq % keys`` emits the tuple with the generic path's cause, so the output equals
``run_sn``'s.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from stretch.model.instance import UPDATED
from stretch.model.oplus import OPlus
from stretch.model.schema import ColumnType
from stretch.vsn._compiled._runs import audit_groups, data_nodes, owned_groups
from stretch.vsn._instance import ReadyNodes, VSNInstance
from stretch.vsn._output_block import OutputBlock
from stretch.vsn._reconfiguration import EpochPlan

__all__ = ["ForwardKernel"]


class ForwardKernel:
    """Operator 15: each tuple, once, by the owner of key ``seq % keys`` (vectorised)."""

    def __init__(self, op: OPlus, keys: int) -> None:
        self.op = op
        self.keys = keys
        self.comparisons: dict[int, int] = {}

    def process(self, instance: VSNInstance, nodes: ReadyNodes, start: int, stop: int) -> int:
        """Emit the rows of the owned tuples of the run; return the data tuples seen."""
        ts, source, seq = data_nodes(nodes, start, stop)
        seen = int(ts.shape[0])
        if seen == 0:
            return 0
        groups = (seq % self.keys) % self.op.key_groups
        mine = owned_groups(instance)[groups]
        audit_groups(instance, groups[mine])
        if not mine.all():
            ts, source, seq = ts[mine], source[mine], seq[mine]
        instance.emit_block(self._rows(instance, ts, source, seq))
        return seen

    def advance(self, instance: VSNInstance, watermark: int, budget: int) -> int:
        """Nothing expires: forward keeps no state."""
        return watermark

    def switch(self, plan: EpochPlan) -> None:
        """Nothing to move: forward keeps no state."""

    def codes_in_use(self) -> list[NDArray[np.int32]]:
        """None: forward keeps no state."""
        return []

    def tables_due(self, limit: int) -> bool:
        """Never: forward keeps no tables."""
        return False

    def compact_tables(self, limit: int) -> None:
        """Nothing to compact: forward keeps no tables."""

    def state_bytes(self) -> int:
        """Zero: forward keeps no state."""
        return 0

    def _rows(
        self,
        instance: VSNInstance,
        ts: NDArray[np.int64],
        source: NDArray[np.int64],
        seq: NDArray[np.int64],
    ) -> OutputBlock:
        """The tuples' rows, in their (ESG_in) order: payload gathered from each source."""
        pool = instance.shared
        sources = pool.sources
        picks = [
            (store.rows(), pick, seq[pick])
            for s, store in enumerate(sources)
            if (pick := np.flatnonzero(source == s)).size
        ]
        payload = []
        for name, kind in self.op.output:
            if len(picks) == 1:
                held, _, rows = picks[0]
                values = held.column(name)[rows - held.base]
            else:
                values = np.empty(len(seq), dtype=sources[0].rows().column(name).dtype)
                for held, pick, rows in picks:
                    values[pick] = held.column(name)[rows - held.base]
            payload.append(
                sources[0].dictionary.decode_arrow(values) if kind is ColumnType.STR else values
            )
        cause = (UPDATED, ts, source, seq, 0, 0, 0)
        return OutputBlock.of_columns(pool.output_schema, ts, cause, payload)
