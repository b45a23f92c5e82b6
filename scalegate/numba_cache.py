"""Numba's on-disk cache of a package, dropped whenever a compiled module's source changes.

Numba keys each cached function (``cache=True``) to the contents of its own file only,
not to what it inlines or reads from other files: after an edit, or an upgrade in place,
of ``_band_join.py``, say, the kernels of ``_band_index.py`` that inline its predicate
would still load as compiled before, and compute the old predicate. So each package calls
``drop_stale`` as it is imported, before any kernel runs: it hashes every module that
caches compiled code together with the modules of the package those import (their
constants and inlined functions), and when the digest differs from the one recorded in
the package's ``__pycache__``, deletes the cache files (``*.nbi``, ``*.nbc``) of those
modules. Nothing is done where the cache cannot be written (Numba then caches in its
user-wide directory, which this does not reach). ``mark_warm`` records that the kernels
were compiled ahead (``stretch warm``) for the digest now recorded, and ``warmed`` tells
whether that still holds, so that a cold first run can say why it is slow.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from pathlib import Path

__all__ = ["drop_stale", "mark_warm", "warmed"]

STAMP = "numba-sources.sha256"
"""The file in the package's ``__pycache__`` that records the digest of its cached code."""

WARM = "numba-warm.sha256"
"""The file beside ``STAMP`` that records the digest whose kernels ``stretch warm`` compiled."""

_CACHED = re.compile(rb"njit\([^)]*cache=True")
_IMPORT = re.compile(rb"^\s*from ([\w.]+) import", re.MULTILINE)


def _sources(root: Path) -> dict[Path, bytes]:
    """The modules of the package at ``root`` that cache compiled code, and what they import.

    Imports from the package are followed transitively; others (NumPy, Numba) are not.
    Returns each module's text, by path, in path order.
    """
    package = root.name
    texts = {
        path: path.read_bytes()
        for path in root.rglob("*.py")
        if "__pycache__" not in path.relative_to(root).parts  # e.g. generated band joins
    }
    found: dict[Path, bytes] = {}
    todo = [path for path, text in texts.items() if _CACHED.search(text)]
    while todo:
        path = todo.pop()
        if path in found:
            continue
        found[path] = text = texts[path]
        for name in _IMPORT.findall(text):
            parts = name.decode().split(".")
            if parts[0] != package:
                continue
            module = root.joinpath(*parts[1:])
            for candidate in (module.with_suffix(".py"), module / "__init__.py"):
                if candidate in texts:
                    todo.append(candidate)
    return dict(sorted(found.items()))


def drop_stale(root: Path) -> bool:
    """Delete the package's Numba cache files if its cached code changed; return whether.

    ``root`` is the package's directory. The first import after a change pays the
    compiling again (``stretch warm`` does it ahead).
    """
    sources = _sources(root)
    digest = hashlib.sha256()
    for path, text in sources.items():
        digest.update(str(path.relative_to(root)).encode() + b"\0" + text)
    stamp = root / "__pycache__" / STAMP
    try:
        if stamp.read_text() == digest.hexdigest():
            return False
    except OSError:
        pass
    try:
        for path in sources:
            for cached in path.parent.glob(f"__pycache__/{path.stem}.*.nb[ic]"):
                cached.unlink(missing_ok=True)
        stamp.parent.mkdir(exist_ok=True)
        stamp.write_text(digest.hexdigest())
    except OSError:  # a read-only install: Numba caches elsewhere
        return False
    return True


def mark_warm(root: Path) -> None:
    """Record that the package's kernels were compiled for its code as it is now."""
    cache = root / "__pycache__"
    with contextlib.suppress(OSError):  # nothing recorded, or a read-only install
        (cache / WARM).write_text((cache / STAMP).read_text())


def warmed(root: Path) -> bool | None:
    """Whether ``mark_warm`` ran since the package's cache was last dropped.

    None where the package records no digest (a read-only install: Numba caches
    elsewhere, which this cannot tell).
    """
    cache = root / "__pycache__"
    try:
        stamp = (cache / STAMP).read_text()
    except OSError:
        return None
    try:
        return (cache / WARM).read_text() == stamp
    except OSError:
        return False
