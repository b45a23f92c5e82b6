"""How the status shows f_mu: a summary per instance; the full array on its own route.

A mapping has one entry per key group (1024 by default): in ``GET /v1/operators/{name}``
it would bury everything else. The status holds a ``MappingSummary`` (how many key groups
each instance owns, and their ranges when few); ``GET /v1/operators/{name}/mapping``
answers the full array, which ``POST .../reconfigure {"mapping": [...]}`` takes back.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from stretch.model.mapping import NOT_OWNED, Shard, default_mapping

__all__ = ["MAX_RANGES", "FullMapping", "MappingInstance", "MappingSummary", "summarize"]

MAX_RANGES = 8
"""The most ranges an instance's summary lists; past that, ``ranges`` is null."""


class MappingInstance(BaseModel):
    """The key groups one instance owns."""

    instance: int
    key_groups: int = Field(description="how many key groups it owns")
    ranges: list[tuple[int, int]] | None = Field(
        description=f"its key groups as [first, last] ranges (inclusive) when at most "
        f"{MAX_RANGES}; null when more (GET .../mapping has every entry)"
    )


class MappingSummary(BaseModel):
    """f_mu in force, per instance (``mapping`` of the status)."""

    key_groups: int = Field(description="G, the entries of the full mapping")
    round_robin: bool = Field(
        description="whether it is the default f_mu: group g to instance g % m (on a "
        "shard: its i-th owned group to i % m)"
    )
    not_owned: int = Field(description="key groups of other shards (-1 in the full mapping)")
    instances: list[MappingInstance] = Field(description="per connected instance 0..m-1")


class FullMapping(BaseModel):
    """What ``GET /v1/operators/{name}/mapping`` answers."""

    epoch: int = Field(description="the epoch it is in force in")
    parallelism: int
    mapping: list[int] = Field(description="f_mu: entry g is the instance of key group g")


def summarize(mapping: Sequence[int], parallelism: int, shard: Shard | None) -> MappingSummary:
    """The summary of ``mapping`` for ``parallelism`` connected instances. O(G)."""
    owned: list[list[int]] = [[] for _ in range(parallelism)]
    for group, instance in enumerate(mapping):
        if instance != NOT_OWNED:
            owned[instance].append(group)
    instances = []
    for instance, groups in enumerate(owned):
        ranges = _ranges(groups)
        instances.append(
            MappingInstance(
                instance=instance,
                key_groups=len(groups),
                ranges=ranges if len(ranges) <= MAX_RANGES else None,
            )
        )
    return MappingSummary(
        key_groups=len(mapping),
        round_robin=list(mapping) == default_mapping(len(mapping), parallelism, shard),
        not_owned=sum(1 for instance in mapping if instance == NOT_OWNED),
        instances=instances,
    )


def _ranges(groups: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted ``groups`` as inclusive runs of consecutive numbers."""
    ranges: list[tuple[int, int]] = []
    for group in groups:
        if ranges and ranges[-1][1] == group - 1:
            ranges[-1] = (ranges[-1][0], group)
        else:
            ranges.append((group, group))
    return ranges
