"""Out-of-order input: what a batch costs to admit against the rows the lateness holds back.

``forward`` (one source, an int column) takes ``--batches`` batches of ``--batch-rows``
rows, ``--rows-per-ms`` rows per ms of ``ts``, through ``Pipeline.add``. Three cases,
interleaved, ``--runs`` times:

* ``sorted_l0``: batches in ``ts`` order, allowed lateness 0: the reorder buffer holds
  only the rows of the last ``ts``;
* ``sorted_late``: the same batches with ``--lateness-ms`` L: the buffer holds the last L
  ms of rows (L x rows-per-ms of them) before it frees any;
* ``shuffled_late``: the rows shuffled across up to ``--jitter-ms`` (< L), lateness L: what
  a Spark source with ``allowedLatenessMs`` sends.

Reported per case: the median wall time of one ``add`` once the buffer holds its full
lateness (the last half of the batches), and its ratio to ``sorted_l0``'s: a buffer that
re-sorted every row it holds at each batch would cost in proportion to L. Also the slowest
add there (with L, one add in ``MAX_RUNS`` merges the runs held). The three outputs are
checked equal. Writes ``reorder.json`` and ``reorder.png``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
import pyarrow as pa
from _args import non_negative_int, positive_int, prog
from _util import figure, interleaved, machine, medians, progress, save, write

from stretch.operators.catalog import build
from stretch.vsn import setup

JOIN_TIMEOUT_S = 600.0


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


def one_run(
    args: argparse.Namespace, inputs: list[pa.Table], lateness_ms: int, first: list[pa.Table]
) -> dict[str, float]:
    """Add every batch, timing each; the output must equal the ``first`` run's (kept)."""
    op = build("forward", {"columns": "v:int", "inputs": 1})
    with setup(op, 1, 1, allowed_lateness_ms=lateness_ms) as pipeline:
        took = []
        for batch in inputs:
            start = time.perf_counter()
            pipeline.add(0, batch)
            took.append(time.perf_counter() - start)
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
    full = took[len(took) // 2 :]
    return {
        "add_ms": statistics.median(full) * 1e3,
        "add_max_ms": max(full) * 1e3,
        "seconds": sum(took),
    }


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
    samples = interleaved(
        args.runs,
        {
            "sorted_l0": lambda: one_run(args, in_order, 0, first),
            "sorted_late": lambda: one_run(args, in_order, args.lateness_ms, first),
            "shuffled_late": lambda: one_run(args, shuffled, args.lateness_ms, first),
        },
    )
    summary = {name: medians(runs) for name, runs in samples.items()}
    base = summary["sorted_l0"]["add_ms"]
    for case in summary.values():
        case["over_l0"] = case["add_ms"] / base
    result: dict[str, Any] = {
        "args": vars(args),
        "machine": machine(),
        "held_rows": held,
        "runs": samples,
        "summary": summary,
    }
    write("reorder", result)
    fig, (ax,) = figure(1, f"one add of {args.batch_rows} rows, {held} rows held back")
    ax.bar(list(summary), [case["add_ms"] for case in summary.values()])
    ax.set_ylabel("ms (median, buffer full)")
    path = save(fig, "reorder")
    for name, case in summary.items():
        print(
            f"{name:>14}: add {case['add_ms']:.2f} ms ({case['over_l0']:.2f}x sorted_l0), "
            f"slowest {case['add_max_ms']:.1f} ms"
        )
    progress(f"wrote {path}")


if __name__ == "__main__":
    main()
