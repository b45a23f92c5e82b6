"""f_mu's second stage: which instance owns each key group (docs/design.md decision 4).

A mapping is a sequence of length G whose entry g is the instance responsible for key
group g. Reconfiguration replaces the mapping; the state never moves.

A shard (one of N sidecars running the same operator, docs/design.md "Sharding") owns the
key groups ``g % N == index``; its mapping sends every other group to ``NOT_OWNED``, so no
instance of it keeps or processes their keys: the shards together do each key's work once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stretch.errors import OperatorError, ReconfigurationError

__all__ = ["NOT_OWNED", "Shard", "default_mapping", "groups_of", "validate_mapping"]

NOT_OWNED = -1
"""The mapping entry of a key group another shard owns."""


@dataclass(frozen=True)
class Shard:
    """One of ``count`` sidecars an operator is sharded over: the key groups it owns.

    Attributes:
        index: Which shard this is, in ``0..count-1``.
        count: N, the number of shards.

    """

    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            msg = f"shard index {self.index} of {self.count}: need 0 <= index < count"
            raise OperatorError(msg)

    def owns(self, group: int) -> bool:
        """Whether this shard owns key group ``group``."""
        return group % self.count == self.index


def default_mapping(key_groups: int, parallelism: int, shard: Shard | None = None) -> list[int]:
    """Round robin over the owned groups (all of them without a shard).

    Group g goes to instance ``g % m`` (small integer keys spread evenly); on a shard, its
    i-th owned group goes to instance ``i % m`` and the others are ``NOT_OWNED``.
    """
    if shard is None:
        return [g % parallelism for g in range(key_groups)]
    mapping = [NOT_OWNED] * key_groups
    for i, group in enumerate(range(shard.index, key_groups, shard.count)):
        mapping[group] = i % parallelism
    return mapping


def validate_mapping(
    mapping: Sequence[int], key_groups: int, parallelism: int, shard: Shard | None = None
) -> list[int]:
    """Check that ``mapping`` maps every one of G groups to an instance in [0, m).

    On a shard only its own groups are checked; the entries of the others are ignored and
    come back as ``NOT_OWNED``.

    Raises:
        ReconfigurationError: naming the first group that is missing or mapped outside.

    """
    if len(mapping) != key_groups:
        msg = f"mapping has {len(mapping)} entries; it must map each of {key_groups} key groups"
        raise ReconfigurationError(msg)
    if shard is not None:
        mapping = [m if shard.owns(g) else NOT_OWNED for g, m in enumerate(mapping)]
    for group, instance in enumerate(mapping):
        if shard is not None and not shard.owns(group):
            continue
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
