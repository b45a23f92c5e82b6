"""f_mu's second stage: which instance owns each key group (docs/design.md decision 4).

A mapping is a sequence of length G whose entry g is the instance responsible for key
group g. Reconfiguration replaces the mapping; the state never moves.
"""

from __future__ import annotations

from collections.abc import Sequence

from stretch.errors import ReconfigurationError

__all__ = ["default_mapping", "groups_of", "validate_mapping"]


def default_mapping(key_groups: int, parallelism: int) -> list[int]:
    """Round robin: group g goes to instance ``g % m`` (small integer keys spread evenly)."""
    return [g % parallelism for g in range(key_groups)]


def validate_mapping(mapping: Sequence[int], key_groups: int, parallelism: int) -> list[int]:
    """Check that ``mapping`` maps every one of G groups to an instance in [0, m).

    Raises:
        ReconfigurationError: naming the first group that is missing or mapped outside.

    """
    if len(mapping) != key_groups:
        msg = f"mapping has {len(mapping)} entries; it must map each of {key_groups} key groups"
        raise ReconfigurationError(msg)
    for group, instance in enumerate(mapping):
        if not isinstance(instance, int) or not 0 <= instance < parallelism:
            msg = (
                f"mapping sends key group {group} to instance {instance!r}, "
                f"not one of 0..{parallelism - 1}"
            )
            raise ReconfigurationError(msg)
    return list(mapping)


def groups_of(mapping: Sequence[int], instance: int) -> list[int]:
    """The key groups ``instance`` owns under ``mapping``."""
    return [g for g, owner in enumerate(mapping) if owner == instance]
