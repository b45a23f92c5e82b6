"""Query parameters are read as written: every route names those it takes.

A route refuses a query parameter it does not take, or one given twice, with 422 naming
it: a misspelt ``batchid`` would otherwise turn idempotency off unnoticed, a repeated
``batch_id`` would silently mean its last value, and a parameter a route never read
would look as if it had been heeded.
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError

__all__ = ["query_only"]


def query_only(*names: str) -> Any:
    """A dependency refusing (422) query parameters other than ``names``, or repeated.

    Args:
        names: The query parameters the route takes (none: it takes none).

    Returns:
        The dependency, for a route's or a router's ``dependencies``.

    """
    takes = f"this route takes {', '.join(names)}" if names else "this route takes none"

    def check(request: Request) -> None:
        seen: set[str] = set()
        for key, value in request.query_params.multi_items():
            if key not in names:
                msg = f"unknown query parameter; {takes}"
            elif key in seen:
                msg = "given more than once; give it once"
            else:
                seen.add(key)
                continue
            error = {"type": "query_parameter", "loc": ("query", key), "msg": msg, "input": value}
            raise RequestValidationError([error])

    return Depends(check)
