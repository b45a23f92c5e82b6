"""The operator catalog of docs/design.md: each operator defined once, as an O+.

``build(name, params)`` returns the ``OPlus`` for a catalog name with its parameters
(strings, as the CLI and the REST API receive them, or values). ``register`` adds a user
operator under a name. Window parameters ``wa`` and ``ws`` (ms) are overridable for all.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from stretch.errors import OperatorError
from stretch.model.oplus import (
    DEFAULT_KEY_GROUPS,
    OPlus,
    OutputTime,
    Payload,
    State,
    StreamTuple,
    Windows,
    WindowType,
)
from stretch.model.schema import TS, ColumnType, Schema
from stretch.operators.joins import band_join
from stretch.operators.kernels import HEDGE, SCALEJOIN, AggregateSpec, BandJoin, ForwardSpec

__all__ = [
    "CATALOG",
    "ENTRY_POINT_GROUP",
    "MAX_INPUTS",
    "MAX_KEYS",
    "MAX_WINDOWS_PER_TUPLE",
    "MAX_WINDOW_MS",
    "OperatorSpec",
    "Param",
    "build",
    "load_operators",
    "register",
]

ParamValue = int | float | str


@dataclass(frozen=True)
class Param:
    """A catalog parameter: its parser, default and help text.

    Attributes:
        parse: Turns the text a client sends (CLI ``--param k=v``, REST ``params``, both
            given as ``str(value)``) into the value; raises ValueError naming what is wrong.
        default: The value when the parameter is not given.
        help: One line saying what it sets.

    """

    parse: Callable[[str], ParamValue]
    default: ParamValue
    help: str


@dataclass(frozen=True)
class OperatorSpec:
    """A catalog entry: what it computes, its parameters and how to build it.

    ``one_stream`` marks a self-join: its inputs are one stream fed to every source (hedge
    pairs trades of one trade stream), so clients send that stream once, as source 0.
    ``own_window`` marks a registered operator whose ``wa`` and ``ws`` the catalog added:
    its factory's O+ has its own window, which a given ``wa`` or ``ws`` overrides
    (``register``).
    """

    description: str
    factory: Callable[[Mapping[str, Any]], OPlus]
    params: Mapping[str, Param] = field(default_factory=dict)
    one_stream: bool = False
    own_window: bool = False


MAX_WINDOW_MS = 2**40
"""The largest WA and WS (about 35 years): window bounds stay far inside int64."""

MAX_WINDOWS_PER_TUPLE = 1024
"""The most window instances one tuple may fall in (ceil(WS / WA) for multi windows)."""

MAX_KEYS = DEFAULT_KEY_GROUPS
"""The most keys a join or forward spreads its state over: one key group each at most."""

MAX_INPUTS = 64
"""The most input streams of forward (ESG_in's source slots)."""

MAX_COLUMNS = 256
"""The most payload columns of forward."""

MAX_PAIR_DISTANCE = 2**31 - 1
"""The largest finite ``b`` of paircount ('inf' means every pair)."""


def _int_at_most(high: int) -> Callable[[str], int]:
    """A parser of integers in ``1..high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            msg = f"must be an integer in 1..{high}, got {text[:40]!r}"
            raise ValueError(msg) from None
        if not 1 <= value <= high:
            msg = f"must be an integer in 1..{high}, got {text[:40]}"
            raise ValueError(msg)
        return value

    return parse


def _distance(text: str) -> float:
    if text.strip().lower() in {"inf", "infinity"}:
        return math.inf
    return float(_int_at_most(MAX_PAIR_DISTANCE)(text))


def _window_params(wa_ms: int, ws_ms: int) -> dict[str, Param]:
    window_ms = _int_at_most(MAX_WINDOW_MS)
    return {
        "wa": Param(window_ms, wa_ms, f"window advance WA in ms (at most {MAX_WINDOW_MS})"),
        "ws": Param(window_ms, ws_ms, f"window size WS in ms (at most {MAX_WINDOW_MS})"),
    }


# --- forward (Operator 15) -------------------------------------------------------------


def _forward(p: Mapping[str, Any]) -> OPlus:
    schema = _columns(p["columns"])
    keys = int(p["keys"])

    def update(w: Windows, t: StreamTuple) -> tuple[Sequence[State], Sequence[Payload]]:
        return w.states, (tuple(t.payload[c] for c in schema.names),)

    return OPlus(
        "forward",
        p["wa"],
        p["ws"],
        (schema,) * int(p["inputs"]),
        multi_key=lambda t: (t.seq % keys,),
        window_type=WindowType.SINGLE,
        output=schema,
        update=update,
        update_time=OutputTime.INPUT,
        kernel=ForwardSpec(keys),
    )


def _columns(text: str) -> Schema:
    """Parse ``"x:int,y:float"`` into a schema."""
    pairs = [[part.strip() for part in item.split(":")] for item in text.split(",") if item.strip()]
    if not pairs or any(len(pair) != 2 or not pair[0] for pair in pairs):
        msg = f"columns must look like 'x:int,y:float', got {text[:80]!r}"
        raise ValueError(msg)
    if len(pairs) > MAX_COLUMNS:
        msg = f"columns name {len(pairs)} columns; at most {MAX_COLUMNS}"
        raise ValueError(msg)
    names = [name for name, _ in pairs]
    if TS in names:
        msg = f"columns must not include {TS!r}: every stream carries its event time {TS!r}"
        raise ValueError(msg)
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        msg = f"columns name {', '.join(map(repr, repeated))} more than once"
        raise ValueError(msg)
    kinds = [kind.value for kind in ColumnType]
    for name, kind in pairs:
        if kind not in kinds:
            msg = f"columns: {name!r} has type {kind!r}, not one of {', '.join(kinds)}"
            raise ValueError(msg)
    return Schema.of(**dict(pairs))


# --- aggregates over tweets (Operators 9 and 14) ----------------------------------------

TWEETS = Schema.of(user="str", tweet="str")


def _count(w: Windows, t: StreamTuple) -> tuple[Sequence[State], Sequence[Payload]]:
    return (w.states[0] + 1,), ()


def _longest(w: Windows, t: StreamTuple) -> tuple[Sequence[State], Sequence[Payload]]:
    return (max(w.states[0], len(t["tweet"])),), ()


def _key_and_state(w: Windows) -> Sequence[Payload]:
    return ((w.key, w.states[0]),)


def _aggregate(
    name: str,
    p: Mapping[str, Any],
    keys: Callable[[StreamTuple], Sequence[str]],
    update: Callable[[Windows, StreamTuple], tuple[Sequence[State], Sequence[Payload]]],
    output: Schema,
    kernel: AggregateSpec,
) -> OPlus:
    return OPlus(
        name,
        p["wa"],
        p["ws"],
        (TWEETS,),
        multi_key=keys,
        window_type=WindowType.MULTI,
        output=output,
        update=update,
        output_fn=_key_and_state,
        new_state=lambda: 0,
        kernel=kernel,
    )


def word_keys(text: str) -> list[str]:
    """The distinct tokens of a text, first occurrence first."""
    return list(dict.fromkeys(text.split()))


def words(t: StreamTuple) -> list[str]:
    """Wordcount's f_MK: the distinct tokens of the tweet."""
    return word_keys(t["tweet"])


def pairs(b: float) -> Callable[[StreamTuple], list[str]]:
    """Paircount's f_MK: distinct pairs ``W[i] W[j]`` of tokens with 0 < j - i <= b."""

    def keys(t: StreamTuple) -> list[str]:
        tokens = t["tweet"].split()
        found = (
            f"{tokens[i]} {tokens[j]}"
            for i in range(len(tokens))
            for j in range(i + 1, len(tokens))
            if j - i <= b
        )
        return list(dict.fromkeys(found))

    return keys


def hashtag_keys(text: str) -> list[str]:
    """The distinct hashtags of a text, without ``#``, first occurrence first."""
    return list(
        dict.fromkeys(tok[1:] for tok in text.split() if tok.startswith("#") and len(tok) > 1)
    )


def hashtags(t: StreamTuple) -> list[str]:
    """longest_tweet's f_MK: the distinct hashtags of the tweet, without ``#``."""
    return hashtag_keys(t["tweet"])


COUNTS = Schema.of(key="str", count="int")

_ALL_PAIRS = 2**31
"""paircount's b = inf for the kernel: every pair of the tweet (longer than any tweet)."""


def _wordcount(p: Mapping[str, Any]) -> OPlus:
    return _aggregate("wordcount", p, words, _count, COUNTS, AggregateSpec("words", combine="sum"))


def _paircount(p: Mapping[str, Any]) -> OPlus:
    b = p["b"]
    kernel = AggregateSpec("pairs", _ALL_PAIRS if math.isinf(b) else int(b), combine="sum")
    return _aggregate("paircount", p, pairs(b), _count, COUNTS, kernel)


def _longest_tweet(p: Mapping[str, Any]) -> OPlus:
    output = Schema.of(hashtag="str", chars="int")
    kernel = AggregateSpec("hashtags", take_max=True, combine="max")
    return _aggregate("longest_tweet", p, hashtags, _longest, output, kernel)


# --- joins (Operator 10) ----------------------------------------------------------------

SCALEJOIN_L = Schema.of(x="int", y="float")
SCALEJOIN_R = Schema.of(a="int", b="float", c="float", d="bool")
TRADES = Schema.of(symbol="str", price="float", avg_price="float")


def _scalejoin_match(left: StreamTuple, right: StreamTuple) -> Payload | None:
    if abs(left["x"] - right["a"]) <= 10 and abs(left["y"] - right["b"]) <= 10:
        return (left["x"], left["y"], right["a"], right["b"], right["c"], right["d"])
    return None


def _hedge_match(left: StreamTuple, right: StreamTuple) -> Payload | None:
    if left["symbol"] == right["symbol"] or left["avg_price"] == 0 or right["avg_price"] == 0:
        return None  # a trade with no average has no ND
    nd_left = (left["price"] - left["avg_price"]) / left["avg_price"]
    if nd_left == 0:
        return None
    nd_right = (right["price"] - right["avg_price"]) / right["avg_price"]
    if -1.05 <= nd_right / nd_left <= -0.95:
        return (left["symbol"], left["price"], right["symbol"], right["price"])
    return None


def _one_of(*values: str) -> Callable[[str], str]:
    """A parser of one of ``values`` (case and surrounding spaces aside)."""

    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in values:
            msg = f"must be {' or '.join(map(repr, values))}, got {text[:40]!r}"
            raise ValueError(msg)
        return value

    return parse


def _indexed(kernel: BandJoin, p: Mapping[str, Any]) -> BandJoin:
    """The join's kernel with its band's index, or the nested loop (``index=off``)."""
    return kernel if p["index"] == "on" else replace(kernel, band=None, indexed=None)


_INDEX = Param(
    _one_of("on", "off"),
    "on",
    "'on': each probe reads only the grid cells of its band; 'off': the nested loop of "
    "the paper (every probe compares the whole opposite window)",
)


_PARTITION = Param(
    _one_of("seq", "band"),
    "seq",
    "how the keys share the stored tuples: 'seq' round robin (ScaleJoin's; every instance "
    "probes every tuple), 'band' by blocks of the band's cells (an instance probes only "
    "tuples whose band meets its blocks; needs index=on; a tuple's matches come in another "
    "order)",
)


def _scalejoin(p: Mapping[str, Any]) -> OPlus:
    return band_join(
        "scalejoin",
        p["wa"],
        p["ws"],
        (SCALEJOIN_L, SCALEJOIN_R),
        Schema.of(x="int", y="float", a="int", b="float", c="float", d="bool"),
        _scalejoin_match,
        p["keys"],
        kernel=_indexed(SCALEJOIN, p),
        partition=p["partition"],
    )


def _hedge(p: Mapping[str, Any]) -> OPlus:
    return band_join(
        "hedge",
        p["wa"],
        p["ws"],
        (TRADES, TRADES),
        Schema.of(l_symbol="str", l_price="float", r_symbol="str", r_price="float"),
        _hedge_match,
        p["keys"],
        kernel=_indexed(HEDGE, p),
        partition=p["partition"],
    )


_KEYS = Param(
    _int_at_most(MAX_KEYS),
    16,
    "number of keys the window state is split into (at least the maximum parallelism, "
    f"at most the {MAX_KEYS} key groups)",
)

CATALOG: dict[str, OperatorSpec] = {
    "forward": OperatorSpec(
        "Operator 15: every input tuple once, merged in the total order",
        _forward,
        {
            **_window_params(1, 1),
            "keys": _KEYS,
            "inputs": Param(
                _int_at_most(MAX_INPUTS), 2, f"number of input streams I (at most {MAX_INPUTS})"
            ),
            "columns": Param(
                str,
                "",
                "payload columns, e.g. 'x:int,y:float' (replay infers them from the first input)",
            ),
        },
    ),
    "scalejoin": OperatorSpec(
        "Operator 10: band join of L(x, y) and R(a, b, c, d) within WS",
        _scalejoin,
        {**_window_params(1, 300_000), "keys": _KEYS, "index": _INDEX, "partition": _PARTITION},
    ),
    "hedge": OperatorSpec(
        "section 8.6: pairs of trades of different symbols with opposite deviations",
        _hedge,
        {**_window_params(1, 30_000), "keys": _KEYS, "index": _INDEX, "partition": _PARTITION},
        one_stream=True,
    ),
    "wordcount": OperatorSpec(
        "Operator 14: per-window count of each word", _wordcount, _window_params(60_000, 120_000)
    ),
    "paircount": OperatorSpec(
        "Operator 14: per-window count of word pairs at most b apart",
        _paircount,
        {
            **_window_params(60_000, 120_000),
            "b": Param(_distance, 3.0, "largest distance of a pair's words (or 'inf')"),
        },
    ),
    "longest_tweet": OperatorSpec(
        "Operator 9: per-window longest tweet length per hashtag",
        _longest_tweet,
        _window_params(1_800_000, 3_600_000),
    ),
}


def register(
    name: str,
    factory: Callable[[Mapping[str, Any]], OPlus],
    description: str = "user operator",
    params: Mapping[str, Param] | None = None,
) -> None:
    """Add a user-defined operator to the catalog under ``name``.

    Like the catalog's, it takes ``wa`` and ``ws`` (ms) unless ``params`` declares them.
    Given, they reach the factory in its mapping (``params.get("ws")``); a factory that
    builds the same window without them still gets them when its O+ outputs at window
    ends (``OutputTime.WINDOW_END``, no kernel: the runtime keeps its windows from WA and
    WS alone), and ``build`` refuses them for any other O+ (a join holds WS in its
    functions, so its factory must read it).

    Args:
        name: The name clients create it by.
        factory: Builds the O+ from a mapping of each declared parameter's value (parsed,
            or its default), plus ``wa``/``ws`` when given.
        description: One line for listings.
        params: The parameters it takes, by name (``Param(parse, default, help)``);
            any other name given to ``build`` is refused.

    Raises:
        OperatorError: ``name`` is already in the catalog.

    """
    if name in CATALOG:
        msg = f"operator {name!r} is already in the catalog"
        raise OperatorError(msg)
    declared = dict(params or {})
    own_window = not {"wa", "ws"} & set(declared)
    if own_window:
        window = _window_params(1, 1)
        declared.update(
            (key, replace(param, help=f"{param.help}; default: the operator's own"))
            for key, param in window.items()
        )
    CATALOG[name] = OperatorSpec(description, factory, declared, own_window=own_window)


ENTRY_POINT_GROUP = "stretch.operators"
"""The entry-point group of installed packages' operators: name = factory."""


def load_operators(modules: Sequence[str] = ()) -> list[str]:
    """Load user operators: import ``modules``, then the ``stretch.operators`` entry points.

    A module registers its operators when imported (``stretch.register``); an entry point
    of the group ``stretch.operators`` names a factory ``params -> OPlus`` and is
    registered under the entry point's name. The service calls this once at start
    (``stretch serve --operators MODULE``): operators come from code installed on the
    server, never from request bodies.

    Args:
        modules: Importable module names, e.g. ``"mypackage.ops"``.

    Returns:
        The names added to the catalog, in the order they were added.

    Raises:
        OperatorError: a module cannot be imported, or an entry point cannot be loaded or
            takes a name already in the catalog.

    """
    before = set(CATALOG)
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            msg = f"cannot load operators from module {module!r}: {exc}"
            raise OperatorError(msg) from exc
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        origin = f"entry point {entry.value}"
        if entry.name in CATALOG and CATALOG[entry.name].description == origin:
            continue  # loaded by an earlier call
        try:
            factory = entry.load()
        except Exception as exc:
            msg = f"cannot load operator {entry.name!r} from entry point {entry.value!r}: {exc}"
            raise OperatorError(msg) from exc
        register(entry.name, factory, origin)
    return [name for name in CATALOG if name not in before]


def build(name: str, params: Mapping[str, Any] | None = None) -> OPlus:
    """The O+ of catalog operator ``name`` with ``params`` over its defaults.

    Raises:
        OperatorError: for an unknown operator, an unknown parameter or a bad value.

    """
    spec = CATALOG.get(name)
    if spec is None:
        msg = f"unknown operator {name!r}; known: {', '.join(sorted(CATALOG))}"
        raise OperatorError(msg)
    values: dict[str, Any] = {
        k: p.default for k, p in spec.params.items() if not (spec.own_window and k in _WINDOW_KEYS)
    }
    for key, raw in (params or {}).items():
        param = spec.params.get(key)
        if param is None:
            known = ", ".join(sorted(spec.params)) or "none"
            msg = f"operator {name!r} has no parameter {key!r} (known: {known})"
            raise OperatorError(msg)
        try:
            values[key] = param.parse(str(raw))
        except ValueError as exc:
            msg = f"operator {name!r}: parameter {key}={raw!r}: {exc}"
            raise OperatorError(msg) from exc
    try:
        op = spec.factory(values)
        if spec.own_window:
            op = _own_window(name, spec, values, op)
    except ValueError as exc:
        msg = f"operator {name!r}: {exc}"
        raise OperatorError(msg) from exc
    windows = -(-op.ws_ms // op.wa_ms)
    if op.window_type is WindowType.MULTI and windows > MAX_WINDOWS_PER_TUPLE:
        msg = (
            f"operator {name!r}: ws={op.ws_ms} and wa={op.wa_ms} put each tuple in {windows} "
            f"windows; at most {MAX_WINDOWS_PER_TUPLE} (raise wa or lower ws)"
        )
        raise OperatorError(msg)
    return replace(op, name=name) if op.name != name else op


_WINDOW_KEYS = ("wa", "ws")


def _own_window(name: str, spec: OperatorSpec, values: Mapping[str, Any], op: OPlus) -> OPlus:
    """A registered operator's O+ with the ``wa``/``ws`` given (see ``register``)."""
    given = {key: values[key] for key in _WINDOW_KEYS if key in values}
    wanted = (given.get("wa", op.wa_ms), given.get("ws", op.ws_ms))
    if wanted == (op.wa_ms, op.ws_ms):
        return op
    baseline = spec.factory({k: v for k, v in values.items() if k not in _WINDOW_KEYS})
    if (op.wa_ms, op.ws_ms) != (baseline.wa_ms, baseline.ws_ms):
        return op  # the factory read them
    if op.kernel is None and op.update_time is OutputTime.WINDOW_END:
        return replace(op, wa_ms=wanted[0], ws_ms=wanted[1])
    asked = ", ".join(f"{key}={value}" for key, value in given.items())
    msg = (
        f"operator {name!r}: its factory builds the same windows whatever {asked} says, "
        "and its O+ does not output at window ends (a join holds WS in its functions): "
        "the factory must read params.get('wa'), params.get('ws')"
    )
    raise OperatorError(msg)
