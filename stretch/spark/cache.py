"""The folder where ``stretch`` keeps its files for Spark sessions on this machine.

The archive of Spark's classes (``class_archive``) and the script Spark's Python workers
run (``worker_python``) live in ``$XDG_CACHE_HOME/stretch`` (``~/.cache/stretch``): both
are made again when missing, so the folder may be deleted at any time.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["cache_folder"]


def cache_folder() -> Path:
    """``$XDG_CACHE_HOME/stretch``, else ``~/.cache/stretch``.

    Where the home folder is unknown (a user id without a passwd entry, ``HOME`` unset), a
    folder of this user under the temporary directory.
    """
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "stretch"
    home = Path(os.path.expanduser("~"))  # noqa: PTH111 - "~" itself when it has no home
    if home.is_absolute():
        return home / ".cache" / "stretch"
    return Path(tempfile.gettempdir()) / f"stretch-cache-{os.getuid()}"
