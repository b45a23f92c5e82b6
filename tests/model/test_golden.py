"""The paper's worked examples as golden tests (Appendix C, Appendix E, Trace 16)."""

from __future__ import annotations

from stretch.model.instance import TraceEvent
from stretch.model.oplus import END_OF_INPUT, StreamTuple
from stretch.model.schema import Schema
from stretch.model.sn import SNRuntime, run_sn
from stretch.operators.catalog import build

MIN = 60_000
HOUR = 60 * MIN


def at(hours: int, minutes: int) -> int:
    return hours * HOUR + minutes * MIN


HELLO = StreamTuple(at(9, 50), 0, 0, {"user": "B", "tweet": "hello #pink"})
HI = StreamTuple(at(9, 58), 0, 1, {"user": "C", "tweet": "hi #red #pink"})
LONGEST = {"wa": 30 * MIN, "ws": HOUR}


def state_of(runtime: SNRuntime) -> set[tuple[int, int, str]]:
    """sigma as the paper writes it: <zeta, l, k> for every window instance."""
    op = runtime.op
    found = set()
    for key in ("pink", "red"):
        store = runtime.instances[0].state[op.group_of(key)]
        found |= {(s.states[0], s.l, key) for s in store.sets_of(key)}
    return found


def test_appendix_c_outputs() -> None:
    """Figure 15: the A+ gives <10:00, [red, 13]> and <10:00, [pink, 13]>."""
    table = Schema.of(user="str", tweet="str").table(
        [HELLO.ts, HI.ts], [("B", "hello #pink"), ("C", "hi #red #pink")]
    )
    out = run_sn(build("longest_tweet", LONGEST), [table]).to_pylist()
    at_ten = [(r["ts"], r["hashtag"], r["chars"]) for r in out if r["ts"] == at(10, 0)]
    assert sorted(at_ten) == [(at(10, 0), "pink", 13), (at(10, 0), "red", 13)]
    # pink's window set was created first (by 09:50), so it comes first
    assert [r[1] for r in at_ten] == ["pink", "red"]


def test_execution_trace_16() -> None:
    """Appendix E: the state operations of processSN(<09:58, [C, "hi #red #pink"]>)."""
    trace: list[TraceEvent] = []
    runtime = SNRuntime(build("longest_tweet", LONGEST), 1, trace=trace)
    runtime.forward(HELLO)
    assert state_of(runtime) == {(11, at(9, 0), "pink"), (11, at(9, 30), "pink")}
    trace.clear()
    runtime.forward(HI)
    assert runtime.instances[0].watermark == at(9, 58)
    assert trace == [
        ("check&Create", "red", at(9, 0)),
        ("set", "red", 0, (13,)),
        ("check&Create", "red", at(9, 30)),
        ("set", "red", 1, (13,)),
        ("check&Create", "pink", at(9, 0)),
        ("set", "pink", 0, (13,)),
        ("check&Create", "pink", at(9, 30)),
        ("set", "pink", 1, (13,)),
    ]
    assert state_of(runtime) == {
        (13, at(9, 0), "pink"),
        (13, at(9, 0), "red"),
        (13, at(9, 30), "pink"),
        (13, at(9, 30), "red"),
    }


def test_appendix_e_matches_map_then_aggregate() -> None:
    """Theorem 2: the A+ equals M (Alg. 7) then A (Operator 8) on the same input."""
    mapped = [(HELLO.ts, "pink", 11), (HI.ts, "red", 13), (HI.ts, "pink", 13)]
    expected = []
    for l in (at(9, 0), at(9, 30)):
        best: dict[str, int] = {}
        for ts, tag, chars in mapped:
            if l <= ts < l + HOUR:
                best[tag] = max(best.get(tag, 0), chars)
        expected += [(l + HOUR, tag, chars) for tag, chars in best.items()]
    runtime = SNRuntime(build("longest_tweet", LONGEST), 1)
    out = runtime.run([HELLO, HI])
    assert sorted((r.ts, *r.payload) for r in out) == sorted(expected)
    assert runtime.instances[0].watermark == END_OF_INPUT
