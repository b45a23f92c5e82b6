"""Band joins with a user's compiled predicate: ``stretch.band_join``.

A user writes the match predicate as an ``@numba.njit`` function of the values of one L
tuple and one R tuple and gets a J+ (Operator 10) that runs on the same compiled kernel
as the catalog's ScaleJoin and hedge, at their speed: the predicate is inlined into the
band-join loop (``kernels._predicate_join``), compiled once per process on first use.
``run_sn`` and the generic path call the same predicate from Python, so the operator's
output is defined, as every operator's is, by the sequential reference.

Example::

    import numba
    import stretch

    @numba.njit
    def near(x, y, a, b):
        return abs(x - a) <= 5 and abs(y - b) <= 5.0

    op = stretch.band_join(
        "near", 10_000,
        left=stretch.Schema.of(x="int", y="float"),
        right=stretch.Schema.of(a="int", b="float"),
        predicate=near,
        output={"x": "left.x", "a": "right.a"},
    )
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from numba.core.dispatcher import Dispatcher

from stretch.errors import OperatorError
from stretch.model.oplus import OPlus, Payload, StreamTuple
from stretch.model.schema import Schema
from stretch.operators.joins import band_join as j_plus
from stretch.operators.kernels import BandJoin
from stretch.operators.kernels._predicate_join import predicate_run

__all__ = ["band_join"]

_SIDES = {"left": 0, "right": 1}


def _payload(
    name: str, output: Mapping[str, str], inputs: tuple[Schema, Schema]
) -> tuple[tuple[int, str], ...]:
    """``output``'s ``"left.col"`` / ``"right.col"`` sources as (side, column) pairs."""
    payload = []
    for column, source in output.items():
        side, _, of = source.partition(".")
        if side not in _SIDES or of not in inputs[_SIDES.get(side, 0)].names:
            msg = (
                f"band join {name!r}: output column {column!r} = {source!r} names no input "
                f"column; write 'left.COLUMN' or 'right.COLUMN' of {inputs[0].names} and "
                f"{inputs[1].names}"
            )
            raise OperatorError(msg)
        payload.append((_SIDES[side], of))
    return tuple(payload)


def band_join(
    name: str,
    ws: int,
    *,
    left: Schema,
    right: Schema,
    predicate: Callable[..., bool],
    output: Mapping[str, str],
    reads: tuple[Sequence[str], Sequence[str]] | None = None,
    wa: int = 1,
    keys: int = 16,
) -> OPlus:
    """A band join of L and R emitting ``output`` for the pairs within ``ws`` that match.

    Args:
        name: Operator name.
        ws: The band in ms: pairs whose ``ts`` differ by at most this are compared.
        left: The schema of L (source 0).
        right: The schema of R (source 1).
        predicate: An ``@numba.njit`` function called as ``predicate(*l_values,
            *r_values)`` with the values of the columns ``reads`` names; returns whether
            the pair matches. String columns arrive as dictionary codes in the kernel
            (equal strings, equal codes) and as ``str`` on the Python path, so compare
            them only for (in)equality.
        output: The output columns in order, each naming its source as
            ``"left.COLUMN"`` or ``"right.COLUMN"``; the output ``ts`` is the later
            tuple's.
        reads: The columns ``predicate`` takes of L and of R, in order (default: all
            columns of each schema, in schema order).
        wa: WA in ms (the paper uses delta = 1 ms).
        keys: K, the number of keys the stored tuples are spread over (at least the
            largest parallelism the operator will run at).

    Returns:
        The J+ (Operator 10), with its compiled kernel declared in ``OPlus.kernel``.

    Raises:
        OperatorError: ``predicate`` is not a Numba-compiled function, or ``reads`` or
            ``output`` names a column the schemas do not have.

    """
    if not isinstance(predicate, Dispatcher):
        msg = f"band join {name!r}: predicate must be an @numba.njit function, got {predicate!r}"
        raise OperatorError(msg)
    inputs = (left, right)
    read = (tuple(left.names), tuple(right.names)) if reads is None else tuple(map(tuple, reads))
    for side, columns in enumerate(read):
        missing = [c for c in columns if c not in inputs[side].names]
        if missing:
            which = ("left", "right")[side]
            msg = f"band join {name!r}: reads {missing} of {which}, which has {inputs[side].names}"
            raise OperatorError(msg)
    payload = _payload(name, output, inputs)
    types = (dict(left), dict(right))
    schema = Schema.of(
        **{
            column: types[side][of].value
            for column, (side, of) in zip(output, payload, strict=True)
        }
    )
    read_left, read_right = read

    def match(l: StreamTuple, r: StreamTuple) -> Payload | None:
        if predicate(*(l[c] for c in read_left), *(r[c] for c in read_right)):
            return tuple((l, r)[side][of] for side, of in payload)
        return None

    kernel = BandJoin(
        predicate_run(predicate, len(read_left), len(read_right)), (read_left, read_right), payload
    )
    return j_plus(name, wa, ws, inputs, schema, match, keys, kernel=kernel)
