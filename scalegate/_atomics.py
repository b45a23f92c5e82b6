"""LLVM atomics on int64 array cells, as Numba intrinsics, for the gate's spinlock.

``atomic_cas`` emits ``cmpxchg`` (acq_rel on success, monotonic on failure),
``atomic_store`` a release store and ``atomic_load`` an acquire load, on a pointer into an
int64 array; they are callable from ``@njit`` code only. With ``NUMBA_DISABLE_JIT=1`` they
are plain Python functions serialised by a ``threading.Lock``, so the kernels keep their
meaning when they run as Python.

Numba's on-disk cache keys a kernel on its own file: after editing this module (or
``_nodes.py``), delete ``scalegate/__pycache__/*.nb[ic]`` or touch ``_kernels.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, cast

import numpy as np
from numba import config, types
from numba.core import cgutils
from numba.extending import intrinsic
from numpy.typing import NDArray

__all__ = ["atomic_cas", "atomic_load", "atomic_store"]

I64 = NDArray[np.int64]
_Cas = Callable[[I64, int, int, int], int]
_Store = Callable[[I64, int, int], None]
_Load = Callable[[I64, int], int]


def _cell_pointer(context: Any, builder: Any, sig: Any, args: Any) -> Any:
    """LLVM pointer to ``args[0][args[1]]`` for the atomic intrinsics."""
    aryty = sig.args[0]
    ary = context.make_array(aryty)(context, builder, args[0])
    idx = context.cast(builder, args[1], sig.args[1], types.intp)
    get_item_pointer = cast(Any, cgutils).get_item_pointer
    return get_item_pointer(context, builder, aryty, ary, [idx], wraparound=False)


def _cas_typer(typingctx: Any, arr: Any, idx: Any, expected: Any, new: Any) -> Any:
    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        ptr = _cell_pointer(context, builder, sig, args)
        exp = context.cast(builder, args[2], sig.args[2], types.int64)
        val = context.cast(builder, args[3], sig.args[3], types.int64)
        return builder.extract_value(builder.cmpxchg(ptr, exp, val, "acq_rel", "monotonic"), 0)

    return types.int64(arr, idx, expected, new), codegen


def _store_typer(typingctx: Any, arr: Any, idx: Any, value: Any) -> Any:
    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        ptr = _cell_pointer(context, builder, sig, args)
        val = context.cast(builder, args[2], sig.args[2], types.int64)
        builder.store_atomic(val, ptr, "release", 8)
        return context.get_dummy_value()

    return types.void(arr, idx, value), codegen


def _load_typer(typingctx: Any, arr: Any, idx: Any) -> Any:
    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.load_atomic(_cell_pointer(context, builder, sig, args), "acquire", 8)

    return types.int64(arr, idx), codegen


if cast(Any, config).DISABLE_JIT:
    _PY_ATOMIC = threading.Lock()

    def _py_cas(arr: I64, idx: int, expected: int, new: int) -> int:
        with _PY_ATOMIC:
            old = int(arr[idx])
            if old == expected:
                arr[idx] = new
            return old

    def _py_store(arr: I64, idx: int, value: int) -> None:
        with _PY_ATOMIC:
            arr[idx] = value

    def _py_load(arr: I64, idx: int) -> int:
        with _PY_ATOMIC:
            return int(arr[idx])

    atomic_cas: _Cas = _py_cas
    atomic_store: _Store = _py_store
    atomic_load: _Load = _py_load
else:
    atomic_cas = cast(_Cas, intrinsic(_cas_typer))
    atomic_store = cast(_Store, intrinsic(_store_typer))
    atomic_load = cast(_Load, intrinsic(_load_typer))
