"""Elasticity policies: load snapshot -> parallelism decision (arrives with its issue)."""

__all__: list[str] = []
