"""Reconfiguration of the VSN runtime: Alg. 4-6, Theorems 3-4, Lemma 3, the pipeline API."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from stretch.errors import InputError, LateTupleError, ReconfigurationError
from stretch.generate import tweets
from stretch.model.oplus import OPlus, Payload, State, StreamTuple, Windows, WindowType
from stretch.model.schema import Schema
from stretch.model.sn import run_sn
from stretch.operators.catalog import build
from stretch.vsn import _instance, run_vsn, setup
from stretch.vsn._compiled.aggregates import AggregateKernel
from tests.vsn.support import TIMEOUT_S, no_thread_leak, run_schedule

__all__ = ["no_thread_leak"]

V = Schema.of(v="int")


def v_table(ts: Sequence[int], values: Sequence[int] | None = None) -> pa.Table:
    values = list(values) if values is not None else [t % 7 for t in ts]
    return V.table(list(ts), [(v,) for v in values])


def forward_op(inputs: int = 2) -> OPlus:
    return build("forward", {"columns": "v:int", "inputs": str(inputs), "keys": 8})


def test_invalid_reconfigurations_raise_and_change_nothing() -> None:
    op = forward_op()
    with setup(op, 2, 4, capacity=1 << 12) as pipeline:
        before = (pipeline._pool.current, dict(pipeline._pool.plans), pipeline.reconfigurations())
        bad_mapping_short = [0] * (op.key_groups - 1)
        bad_mapping_instance = [0] * (op.key_groups - 1) + [2]
        for kwargs in (
            {"parallelism": 0},
            {"parallelism": 5},
            {},
            {"mapping": bad_mapping_short},
            {"parallelism": 2, "mapping": bad_mapping_instance},
            {"parallelism": 3, "mapping": [-1] * op.key_groups},
        ):
            with pytest.raises(ReconfigurationError):
                pipeline.reconfigure(**kwargs)  # type: ignore[arg-type]
        assert (
            pipeline._pool.current,
            dict(pipeline._pool.plans),
            pipeline.reconfigurations(),
        ) == before
        assert pipeline.reconfigure(parallelism=2, mapping=[1] * op.key_groups) == 1
        pipeline.close()
        assert pipeline.join(TIMEOUT_S)
        with pytest.raises(ReconfigurationError):
            pipeline.reconfigure(parallelism=1)


def test_pipeline_api_output_offsets_commit_and_stats() -> None:
    op = forward_op()
    tables = [v_table(range(0, 100, 2)), v_table(range(1, 100, 3))]
    with setup(op, 1, 3, capacity=1 << 12) as pipeline:
        pipeline.add(0, tables[0])
        pipeline.watermark(1, 0)
        pipeline.add(1, tables[1])
        epoch = pipeline.reconfigure(parallelism=3)
        pipeline.add(0, v_table([200, 201]))
        pipeline.add(1, v_table([202]))
        assert pipeline.wait_epoch(epoch, TIMEOUT_S)
        pipeline.close()
        assert pipeline.join(TIMEOUT_S)
        first, offset = pipeline.output(0, max_rows=10)
        rest, end = pipeline.output(offset)
        assert (first.num_rows, offset, end) == (10, 10, first.num_rows + rest.num_rows)
        expected = run_sn(
            op,
            [
                pa.concat_tables([tables[0], v_table([200, 201])]),
                pa.concat_tables([tables[1], v_table([202])]),
            ],
        )
        assert pa.concat_tables([first, rest]).equals(expected)
        pipeline.commit(offset)
        with pytest.raises(InputError):
            pipeline.output(0)
        status = pipeline.status()
        assert status.epoch == 1 and status.parallelism == 3
        assert sum(i.tuples_in for i in status.instances) >= len(expected)
        (record,) = status.reconfigurations
        assert record.from_parallelism == 1 and record.to_parallelism == 3
        assert record.duration_ms is not None and record.duration_ms >= 0
        assert record.trigger_ts == 97  # the first control in the merged order (source 1)


def test_unsorted_input_is_reordered_and_late_input_rejected() -> None:
    """Decision 8: rows wait in the reorder buffer; a row behind the released watermark
    (the largest ts seen, with the default lateness 0) is late and its batch rejected."""
    with setup(forward_op(1), 1, 1, capacity=1 << 12) as pipeline:
        pipeline.add(0, v_table([1, 5, 4]))
        pipeline.add(0, v_table([6, 5]))
        with pytest.raises(LateTupleError, match="row 2 has ts 3, before the released watermark 6"):
            pipeline.add(0, v_table([7, 3]))
        with pytest.raises(InputError):
            pipeline.add(1, v_table([7]))
        pipeline.close()
        with pytest.raises(InputError, match="closed"):
            pipeline.add(0, v_table([9]))
        assert pipeline.join(TIMEOUT_S)
        assert pipeline.output()[0].column("ts").to_pylist() == [1, 4, 5, 5, 6]


def test_user_defined_oplus_same_in_vsn_and_sn() -> None:
    """A Python O+ (running max of v per parity key, emitted per window and per update)."""

    def update(w: Windows, t: StreamTuple) -> tuple[Sequence[State], Sequence[Payload]]:
        best = max(w.states[0], t["v"])
        return (best,), ((w.key, best),) if t["v"] % 3 == 0 else ()

    def output(w: Windows) -> Sequence[Payload]:
        return ((w.key, w.states[0]),)

    op = OPlus(
        "parity_max",
        5,
        15,
        (V,),
        multi_key=lambda t: ("odd" if t["v"] % 2 else "even", "all"),
        window_type=WindowType.MULTI,
        output=Schema.of(key="str", best="int"),
        update=update,
        output_fn=output,
        new_state=lambda: -1,
        key_groups=16,
    )
    rng = random.Random(7)
    table = v_table(
        sorted(rng.randrange(0, 200) for _ in range(150)),
        [rng.randrange(0, 100) for _ in range(150)],
    )
    reference = run_sn(op, [table])
    for m, schedule in ((1, []), (3, []), (2, [(50, 4, None), (50, 1, None), (120, 3, None)])):
        out, _ = run_schedule(op, [table], m, 4, schedule)
        assert out.equals(reference)


def test_run_vsn_with_reconfigure_schedule() -> None:
    op = build("wordcount", {"wa": 10, "ws": 30})
    texts = ["a b", "b c", "a", "c c d", "#x a"]
    table = Schema.of(user="str", tweet="str").table(
        list(range(0, 100, 4)), [("u", texts[i % 5]) for i in range(25)]
    )
    out = run_vsn(op, [table], 1, 3, reconfigure=[(20, 3), (60, 2)], timeout_s=TIMEOUT_S)
    assert out.equals(run_sn(op, [table]))


def test_chained_pipelines() -> None:
    op = forward_op(1)
    table = v_table(range(0, 60, 3))
    first = setup(op, 2, 2, capacity=1 << 12)
    second = setup(first, forward_op(1), 1, 2, capacity=1 << 12)
    try:
        first.add(0, table)
        first.close()
        assert first.join(TIMEOUT_S)
        assert second.join(TIMEOUT_S)
        assert second.output()[0].equals(run_sn(op, [table]))
    finally:
        first.shutdown()
        second.shutdown()


@pytest.mark.slow
def test_thousand_reconfigurations_lose_and_duplicate_nothing() -> None:
    op = forward_op()
    rng = random.Random(11)
    tables: list[list[int]] = [[], []]
    with setup(op, 2, 4, capacity=1 << 12, audit=True) as pipeline:
        ts = 0
        for _ in range(1000):
            for source in (0, 1):
                batch = [ts + d for d in sorted(rng.randrange(0, 3) for _ in range(2))]
                pipeline.add(source, v_table(batch))
                tables[source].extend(batch)
            ts += 3
            pipeline.reconfigure(parallelism=rng.randint(1, 4))
        pipeline.add(0, v_table([ts + 1]))
        tables[0].append(ts + 1)
        assert pipeline.wait_epoch(1000, TIMEOUT_S)
        pipeline.close()
        assert pipeline.join(TIMEOUT_S)
        out, _ = pipeline.output()
        assert out.equals(run_sn(op, [v_table(t) for t in tables]))
        assert pipeline._pool.audit is not None and not pipeline._pool.audit.violations
        records = pipeline.reconfigurations()
        assert [r.epoch for r in records] == list(range(1, 1001))
        assert all(r.completed_ns is not None for r in records)
        final = pipeline._pool.current.parallelism
        assert [i.connected for i in pipeline._pool.instances] == [j < final for j in range(4)]


@pytest.mark.parametrize("second_source_fed", [True, False])
def test_a_switch_completes_without_further_input(second_source_fed: bool) -> None:
    """The first control tuple of an epoch switches it: no later tuple is waited for."""
    op = forward_op()
    left, right = v_table(range(0, 60, 2)), v_table(range(1, 50, 3))
    with setup(op, 1, 4, capacity=1 << 12) as pipeline:
        pipeline.add(0, left)
        if second_source_fed:
            pipeline.add(1, right)
        for m in (3, 2, 4, 1):
            epoch = pipeline.reconfigure(parallelism=m)
            assert pipeline.wait_epoch(epoch, TIMEOUT_S), m  # no input after the request
            assert pipeline._pool.current.parallelism == m
        if not second_source_fed:
            pipeline.add(1, right)
        pipeline.close()
        assert pipeline.join(TIMEOUT_S)
        out, _ = pipeline.output()
    assert out.equals(run_sn(op, [left, right]))


def test_more_rows_at_the_barriers_watermark_than_esg_out_holds() -> None:
    """A window's rows at the barrier's watermark W stay buffered over the switch.

    Paircount closes a window with thousands of rows at one ts. At a barrier the other
    instances stop with W as their ESG_out frontier, where a higher instance's rows at W
    are not ready, so releasing more of them than ESG_out (4,096 nodes here) holds used
    to wait for room forever.
    """
    op = build("paircount", {"wa": 100, "ws": 300, "b": 2})
    tables = tweets(1500, 1000.0, seed=6)
    schedule = [(300, 3, None), (900, 1, None), (1500, 2, None)]
    out, pipeline = run_schedule(op, tables, 2, 3, schedule)
    assert out.equals(run_sn(op, tables))
    assert [r.to_parallelism for r in pipeline.reconfigurations()] == [3, 1, 2]


def test_rows_at_w_released_before_the_barrier_do_not_block_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An instance whose run ends at W, holding a window's rows at W, before the barrier.

    Each instance takes one tuple per run, so instance 1 closes the window [0, 300) at
    the end of a run and releases before it reads the control tuple of the switch to
    three, whose ts is 300. Instance 0 then waits at the barrier with 300 as its ESG_out
    frontier, so instance 1's rows at 300 cannot be ready, and its thousands of them,
    more than ESG_out (4,096 nodes) holds, waited for room forever (every time, before
    rows at W waited for W to grow; the barrier's own release already kept them).
    """
    monkeypatch.setattr(_instance, "MIN_RUN", 1)
    monkeypatch.setattr(_instance, "MAX_RUN", 1)
    op = build("paircount", {"wa": 100, "ws": 300, "b": 2})
    tables = tweets(400, 1000.0, seed=6)
    ts = tables[0]["ts"]
    with setup(op, 2, 3, capacity=1 << 12) as pipeline:
        pipeline.add(0, tables[0].filter(pc.less_equal(ts, 300)))
        pipeline.reconfigure(parallelism=3)
        pipeline.add(0, tables[0].filter(pc.greater(ts, 300)))
        pipeline.close()
        assert pipeline.join(TIMEOUT_S / 3)
        out, _ = pipeline.output()
        assert [r.to_parallelism for r in pipeline.reconfigurations()] == [3]
    assert out.equals(run_sn(op, tables))
    assert out.filter(pc.equal(out["ts"], 300)).num_rows > 1 << 12


