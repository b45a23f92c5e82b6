"""Q4 (section 8.4): how long elastic reconfigurations of ScaleJoin take under steady input.

A feeder thread (``_elastic.Feeder``, as Q5-Q6 use) adds both ScaleJoin streams paced in
real time (``--rate`` t/s per stream, every ``--tick-ms``) into the compiled
``scalejoin``; after ``--fill-s`` seconds (the window fills) a controller provisions and
decommissions instances many times, walking every pair of parallelisms in
``1..--max-parallelism`` (Table IV's shape, scaled to this machine), and after each one
requests a no-op reconfiguration (same parallelism and mapping: the same control tuples,
barrier and switch, no gate change) as the baseline.
Durations are call -> completion from the pipeline's reconfiguration records; a switch
completes at the first control tuple of its epoch in the merged stream, so durations
include the backlog ahead of it when the instances are busy, but no wait for more input.
Between reconfigurations the coefficient of variation (CV) of the connected instances'
comparisons and busy time is taken at each parallelism (Fig. 9, right), with their mean
utilisation (busy / wall).
Python hands the GIL over every ``sys.getswitchinterval()`` (5 ms by default), which
bounds how fast a woken instance gets to run while other threads execute Python;
``--switch-interval-ms`` shows its effect. Target (docs/design.md): p99 <= 5 ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from typing import Any

from _args import positive_float, positive_int, prog
from _elastic import Feeder
from _util import figure, machine, percentiles, progress, save, write

from stretch.generate import scalejoin
from stretch.operators.catalog import build
from stretch.vsn import Pipeline, setup

TARGET_P99_MS = 5.0


def schedule(n: int, steps: int) -> list[int]:
    """Parallelisms to visit from 1: every ordered pair (a, b) of ``1..n``, cycled."""
    walk = [1]
    pairs = [(a, b) for a in range(1, n + 1) for b in range(1, n + 1) if a != b]
    while len(walk) <= steps:
        for a, b in pairs:
            for p in (a, b):
                if p != walk[-1]:
                    walk.append(p)
    return walk[1 : steps + 1]


def _load(pipeline: Pipeline) -> list[tuple[float, float]]:
    """(comparisons, busy seconds) per instance, cumulative."""
    return [(i.comparisons, i.busy_s) for i in pipeline.status().instances]


def _cv(values: list[float]) -> float:
    mean = statistics.fmean(values)
    return statistics.pstdev(values) / mean * 100 if mean > 0 and len(values) > 1 else 0.0


def one_run(args: argparse.Namespace, steps: int, fill_s: float) -> dict[str, Any]:
    """One pipeline: fill the window, then ``steps`` real + ``steps`` no-op reconfigurations."""
    # Input for the whole run even if every reconfiguration took its 5 s limit.
    rows = int(args.rate * (fill_s + steps * 2 * (args.interval_ms / 1e3 + 5) + 5))
    tables = scalejoin(rows, args.rate, seed=1)
    op = build("scalejoin", {"ws": args.ws, "keys": max(args.keys, args.max_parallelism)})
    pipeline = setup(op, 1, args.max_parallelism)
    feeder = Feeder(pipeline, tables, time.perf_counter(), args.tick_ms / 1e3)
    kinds: dict[int, str] = {}
    cv: dict[int, list[tuple[float, float, float]]] = defaultdict(list)
    try:
        feeder.start()
        time.sleep(fill_s)
        current = 1
        for target in schedule(args.max_parallelism, steps):
            for p, kind in (
                (target, "provision" if target > current else "decommission"),
                (target, "noop"),
            ):
                epoch = pipeline.reconfigure(parallelism=p)
                kinds[epoch] = kind
                if not pipeline.wait_epoch(epoch, 5.0):
                    msg = f"epoch {epoch} did not complete in 5 s"
                    raise RuntimeError(msg)
                before = _load(pipeline)
                time.sleep(args.interval_ms / 1e3)
                after = _load(pipeline)
                pairs = zip(after[:p], before[:p], strict=True)
                delta = [(a[0] - b[0], a[1] - b[1]) for a, b in pairs]
                busy = statistics.fmean(d[1] for d in delta) / (args.interval_ms / 1e3)
                cv[p].append((_cv([d[0] for d in delta]), _cv([d[1] for d in delta]), busy))
            current = target
        records = pipeline.reconfigurations()
    finally:
        feeder.stop.set()
        feeder.join()
        pipeline.shutdown()
    if feeder.error is not None:
        raise feeder.error
    return {
        "reconfigurations": [
            {
                "epoch": r.epoch,
                "kind": kinds[r.epoch],
                "from": r.from_parallelism,
                "to": r.to_parallelism,
                "duration_ms": r.duration_ms,
            }
            for r in records
        ],
        "cv_percent": {p: values for p, values in cv.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog=prog(), description=__doc__)
    parser.add_argument("--max-parallelism", type=positive_int, default=2, help="n")
    parser.add_argument("--rate", type=positive_float, default=2000.0, help="t/s per stream")
    parser.add_argument("--ws", type=positive_int, default=5000, help="window size in ms")
    parser.add_argument("--keys", type=positive_int, default=16, help="K of ScaleJoin (>= n)")
    parser.add_argument("--tick-ms", type=positive_float, default=1.0, help="feeder period")
    parser.add_argument(
        "--fill-s", type=positive_float, default=3.0, help="input before reconfiguring"
    )
    parser.add_argument("--steps", type=positive_int, default=40, help="reconfigurations per run")
    parser.add_argument("--interval-ms", type=positive_float, default=60.0, help="pause after each")
    parser.add_argument("--runs", type=positive_int, default=3)
    parser.add_argument(
        "--switch-interval-ms",
        type=positive_float,
        default=None,
        help="sys.setswitchinterval for the run (default: Python's, 5 ms)",
    )
    args = parser.parse_args()
    if args.switch_interval_ms is not None:
        sys.setswitchinterval(args.switch_interval_ms / 1e3)
    result: dict[str, Any] = {"args": vars(args), "machine": machine()}
    progress("warm-up (JIT, a short run)")
    one_run(args, 2, 0.3)
    runs = []
    for run in range(args.runs):
        runs.append(one_run(args, args.steps, args.fill_s))
        done = runs[-1]["reconfigurations"]
        real = [r["duration_ms"] for r in done if r["kind"] != "noop"]
        progress(
            f"run {run + 1}/{args.runs}: {len(done)} reconfigurations, "
            f"median {statistics.median(real):.2f} ms, max {max(real):.2f} ms"
        )
    result["runs"] = runs
    every = [r for run in runs for r in run["reconfigurations"]]
    summary = {
        kind: percentiles([r["duration_ms"] for r in every if r["kind"] == kind])
        for kind in ("provision", "decommission", "noop")
    }
    summary["all_real"] = percentiles([r["duration_ms"] for r in every if r["kind"] != "noop"])
    cv: dict[int, list[tuple[float, float, float]]] = defaultdict(list)
    for run in runs:
        for p, values in run["cv_percent"].items():
            cv[p].extend(values)
    result["durations_ms"] = summary
    result["cv_percent_median"] = {
        p: {
            "comparisons": statistics.median(v[0] for v in values),
            "busy": statistics.median(v[1] for v in values),
            "utilisation": statistics.median(v[2] for v in values),
        }
        for p, values in sorted(cv.items())
    }
    base = summary["noop"]["p99"]
    result["p99_over_noop"] = summary["all_real"]["p99"] / base
    write("reconfig", result)
    for kind, s in summary.items():
        print(
            f"{kind:>12}: n={s['n']} p50 {s['p50']:.2f} ms  p99 {s['p99']:.2f} ms  "
            f"max {s['max']:.2f} ms"
        )
    met = "met" if summary["all_real"]["p99"] <= TARGET_P99_MS else "MISSED"
    print(
        f"provision+decommission p99 = {result['p99_over_noop']:.2f}x the no-op p99; "
        f"target p99 <= {TARGET_P99_MS} ms {met}"
    )
    for p, c in result["cv_percent_median"].items():
        print(
            f"parallelism {p}: CV comparisons {c['comparisons']:.1f}%, CV busy "
            f"{c['busy']:.1f}%; instances busy {c['utilisation']:.0%} of the time"
        )
    fig, (ax_d, ax_c) = figure(2, "ScaleJoin reconfigurations under steady input")
    for kind, marker in (("provision", "o"), ("decommission", "v"), ("noop", ".")):
        pts = [
            (r["from"] + (0.1 if kind == "noop" else 0), r["duration_ms"])
            for r in every
            if r["kind"] == kind
        ]
        ax_d.scatter(*zip(*pts, strict=True), marker=marker, label=kind, alpha=0.6)
    ax_d.axhline(TARGET_P99_MS, color="red", linestyle="--", label="target p99")
    ax_d.set_xlabel("parallelism before")
    ax_d.set_ylabel("call -> completion (ms)")
    ax_d.legend()
    ps = list(result["cv_percent_median"])
    ax_c.bar(
        [p - 0.2 for p in ps],
        [result["cv_percent_median"][p]["comparisons"] for p in ps],
        width=0.4,
        label="comparisons",
    )
    ax_c.bar(
        [p + 0.2 for p in ps],
        [result["cv_percent_median"][p]["busy"] for p in ps],
        width=0.4,
        label="busy time",
    )
    ax_c.set_xticks(ps)
    ax_d.set_xticks(range(1, args.max_parallelism + 1))
    ax_c.set_xlabel("parallelism")
    ax_c.set_ylabel("CV of instance load (%)")
    ax_c.legend()
    progress(f"wrote {save(fig, 'reconfig')}")


if __name__ == "__main__":
    main()
