"""What one service holds at most: operators, threads, long-polls, buffered rows.

Each limit turns into an answer that names it instead of a server that slows down or
runs out of memory: ``api.errors.LimitError`` (507) when a new operator would pass the
operators or threads limit, ``CapacityError`` (429, retry later) when a buffer is full. ``stretch
serve`` sets them from its options (docs/api.md, "Limits").
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ServiceLimits"]


@dataclass(frozen=True)
class ServiceLimits:
    """The limits of one service.

    Attributes:
        max_operators: Operators running at once.
        max_pool_threads: Threads of all operators together; an operator with pool size n
            costs ``n + 2`` (its pool, its output drainer and its latency observer).
        max_long_polls: Output reads waiting for rows at once (``wait_ms > 0``).
        max_uncommitted_rows: Rows an operator's output log holds before its input gets
            429 (read the output and commit it).
        max_held_rows: Rows a source holds in its reorder buffer or waiting for ESG_in
            before its input gets 429 (send a watermark, or wait).

    """

    max_operators: int = 32
    max_pool_threads: int = 512
    max_long_polls: int = 256
    max_uncommitted_rows: int = 1 << 21
    max_held_rows: int = 1 << 21

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value < 1:
                msg = f"limit {name} must be >= 1, got {value}"
                raise ValueError(msg)
