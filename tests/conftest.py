"""Shared test settings: hypothesis profiles.

CI (``CI`` set) runs the ``ci`` profile: derandomized, so a run is reproducible and a
submission is judged on the same examples it was checked with. Elsewhere the ``dev``
profile draws new examples every run, to keep finding bugs. ``HYPOTHESIS_PROFILE``
overrides either.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
