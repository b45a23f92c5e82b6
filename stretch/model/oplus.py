"""The O+ operator model of section 4.2.

``O+(WA, WS, I, f_MK, WT, S, f_mu, f_U, f_O, f_S)``: window advance and size, the number of
input streams, a multi-key function, the window type, the output schema, the key mapping
and the update, output and slide functions of Table I. ``OPlus`` holds these parameters;
the runtimes (``stretch.model.sn``, the VSN runtime) execute them.

Functions receive ``Windows``: the set of I window instances of one key that start at
``l`` (the paper's ``sigma[k][l]``), and return new states rather than mutating them.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple

from stretch.errors import OperatorError
from stretch.model.schema import Schema

__all__ = [
    "END_OF_INPUT",
    "DEFAULT_KEY_GROUPS",
    "Key",
    "KernelSpec",
    "OPlus",
    "OutputTime",
    "Payload",
    "State",
    "StreamTuple",
    "WindowType",
    "Windows",
    "is_empty",
    "stable_key_group",
]

Key = Hashable
State = Any
Payload = tuple[Any, ...]

END_OF_INPUT = 2**63 - 1
"""The watermark of a finished source: +infinity, which flushes every window."""

DEFAULT_KEY_GROUPS = 1024
"""G of docs/design.md decision 4: keys hash to G key groups, G > any parallelism."""


class WindowType(Enum):
    """WT: one window instance per key that slides, or many overlapping ones."""

    SINGLE = "single"
    MULTI = "multi"


class OutputTime(Enum):
    """The ``ts`` that ``prepareOutTuples`` gives payloads returned by f_U.

    ``WINDOW_END`` is the paper's rule (the window's right boundary, Observation 1).
    ``INPUT`` gives the triggering tuple's ``ts``: the joins and ``forward`` of the
    catalog use it so that a match carries the later tuple's time (docs/design.md catalog).
    Payloads returned by f_O always get the window's right boundary.
    """

    WINDOW_END = "window_end"
    INPUT = "input"


@dataclass(frozen=True, slots=True)
class StreamTuple:
    """A tuple ``<ts, [payload]>`` with its place in the total order (ts, source, seq)."""

    ts: int
    source: int
    seq: int
    payload: Mapping[str, Any]

    def __getitem__(self, column: str) -> Any:
        return self.payload[column]

    @property
    def order(self) -> tuple[int, int, int]:
        """The tuple's position in the total order of docs/design.md decision 2."""
        return (self.ts, self.source, self.seq)


class Windows(NamedTuple):
    """The I window instances of one key starting at ``l``: ``sigma[k][l]`` (read only)."""

    key: Key
    l: int
    states: tuple[State, ...]


UpdateFn = Callable[[Windows, StreamTuple], tuple[Sequence[State], Sequence[Payload]]]
OutputFn = Callable[[Windows], Sequence[Payload]]
SlideFn = Callable[[Windows, int], Sequence[State]]
MultiKeyFn = Callable[[StreamTuple], Sequence[Key]]


def default_update(w: Windows, t: StreamTuple) -> tuple[Sequence[State], Sequence[Payload]]:
    """Table I f_U: store t in the window of t's sender; return no payload."""
    states = list(w.states)
    states[t.source] = (*states[t.source], t)
    return states, ()


def default_output(w: Windows) -> Sequence[Payload]:
    """Table I f_O: return no payload."""
    return ()


def default_slide(w: Windows, new_l: int) -> Sequence[State]:
    """Table I f_S: purge the tuples that fall before the window's new left boundary."""
    return [tuple(t for t in state if t.ts >= new_l) for state in w.states]


def default_state() -> State:
    """The state of a new window instance for the defaults: no tuples."""
    return ()


def is_empty(state: State) -> bool:
    """Whether a window state is empty (``None`` or of length 0): an empty set is removed."""
    if state is None:
        return True
    try:
        return len(state) == 0
    except TypeError:
        return False


