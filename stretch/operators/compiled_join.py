"""Band joins with a user's compiled predicate: ``stretch.band_join``.

A user writes the match predicate as an ``@numba.njit`` function of the values of one L
tuple and one R tuple and gets a J+ (Operator 10) that runs on the same compiled kernel
as the catalog's ScaleJoin and hedge, at their speed: the predicate is inlined into the
band-join loop (``kernels._predicate_join``), compiled on first use and cached on disk.
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
        band=("x", "a", 5),
    )

``band=("x", "a", 5)`` declares that every matching pair has ``|x - a| <= 5`` (the
predicate implies it): the windows are then indexed by a grid on ``x`` (L) and ``a``
(R), and a tuple is compared only with the tuples of the cells within 5 of its
value, with the predicate deciding each pair (``kernels._band_index``). The output is the
same, row for row; without ``band`` every tuple is compared with the whole opposite
window (the nested loop). A band looser than the predicate (``|x - a| <= 8`` here) is
correct but scans more; one tighter than it loses matches, so declare only what the
predicate implies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from numba.core.dispatcher import Dispatcher

from stretch.errors import OperatorError
from stretch.model.oplus import OPlus, Payload, StreamTuple
from stretch.model.schema import TS, ColumnType, Schema
from stretch.operators.joins import band_join as j_plus
from stretch.operators.kernels import Band, BandJoin
from stretch.operators.kernels._predicate_join import predicate_indexed_run, predicate_run

__all__ = ["band_join"]

_SIDES = {"left": 0, "right": 1}


def _payload(
    name: str, output: Mapping[str, str], inputs: tuple[Schema, Schema]
) -> tuple[tuple[int, str], ...]:
    """``output``'s ``"left.col"`` / ``"right.col"`` sources as (side, column) pairs."""
    payload = []
    for column, source in output.items():
        if column == TS:
            msg = (
                f"band join {name!r}: output column {TS!r} is the event time every row "
                "carries (the later tuple's); give the column another name"
            )
            raise OperatorError(msg)
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


def _band(name: str, band: tuple[str, str, float], inputs: tuple[Schema, Schema]) -> Band:
    """``band`` as a ``Band``, its columns numeric columns of L and R."""
    try:
        column_left, column_right, width = band
    except (TypeError, ValueError):
        msg = f"band join {name!r}: band must be (left column, right column, width), got {band!r}"
        raise OperatorError(msg) from None
    for side, column in ((0, column_left), (1, column_right)):
        types = dict(inputs[side])
        if types.get(column) not in (ColumnType.INT, ColumnType.FLOAT):
            which = ("left", "right")[side]
            msg = (
                f"band join {name!r}: band column {column!r} is not a numeric column of "
                f"{which} ({inputs[side].names})"
            )
            raise OperatorError(msg)
    try:
        return Band(float(width), (column_left,), (column_right,))
    except (TypeError, ValueError) as exc:
        msg = f"band join {name!r}: band {band!r}: {exc}"
        raise OperatorError(msg) from None


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
    band: tuple[str, str, float] | None = None,
    partition: str = "seq",
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
        band: ``(left column, right column, width)``: the predicate accepts a pair only
            if ``|left - right| <= width`` (numeric columns), so each window is indexed
            on those columns; None compares every pair within ``ws`` (the nested loop).
        partition: How the keys share the stored tuples: ``"seq"`` round robin
            (ScaleJoin's), or ``"band"`` (with a ``band``) by blocks of the band's cells, so
            that each instance probes only the tuples whose band meets its blocks and the
            probes split between the instances; a tuple's matches then come ordered by
            their block's key (``stretch.operators.joins``).

    Returns:
        The J+ (Operator 10), with its compiled kernel declared in ``OPlus.kernel``.

    Raises:
        OperatorError: ``predicate`` is not a Numba-compiled function, ``ws`` is
            negative, ``reads`` or ``output`` names a column the schemas do not have,
            ``output`` names a column ``ts``, or ``band`` names a column that is not
            numeric or a width that is not finite and positive, or ``partition`` is
            not ``"seq"`` or ``"band"`` (``"band"`` only with a ``band``).

    """
    if not isinstance(predicate, Dispatcher):
        msg = f"band join {name!r}: predicate must be an @numba.njit function, got {predicate!r}"
        raise OperatorError(msg)
    if ws < 0:
        msg = f"band join {name!r}: ws must be >= 0 ms, got {ws}"
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

    n_left, n_right = len(read_left), len(read_right)
    kernel = BandJoin(predicate_run(predicate, n_left, n_right), (read_left, read_right), payload)
    if band is not None:
        kernel = replace(
            kernel,
            band=_band(name, band, inputs),
            indexed=predicate_indexed_run(predicate, n_left, n_right),
        )
    try:
        return j_plus(name, wa, ws, inputs, schema, match, keys, kernel, partition)
    except ValueError as exc:
        msg = f"band join {name!r}: {exc}"
        raise OperatorError(msg) from None
