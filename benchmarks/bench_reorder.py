"""Out-of-order input: what a batch costs to admit against the rows the lateness holds back.

``forward`` (one source, an int column) takes ``--batches`` batches of ``--batch-rows``
rows, ``--rows-per-ms`` rows per ms of ``ts``. Three cases, each three ways (below), all
interleaved, ``--runs`` times:

* ``sorted_l0``: batches in ``ts`` order, allowed lateness 0: the reorder buffer holds
  only the rows of the last ``ts``;
* ``sorted_late``: the same batches with ``--lateness-ms`` L: the buffer holds the last L
  ms of rows (L x rows-per-ms of them) before it frees any;
* ``shuffled_late``: the rows shuffled across up to ``--jitter-ms`` (< L), lateness L: what
  a Spark source with ``allowedLatenessMs`` sends.

Each case runs three ways: ``add``, the pipeline's ``Pipeline.add``, which also checks the
batch against the source's schema, hands the freed rows to the ESG and shares the cores
with the instance and the drainer; ``buffer``, the pipeline's ``ReorderBuffer`` alone on
the same batches; and ``bare``, ``onethread_reorder.Buffer``, the best simple
single-thread program for the buffer's job (buckets of ``ts``, freed rows sorted once by a
packed key). ``buffer`` against ``bare`` is the like-for-like comparison.

Reported per case and way: the median wall time of one batch once the buffer holds its
full lateness (the last half of the batches), its ratio to the same way's ``sorted_l0``
(a buffer that re-sorted every row it holds at each batch would cost in proportion to L),
and the slowest batch there (one merge of two runs, past ``MAX_RUNS``). For ``add`` and
``buffer``, the bare time over theirs. Every output is checked equal to the first.
Writes ``reorder.json`` and ``reorder.png``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
from _args import non_negative_int, positive_int, prog
from _util import figure, interleaved, machine, medians, progress, save, write
from onethread_reorder import Buffer

from stretch.operators.catalog import build
from stretch.vsn import setup
from stretch.vsn._reorder import ReorderBuffer

JOIN_TIMEOUT_S = 600.0
R = TypeVar("R")


def batches(args: argparse.Namespace, shuffled: bool) -> list[pa.Table]:
    """The input split into batches: in ``ts`` order, or shuffled across the jitter."""
    n = args.batches * args.batch_rows
    rng = np.random.default_rng(args.seed)
    ts = np.arange(n, dtype=np.int64) // args.rows_per_ms
    v = rng.integers(0, 1000, n)
    order = np.arange(n)
    if shuffled:  # a row arrives at most jitter ms after later rows
        order = np.argsort(ts + rng.integers(0, args.jitter_ms + 1, n), kind="stable")
    table = pa.table({"ts": pa.array(ts[order]), "v": pa.array(v[order])})
    return [table.slice(i, args.batch_rows) for i in range(0, n, args.batch_rows)]


def _timed(push: Callable[[pa.Table], R], inputs: list[pa.Table]) -> tuple[list[float], list[R]]:
    """Call ``push`` on every batch: each call's seconds, and what each returned."""
    took, out = [], []
    for batch in inputs:
        start = time.perf_counter()
        result = push(batch)
        took.append(time.perf_counter() - start)
        out.append(result)
    return took, out


def one_run(inputs: list[pa.Table], lateness_ms: int, first: list[pa.Table]) -> dict[str, float]:
    """Add every batch, timing each; the output must equal the ``first`` run's (kept)."""
    op = build("forward", {"columns": "v:int", "inputs": 1})
    with setup(op, 1, 1, allowed_lateness_ms=lateness_ms) as pipeline:
        took, _ = _timed(partial(pipeline.add, 0), inputs)
        pipeline.close()
        if not pipeline.join(timeout_s=JOIN_TIMEOUT_S):
            msg = f"the output did not finish in {JOIN_TIMEOUT_S} s"
            raise RuntimeError(msg)
        output = pipeline.output()[0]
    if not first:
        first.append(output)
    elif not output.equals(first[0]):
        msg = f"the output at lateness {lateness_ms} ms differs from the first run's"
        raise AssertionError(msg)
    return _timings(took)


def one_buffer(inputs: list[pa.Table], lateness_ms: int, first: list[pa.Table]) -> dict[str, float]:
    """``one_run`` for the pipeline's reorder buffer alone."""
    buffer = ReorderBuffer(lateness_ms, "bench")
    took, out = _timed(buffer.push, inputs)
    out.append(buffer.flush())
    if not pa.concat_tables([t for t in out if t is not None]).equals(first[0]):
        msg = f"the buffer's output at lateness {lateness_ms} ms differs from the pipeline's"
        raise AssertionError(msg)
    return _timings(took)


