"""Node kinds, status codes and the column layout of the ESG's preallocated arrays.

The gate keeps all of its state in six int64 arrays so that the Numba kernels can run
without the GIL (see ``docs/scalegate.md``):

``nodes[capacity + 1, N_NEXT + levels]``
    One row per skip-list node; row ``HEAD`` is the sentinel with the smallest key.
``sources[max_sources, S_FINGER + levels]``
    One row per source: its handle (Figure 4 of the paper) as a search finger per level.
``readers[max_readers, 2]``
    One row per reader: its handle, the number of ready nodes it passed.
``free[capacity]``
    A stack of the node rows reclaimed and free again; ``meta[M_FREE_TOP]`` rows of it
    are valid. Rows never used yet are not on it: they are the last ``meta[M_UNUSED]``
    rows of ``nodes``, taken in order only when the stack is empty after a reclamation,
    so the rows (and memory pages, ``scalegate._memory``) in use follow the most nodes
    held at once, not the capacity.
``meta[M_LEN]``
    The spinlock cell, the free-stack top, the level generator, the id high-water marks,
    the ready prefix (its last node and length, and the count of nodes ever made ready)
    and the flow-control reserve.
``ready[2 ** ceil(log2(capacity)), L_WIDTH]``
    The ready log: a ring holding ``(ts, source, seq, kind, payload)`` of each node that
    joined the ready prefix, then its row of ``nodes`` and its tower height (``L_ROW``,
    ``L_HEIGHT``), ready node ``i`` (counted from the gate's start) at row
    ``i & meta[M_LOG_MASK]``. Readers copy from it, so they read consecutive memory
    instead of walking rows another thread wrote; it holds every ready node still linked.
    The ring starts at 1,024 rows and doubles when the ready nodes held would not fit, so
    its memory, like that of ``nodes``, follows the most nodes held at once.

The kernels compile these values in, and Numba's on-disk cache keys a kernel on its own
file only: after editing this module, delete ``scalegate/__pycache__/*.nb[ic]``.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CONTROL",
    "DATA",
    "DUMMY",
    "FLUSH",
    "WATERMARK",
]

# Node kinds (docs/design.md decision 6). DUMMY and FLUSH are internal (section 6 of the paper).
DATA: Final = 0
DUMMY: Final = 1
FLUSH: Final = 2
CONTROL: Final = 3
WATERMARK: Final = 4

TS_MIN: Final = -(2**63)
TS_MAX: Final = 2**63 - 1  # as a watermark: end of input, the source is done

HEAD: Final = 0  # sentinel row; its key is smaller than any node's
NIL: Final = -1  # end of a level's list

# nodes: key (ts, source, seq), kind, payload, tower height, next pointer per level
N_TS: Final = 0
N_SRC: Final = 1
N_SEQ: Final = 2
N_KIND: Final = 3
N_PAYLOAD: Final = 4
N_HEIGHT: Final = 5
N_NEXT: Final = 6

# sources: active, done (end-of-input watermark added), frontier ts, next seq, fingers
S_ACTIVE: Final = 0
S_DONE: Final = 1
S_FRONTIER: Final = 2
S_SEQ: Final = 3
S_FINGER: Final = 4

# ready log: a node's columns N_TS..N_PAYLOAD as in nodes, then its row and tower height
L_ROW: Final = 5
L_HEIGHT: Final = 6
L_WIDTH: Final = 7

# readers: active, position (the number of ready nodes passed: an index into the ready log)
R_ACTIVE: Final = 0
R_POS: Final = 1
R_COLUMNS: Final = 2

# meta: the lock cell sits alone on its cache line, away from the fields the holder writes
M_LOCK: Final = 0
M_FREE_TOP: Final = 16
M_RNG: Final = 17
M_SRC_HI: Final = 18
M_RDR_HI: Final = 19
M_READY_TAIL: Final = 20  # last node of the ready prefix (HEAD when it is empty)
M_READY_N: Final = 21  # nodes held from the head up to M_READY_TAIL
M_RESERVE: Final = 22  # rows only the bound source may fill (flow control)
M_SCRATCH: Final = 23  # two cells the lock holder uses as 1-element arrays
M_UNUSED: Final = 25  # rows never used yet: the last M_UNUSED rows of nodes (untouched pages)
M_SINCE: Final = 26  # rows taken since the last reclamation (it runs at most every used / 8)
M_READY_END: Final = 27  # nodes ever made ready: the ready log's end (readers' positions)
M_LOG_MASK: Final = 28  # the ready log's ring size - 1 (a power of two, doubled as needed)
M_LEN: Final = 29

# Kernel status codes: >= 0 is success (a count), negative values are failures.
OK: Final = 0
BUSY: Final = -1  # the lock was not acquired within the spin budget: retry
FULL: Final = -2  # no room after reclamation, or flow control refuses (see _kernels._admit)
E_INACTIVE: Final = -3  # the source or reader is not (or no longer) part of the gate
E_CLOSED: Final = -4  # the source added the end-of-input watermark
E_BACKWARDS: Final = -5  # ts before the source's last ts
E_UNSORTED: Final = -6  # a batch whose ts decrease
E_RESERVED: Final = -7  # TS_MAX on a node that is not a watermark
REFUSED: Final = -8  # an elastic call that does not take effect (returns False)