def test_a_leaving_instances_rows_at_the_barriers_watermark_are_sorted_in() -> None:
    """Instance 0 adopts a leaving instance's rows at W and releases them with its own.

    Wordcount, windows of 100 ms: the watermark 100 closes the first window. Instance 1
    is held back, so instance 0 reaches W = 100 first, its rows at 100 buffered (rows at
    W wait for W to grow); instance 1 emits its own at the barrier of the switch to one
    instance, where its watermark is 100, so they stay buffered and instance 0 adopts
    them. Their causes fall between those of instance 0's rows at 100, so they must be
    merged into them in ``(ts, cause)`` order (when instance 0 released its own first, it
    was the drainer that had to sort them in).
    """
    op = build("wordcount", {"wa": 100, "ws": 100})
    entered, held = threading.Event(), threading.Event()
    process = AggregateKernel.process

    def held_back(kernel: AggregateKernel, instance: Any, *args: Any) -> int:
        if instance.j == 1:
            entered.set()
            held.wait(TIMEOUT_S)
        return process(kernel, instance, *args)

    words = [f"w{i}" for i in range(100)]
    table = pa.table({"ts": [*range(100), 150], "user": ["u"] * 101, "tweet": [*words, "w0"]})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(AggregateKernel, "process", held_back)
        with setup(op, 2, 2, capacity=1 << 12) as pipeline:
            pipeline.add(0, table.slice(0, 100))
            assert entered.wait(TIMEOUT_S)  # instance 1 took the tuples, not the watermark
            pipeline.watermark(0, 100)
            zero = pipeline._pool.instances[0].oplus
            deadline = time.monotonic() + TIMEOUT_S
            while zero.watermark < 100 and time.monotonic() < deadline:
                time.sleep(0.002)  # instance 0 closed the first window: its rows at 100
            assert zero.watermark == 100
            pipeline.reconfigure(parallelism=1)
            held.set()
            pipeline.add(0, table.slice(100))
            pipeline.close()
            assert pipeline.join(TIMEOUT_S)
            out, _ = pipeline.output()
    assert out.equals(run_sn(op, [table]))
