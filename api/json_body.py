"""JSON bodies parsed strictly: a key given twice in one object is an error, not "last wins".

Python's ``json`` (and so FastAPI) keeps the last value of a repeated key, so
``{"ts": 100, "ts": 200}`` would silently mean ``ts`` 200. Every JSON body the service reads
is parsed with ``loads_unique`` first (batch rows by ``api.codec``, every other body by
``api.guard.RequestGuard``), and a repeated key is refused with 422 naming it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["DuplicateKeyError", "loads_unique"]


class DuplicateKeyError(ValueError):
    """A JSON object gives one key twice.

    Attributes:
        key: The repeated key.
        objects: How many objects were complete when it was found, this one included
            (inner objects complete before the ones holding them: in ``{"rows": [...]}``
            it is the row's number).

    """

    def __init__(self, key: str, objects: int) -> None:
        super().__init__(f"key {key!r} is given twice in one object")
        self.key = key
        self.objects = objects


def loads_unique(
    body: bytes | str,
    parse_float: Callable[[str], Any] | None = None,
    parse_constant: Callable[[str], Any] | None = None,
) -> Any:
    """``json.loads`` that refuses a key repeated within one object. O(len(body)).

    Raises:
        DuplicateKeyError: an object repeats a key.
        ValueError: malformed JSON (``json.JSONDecodeError``) or what the hooks raise.

    """
    objects = 0

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal objects
        objects += 1
        built = dict(pairs)
        if len(built) != len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    raise DuplicateKeyError(key, objects)
                seen.add(key)
        return built

    return json.loads(
        body, object_pairs_hook=unique, parse_float=parse_float, parse_constant=parse_constant
    )
