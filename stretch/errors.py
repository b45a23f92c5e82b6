"""The one exception hierarchy of the service.

Kernels return status codes; the Python wrappers raise these. The REST layer (``api/``)
turns them into 4xx answers, so every message names what was wrong: the operator, the
source, the epoch and the offending value where they apply.
"""

from __future__ import annotations

__all__ = [
    "CapacityError",
    "ClosedError",
    "DamagedStateError",
    "InputError",
    "LateTupleError",
    "OperatorError",
    "ReconfigurationError",
    "SchemaError",
    "StoppedError",
    "StretchError",
]


class StretchError(Exception):
    """Base class of every error this package raises on purpose."""


class InputError(StretchError):
    """Input that cannot be read: a missing file, a bad format, an unsorted stream."""


class SchemaError(InputError):
    """Input whose columns or types do not match what the operator expects."""


class LateTupleError(InputError):
    """A tuple whose ``ts`` is before its source's released watermark.

    Args:
        message: What was late, where.
        rows: How many rows of the refused batch were late (0 if not counted).

    """

    def __init__(self, message: str, rows: int = 0) -> None:
        super().__init__(message)
        self.rows = rows


class ClosedError(InputError):
    """Input for a source whose input already ended (it was closed)."""


class OperatorError(StretchError):
    """An unknown operator, an unknown or invalid parameter, a bad O+ definition."""


class ReconfigurationError(StretchError):
    """A reconfiguration request that cannot be applied; nothing was changed."""


class CapacityError(StretchError):
    """A bounded buffer is full and the caller asked not to block."""


class DamagedStateError(StretchError):
    """A state file (journal or checkpoint) is damaged; nothing is restored from it."""


class StoppedError(StretchError):
    """The operator was stopped (deleted, shut down or failed) while a call used it."""
