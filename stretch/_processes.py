"""Whether a process runs: how files named after a killed process are told from live ones.

The output's partial files (``stretch.io``) and the external sort's spill directories
(``stretch.external_sort``) carry their process's id in their name; the next process that
makes one deletes those whose process is gone.
"""

from __future__ import annotations

import os

__all__ = ["running"]


def running(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # another user's
        return True
    return True
