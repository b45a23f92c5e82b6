"""The VSN runtime (Alg. 3-6): n pool threads, m connected, one shared state.

It owns how an operator runs in parallel. Its front door is all that code outside this
package may use: ``setup``, ``run_vsn`` and ``run_vsn_pieces`` start a ``Pipeline``;
``RuntimeSettings`` holds its bounds; ``Pipeline.add`` answers an ``Admission``;
``status()`` and ``load()`` answer frozen snapshots (``PipelineStatus``, ``LoadCounters``);
``Shard`` names the key groups a pipeline owns when an operator is sharded over several
sidecars. The modules behind it are private (``_pool``, ``_instance``, ``_reconfiguration``,
``_ingest``, ``_reorder``, ``_feeding``, ``_output_block``, ``_output_log``, ``_audit`` and
the kernel paths ``_compiled``). It does not define what an operator computes
(``stretch.model``, ``stretch.operators``), nor HTTP or elasticity policies (``api``,
``controller``).
"""

from stretch.model.mapping import NOT_OWNED, Shard
from stretch.vsn.pipeline import CAUSE, Pipeline
from stretch.vsn.runtime import run_vsn, run_vsn_pieces, setup
from stretch.vsn.settings import DEFAULT_CAPACITY, MAX_LATENESS_MS, MAX_PARALLELISM, RuntimeSettings
from stretch.vsn.snapshot import OutputSnapshot, PipelineSnapshot, SourceSnapshot
from stretch.vsn.status import (
    Admission,
    GateStatus,
    InstanceStatus,
    LoadCounters,
    OutputStatus,
    PipelineStatus,
    ReconfigurationStatus,
    SourceStatus,
)

__all__ = [
    "CAUSE",
    "DEFAULT_CAPACITY",
    "MAX_LATENESS_MS",
    "MAX_PARALLELISM",
    "NOT_OWNED",
    "Admission",
    "GateStatus",
    "InstanceStatus",
    "LoadCounters",
    "OutputSnapshot",
    "OutputStatus",
    "Pipeline",
    "PipelineSnapshot",
    "PipelineStatus",
    "ReconfigurationStatus",
    "RuntimeSettings",
    "Shard",
    "SourceSnapshot",
    "SourceStatus",
    "run_vsn",
    "run_vsn_pieces",
    "setup",
]
