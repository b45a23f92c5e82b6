"""The VSN runtime (Alg. 3-6): n pool threads, m connected, one shared state.

It owns how an operator runs in parallel: the pipeline (``setup``, ``run_vsn``), the
instance pool and its threads running processVSN (Alg. 4), epoch-barrier reconfiguration
(Alg. 5-6), ingest with per-source reorder buffers, the output blocks and the output log,
and the kernel paths (``compiled``) that drive the operators' compiled kernels. It does
not define what an operator computes (``stretch.model``, ``stretch.operators``), nor HTTP
or elasticity policies (``api``, ``controller``).
"""

from stretch.vsn.pipeline import Pipeline
from stretch.vsn.runtime import run_vsn, setup

__all__ = ["Pipeline", "run_vsn", "setup"]