def stable_key_group(key: Key, key_groups: int) -> int:
    """f_mu's first stage: the key group of ``key``, the same in every process.

    Integers map to ``key % G`` (so small integer keys spread evenly); other keys hash
    their ``repr`` with CRC-32 (Python's ``hash`` of a string changes per process).
    """
    if isinstance(key, int) and not isinstance(key, bool):
        return key % key_groups
    return zlib.crc32(repr(key).encode("utf-8")) % key_groups


class KernelSpec:
    """The compiled form an operator declares for the VSN runtime (``OPlus.kernel``).

    The kinds live in ``stretch.operators.kernels`` (one per kernel: forward, band join,
    windowed aggregate); the VSN runtime maps each kind to the code that runs it. A kernel
    must give exactly the rows the operator's Python functions give.
    """


@dataclass(frozen=True)
class OPlus:
    """An O+ operator: the parameters of section 4.2 with Table I's defaults.

    Attributes:
        name: The operator's catalog or user name.
        wa_ms: WA, the window advance, in ms (> 0).
        ws_ms: WS, the window size, in ms (> 0).
        inputs: One schema per input stream; I = len(inputs).
        multi_key: f_MK, the keys of a tuple (distinct; order matters for output order).
        window_type: WT.
        output: S, the output schema (payload columns besides ``ts``).
        update: f_U(windows, t) -> (new states, payloads).
        output_fn: f_O(windows) -> payloads, called when the windows expire.
        slide: f_S(windows, new_l) -> new states, called when single windows advance. A
            window whose f_O returns nothing may advance several WA at once, so f_S must
            give the same result for one jump as for the steps in between (purging by
            ``new_l``, as the default does, has this property).
        new_state: The state of a window instance at creation.
        update_time: The ``ts`` of payloads from f_U.
        key_groups: G; f_mu maps a key to ``key_group(key, G)`` and the runtime maps groups
            to instances.
        key_group: The first stage of f_mu.
        kernel: The compiled kernel that computes what these functions compute, or None:
            then the VSN runtime calls the functions (the generic path).

    """

    name: str
    wa_ms: int
    ws_ms: int
    inputs: tuple[Schema, ...]
    multi_key: MultiKeyFn
    window_type: WindowType
    output: Schema
    update: UpdateFn = default_update
    output_fn: OutputFn = default_output
    slide: SlideFn = default_slide
    new_state: Callable[[], State] = default_state
    update_time: OutputTime = OutputTime.WINDOW_END
    key_groups: int = DEFAULT_KEY_GROUPS
    key_group: Callable[[Key, int], int] = field(default=stable_key_group)
    kernel: KernelSpec | None = None

    def __post_init__(self) -> None:
        if self.wa_ms <= 0 or self.ws_ms <= 0:
            msg = (
                f"operator {self.name!r}: wa and ws must be > 0 ms (got {self.wa_ms}, {self.ws_ms})"
            )
            raise OperatorError(msg)
        if not self.inputs:
            msg = f"operator {self.name!r}: needs at least one input stream"
            raise OperatorError(msg)
        if self.key_groups < 1:
            msg = f"operator {self.name!r}: key_groups must be >= 1"
            raise OperatorError(msg)

    @property
    def n_inputs(self) -> int:
        """I, the number of input streams."""
        return len(self.inputs)

    @property
    def emits_on_expiry(self) -> bool:
        """Whether f_O is specialised (the default returns nothing)."""
        return self.output_fn is not default_output

    def earliest_win_l(self, ts: int) -> int:
        """earliestWinL: the smallest ``l = k*WA`` with ``l <= ts < l + WS``."""
        return ((ts - self.ws_ms) // self.wa_ms + 1) * self.wa_ms

    def latest_win_l(self, ts: int) -> int:
        """latestWinL: the largest ``l = k*WA`` with ``l <= ts``."""
        return (ts // self.wa_ms) * self.wa_ms

    def keys_of(self, t: StreamTuple) -> list[Key]:
        """f_MK(t) with duplicates dropped, first occurrence first."""
        return list(dict.fromkeys(self.multi_key(t)))

    def group_of(self, key: Key) -> int:
        """The key group of ``key``."""
        return self.key_group(key, self.key_groups)
