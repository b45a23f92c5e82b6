"""Elasticity: policies that decide an operator's parallelism from its measured load.

It owns the policies (pure functions from a ``LoadSnapshot`` to a ``Decision``: the
paper's ``threshold`` controller of Q4 and the ``model`` controller of Q5), the sampler
that measures a running pipeline without stopping it, and the ``Autoscaler`` loop that
applies decisions through the runtime's ``reconfigure``. It owns no threads of the runtime
and no HTTP: the service (``api``) and the Spark job start and stop autoscalers.
"""

from stretch.controller.autoscaler import Autoscaler, DecisionRecord, autoscale
from stretch.controller.load import LoadSnapshot
from stretch.controller.policies import POLICIES, Decision, PolicyConfig, decide, model, threshold
from stretch.controller.sampler import PipelineSampler

__all__ = [
    "POLICIES",
    "Autoscaler",
    "Decision",
    "DecisionRecord",
    "LoadSnapshot",
    "PipelineSampler",
    "PolicyConfig",
    "autoscale",
    "decide",
    "model",
    "threshold",
]