def one_bare(inputs: list[pa.Table], lateness_ms: int, first: list[pa.Table]) -> dict[str, float]:
    """``one_run`` for the bare buffer, given each batch's two columns as NumPy arrays."""
    buffer = Buffer(lateness_ms)
    took, out = _timed(lambda b: buffer.push(b["ts"].to_numpy(), b["v"].to_numpy()), inputs)
    out.append(buffer.flush())
    ts, v = (np.concatenate([o[i] for o in out if o is not None]) for i in (0, 1))
    want = first[0]
    if not (np.array_equal(ts, want.column("ts")) and np.array_equal(v, want.column("v"))):
        msg = f"the bare buffer's output at lateness {lateness_ms} ms differs from the pipeline's"
        raise AssertionError(msg)
    return _timings(took)


def _timings(took: list[float]) -> dict[str, float]:
    """The median and slowest batch once the buffer is full (the last half), and the sum."""
    full = took[len(took) // 2 :]
    return {
        "batch_ms": statistics.median(full) * 1e3,
        "slowest_ms": max(full) * 1e3,
        "seconds": sum(took),
    }


WAYS = {"add": one_run, "buffer": one_buffer, "bare": one_bare}
"""How a batch is taken: by the pipeline, by its reorder buffer alone, by the bare one."""


def main() -> None:
    parser = argparse.ArgumentParser(prog=prog(), description=__doc__)
    parser.add_argument("--batches", type=positive_int, default=200, help="batches per run")
    parser.add_argument("--batch-rows", type=positive_int, default=10_000)
    parser.add_argument("--rows-per-ms", type=positive_int, default=100)
    parser.add_argument("--lateness-ms", type=positive_int, default=10_000, help="L")
    parser.add_argument("--jitter-ms", type=non_negative_int, default=1_000, help="< L")
    parser.add_argument("--seed", type=non_negative_int, default=1)
    parser.add_argument("--runs", type=positive_int, default=3)
    args = parser.parse_args()
    if args.jitter_ms >= args.lateness_ms:
        parser.error(f"--jitter-ms must be below --lateness-ms ({args.lateness_ms})")
    held = args.lateness_ms * args.rows_per_ms
    progress(f"{args.batches} batches of {args.batch_rows} rows; lateness holds {held} rows")
    in_order, shuffled = batches(args, False), batches(args, True)
    first: list[pa.Table] = []  # the first run's output, which every run must equal
    configurations = {
        "sorted_l0": (in_order, 0),
        "sorted_late": (in_order, args.lateness_ms),
        "shuffled_late": (shuffled, args.lateness_ms),
    }
    samples = interleaved(
        args.runs,
        {
            f"{way}_{name}": partial(run, inputs, lateness, first)
            for way, run in WAYS.items()
            for name, (inputs, lateness) in configurations.items()
        },
    )
    summary = {name: medians(runs) for name, runs in samples.items()}
    for name, case in summary.items():
        way, configuration = name.split("_", 1)
        case["over_l0"] = case["batch_ms"] / summary[f"{way}_sorted_l0"]["batch_ms"]
        if way != "bare":
            case["bare_over_ours"] = summary[f"bare_{configuration}"]["batch_ms"] / case["batch_ms"]
    result: dict[str, Any] = {
        "args": vars(args),
        "machine": machine(),
        "held_rows": held,
        "runs": samples,
        "summary": summary,
    }
    write("reorder", result)
    fig, (ax,) = figure(1, f"one batch of {args.batch_rows} rows, {held} rows held back")
    width = 0.27
    for w, way in enumerate(WAYS):
        ax.bar(
            [c + (w - 1) * width for c in range(len(configurations))],
            [summary[f"{way}_{name}"]["batch_ms"] for name in configurations],
            width,
            label=way,
        )
    ax.set_xticks(range(len(configurations)), list(configurations))
    ax.set_ylabel("ms (median, buffer full)")
    ax.legend()
    path = save(fig, "reorder")
    for name, case in summary.items():
        versus = f", {case['bare_over_ours']:.2f}x bare" if "bare_over_ours" in case else ""
        print(
            f"{name:>20}: {case['batch_ms']:.2f} ms ({case['over_l0']:.2f}x its L = 0{versus}), "
            f"slowest {case['slowest_ms']:.1f} ms"
        )
    progress(f"wrote {path}")


if __name__ == "__main__":
    main()
