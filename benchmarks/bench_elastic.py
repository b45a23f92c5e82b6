"""Q4-Q6 (sections 8.4-8.6): ScaleJoin and hedge autoscaled by controller/, against static runs.

Scaled to this machine: max parallelism n = the cores, and Q4 also at 2x the cores
(oversubscribed, marked so). Rates come from a capacity calibrated in the same run: C(m),
the comparisons one of m threads does per busy second with full windows. With both streams
at r t/s a join does about 2 r^2 WS comparisons/s, so m threads sustain
r_max(m) = sqrt(m C(m) / (2 WS)).

* q4 (Fig. 9-10): m threads at 70% of r_max(m); once the window filled, the threshold policy
  is switched on and the rate goes to 120% (provision) or 30% (decommission). Reported:
  each reconfiguration's time (call -> completion, with the phases the script can see) and
  the CV of the instances' load after it; static runs at the start and final parallelism.
* q5 (Fig. 11-12): phases of random constant rates (10-90% of r_max(n), 1.5-3 WS long,
  seeded), the model policy from 1 thread, against static 1 and static n threads.
  Targets: mean latency <= 20 ms, thread-seconds <= 0.8x static n, output == run_sn.
* q6 (Fig. 13): hedge over a generated NYSE-like trading period (bursty; the paper's 0 to
  8,000 t/s halved, as every trade enters twice: its one stream feeds both sources), WS
  scaled so that the peak needs about 80% of n threads; the model policy, against static 1
  and static n.

Input is paced in real time (event time = wall time). Latency is section 8's: when an output
row was read minus when the newest input tuple contributing to it was added. Absolute
figures depend on how busy the machine is (the JSON records the load average).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from _args import non_negative_int, positive_float, positive_int, prog
from _elastic import Run, latency_stats, measured_run
from _elastic_load import calibrate, cv_percent, phased_scalejoin, trading_day, warm_up
from _elastic_plots import plot_autoscaled, plot_q4
from _util import RESULTS, machine, percentiles, progress, save, write

from stretch.controller import PolicyConfig
from stretch.model.oplus import OPlus
from stretch.model.sn import run_sn
from stretch.operators.catalog import build

KEYS = max(16, 2 * len(os.sched_getaffinity(0)))
"""K of ScaleJoin and hedge: the catalog's 16, or the largest pool (Q4 runs 2x the cores)."""

TARGET_LATENCY_MS = 20.0
TARGET_THREAD_SECONDS = 0.8
SETTLE_S = 0.5
"""Load after a reconfiguration is measured from this long after its completion."""


class Capacities:
    """C(m) per operator, WS and m, calibrated once per run of the script (after a warm-up)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.values: dict[str, float] = {}
        self.warm: set[str] = set()

    def scalejoin(self, m: int, ws_ms: int) -> float:
        # Enough comparisons for the vectorized kernel to stay busy >= MIN_BUSY_S (at
        # 4000 t/s and the quick WS it did them in about 0.02 s)
        rate = 16_000.0
        tables = phased_scalejoin([(ws_ms / 1e3 + 1.5, rate)], seed=99)
        return self._get(f"scalejoin ws={ws_ms} m={m}", scalejoin_op(ws_ms), tables, m, ws_ms)

    def hedge(self, m: int, ws_ms: int) -> float:
        tables = trading_day(ws_ms / 1e3 + 1.5, 4000.0, 8000.0, seed=99)
        return self._get(f"hedge ws={ws_ms} m={m}", hedge_op(ws_ms), tables, m, ws_ms)

    def _get(self, key: str, op: OPlus, tables: list[pa.Table], m: int, ws_ms: int) -> float:
        if key not in self.values:
            if op.name not in self.warm:
                progress(f"warm-up: {op.name} with a provisioning and a decommissioning")
                warm_up(op, [t.slice(0, 3000) for t in tables], 2 * self.args.max_parallelism)
                self.warm.add(op.name)
            self.values[key] = calibrate(op, tables, m, ws_ms, ws_ms + 1000)
            progress(f"calibrated {key}: {self.values[key]:,.0f} comparisons per busy second")
        return self.values[key]


# Q4-Q6 are the paper's experiments: they measure the nested-loop join it describes
# (the band index of issue 22 is off; docs/performance.md has its own figures).
def scalejoin_op(ws_ms: int) -> OPlus:
    return build("scalejoin", {"ws": ws_ms, "keys": KEYS, "index": "off"})


def hedge_op(ws_ms: int) -> OPlus:
    return build("hedge", {"ws": ws_ms, "keys": KEYS, "index": "off"})


def r_max(m: int, capacity: float, ws_ms: int) -> float:
    """t/s per stream that m threads sustain: 2 r^2 WS comparisons/s = m C."""
    return math.sqrt(m * capacity / (2 * ws_ms / 1e3))


def policy(name: str, args: argparse.Namespace, n: int) -> PolicyConfig:
    return replace(PolicyConfig.defaults(name), period_ms=args.period_ms, max_parallelism=n)


# -- Q4 ------------------------------------------------------------------------------------


def q4_cases(cores: int, quick: bool) -> list[tuple[int, int, str]]:
    """(n, starting m, action): provision from n/2 and decommission from n, at n = cores
    and n = 2x cores (oversubscribed)."""
    cases = [
        (n, start, action)
        for n in (cores, 2 * cores)
        for start, action in ((max(n // 2, 1), "provision"), (n, "decommission"))
    ]
    return cases[:1] if quick else cases


def load_after(run: Run, reconfiguration: dict[str, Any], until_s: float) -> dict[str, float]:
    """CV (%) of the connected instances' busy time and comparisons after a switch."""
    m = reconfiguration["to"]
    begin = reconfiguration["completed_s"] + SETTLE_S
    window = [s for s in run.samples if begin <= s.t_s <= until_s]
    if len(window) < 2:
        return {"cv_busy": float("nan"), "cv_comparisons": float("nan"), "seconds": 0.0}
    a, b = window[0], window[-1]
    busy = [b.busy_s[j] - a.busy_s[j] for j in range(m)]
    work = [b.work[j] - a.work[j] for j in range(m)]
    return {
        "cv_busy": cv_percent(busy),
        "cv_comparisons": cv_percent(work),
        "utilisation": sum(busy) / m / (b.t_s - a.t_s),
        "seconds": b.t_s - a.t_s,
    }


def after_switch(run: Run, switch_s: float) -> dict[str, Any]:
    """Throughput and latency of a run from the rate switch to the end of its input."""
    window = [s for s in run.samples if switch_s <= s.t_s <= run.feed_s]
    a, b = window[0], window[-1]
    after = run.out_ts >= switch_s * 1e3
    return {
        "throughput": (sum(b.work) - sum(a.work)) / (b.t_s - a.t_s),
        "latency_before_ms": latency_stats(run.latency_ms[~after]),
        "latency_after_ms": latency_stats(run.latency_ms[after]),
        "thread_seconds": run.thread_s,
        "final_parallelism": run.final_parallelism(),
    }


def q4(args: argparse.Namespace, capacities: Capacities) -> tuple[dict[str, Any], Any]:
    ws_ms, cores = args.ws_ms, args.max_parallelism
    fill_s = ws_ms / 1e3 + args.q4_settle_s
    cases = []
    for n, start, action in q4_cases(cores, args.quick):
        capacity = capacities.scalejoin(start, ws_ms)
        rate = r_max(start, capacity, ws_ms)
        after = 1.2 if action == "provision" else 0.3
        tables = phased_scalejoin(
            [(fill_s, 0.7 * rate), (args.q4_after_s, after * rate)], args.seed
        )
        name = f"n={n} {action} from {start}" + (" (oversubscribed)" if n > cores else "")
        progress(f"q4 {name}: {0.7 * rate:,.0f} -> {after * rate:,.0f} t/s per stream")
        elastic = measured_run(
            scalejoin_op(ws_ms),
            tables,
            start,
            n,
            label="elastic",
            tick_s=args.tick_ms / 1e3,
            policy=policy("threshold", args, n),
            policy_from_s=fill_s,
        )
        runs = [elastic] + [
            measured_run(
                scalejoin_op(ws_ms), tables, m, n, label=f"static {m}", tick_s=args.tick_ms / 1e3
            )
            for m in sorted({start, elastic.final_parallelism()})
        ]
        switches = [r for r in elastic.reconfigurations if r["completed_s"] is not None]
        for i, r in enumerate(switches):
            end = switches[i + 1]["requested_s"] if i + 1 < len(switches) else elastic.feed_s
            r["load_after"] = load_after(elastic, r, end)
        cases.append(
            {
                "name": name,
                "n": n,
                "oversubscribed": n > cores,
                "start": start,
                "action": action,
                "capacity_per_thread": capacity,
                "r_max": rate,
                "rates": [0.7 * rate, after * rate],
                "switch_s": fill_s,
                "reconfigurations": switches,
                "runs": {run.label: after_switch(run, fill_s) for run in runs},
                "elastic": elastic.summary(),
                "static": [run.summary() for run in runs[1:]],
            }
        )
        for run in runs:
            shown = cases[-1]["runs"][run.label]
            progress(
                f"  {run.label}: {shown['throughput']:,.0f} comparisons/s after the switch, "
                f"latency mean {shown['latency_after_ms']['mean']:.1f} ms"
            )
    summary = {}
    for label, over in (("cores", False), ("oversubscribed", True)):
        chosen = [r for c in cases if c["oversubscribed"] == over for r in c["reconfigurations"]]
        summary[label] = {
            "duration_ms": percentiles([r["duration_ms"] for r in chosen]),
            "cv_busy_after_max": max((r["load_after"]["cv_busy"] for r in chosen), default=None),
        }
    result = {"cases": cases, "summary": summary}
    return result, plot_q4(result, cores)


def print_q4(result: dict[str, Any]) -> None:
    print("Q4: reconfigurations under the threshold policy (ScaleJoin)")
    for case in result["cases"]:
        print(f"  {case['name']}: rate {case['rates'][0]:,.0f} -> {case['rates'][1]:,.0f} t/s")
        for r in case["reconfigurations"]:
            phases = ", ".join(f"{k} {v:.1f}" for k, v in r["phases_ms"].items() if v is not None)
            load = r["load_after"]
            print(
                f"    {r['from']} -> {r['to']}: {r['duration_ms']:.1f} ms ({phases}); CV after: "
                f"busy {load['cv_busy']:.1f}%, comparisons {load['cv_comparisons']:.1f}%"
            )
        for label, run in case["runs"].items():
            latency = run["latency_after_ms"]
            print(
                f"    {label:>9}: {run['throughput'] / 1e6:8.1f} M comparisons/s, latency "
                f"mean {latency['mean']:.1f} ms p99 {latency['p99']:.1f} ms, "
                f"{run['thread_seconds']:.1f} thread-s"
            )
    for label, s in result["summary"].items():
        d = s["duration_ms"]
        print(
            f"  {label}: n={d['n']} reconfigurations p50 {d['p50']:.1f} ms, p99 {d['p99']:.1f} ms, "
            f"max {d['max']:.1f} ms; CV of busy time after <= {s['cv_busy_after_max'] or 0:.1f}%"
        )


# -- Q5 and Q6 -------------------------------------------------------------------------------


def rate_phases(rng: np.random.Generator, seconds: float, ws_s: float, top: float) -> list:
    """Phases ``(seconds, rate)`` 1.5-3 WS long at rates uniform in 10-90% of ``top``."""
    phases: list[tuple[float, float]] = []
    t = 0.0
    while t < seconds - 1e-9:
        length = min(rng.uniform(1.5 * ws_s, 3 * ws_s), seconds - t)
        phases.append((length, rng.uniform(0.1, 0.9) * top))
        t += length
    return phases


def sn_check(
    op: OPlus, tables: list[pa.Table], output: pa.Table, ws_ms: int, budget: float
) -> dict:
    """Compare the output with ``run_sn`` over the longest prefix of the input whose join
    costs at most ``budget`` comparisons (run_sn is pure Python: ~1M comparisons/s)."""
    ts = tables[0].column("ts").to_numpy()
    cost = np.cumsum(2 * (np.arange(len(ts)) - np.searchsorted(ts, ts - ws_ms, "left")))
    last = max(int(np.searchsorted(cost, budget, "right")) - 1, 0)
    rows = int(np.searchsorted(ts, ts[last], "right"))
    started = time.perf_counter()
    expected = run_sn(op, [t.slice(0, rows) for t in tables])
    got = output.slice(0, int(np.searchsorted(output.column("ts").to_numpy(), ts[last], "right")))
    return {
        "input_rows": rows,
        "whole_input": rows == len(ts),
        "until_ts_ms": int(ts[last]),
        "output_rows": expected.num_rows,
        "identical": got.equals(expected),
        "seconds": time.perf_counter() - started,
    }


def same_output(a: Run, b: Run) -> bool:
    if a.output is None or b.output is None:
        return a.output is None and b.output is None
    return a.output.equals(b.output)


def autoscaled(
    name: str,
    make_op: Callable[[], OPlus],
    tables: list[pa.Table],
    args: argparse.Namespace,
    ws_ms: int,
) -> tuple[dict[str, Any], list[Run]]:
    """The model policy from 1 thread against static 1 and static n, on the same input."""
    n, tick_s = args.max_parallelism, args.tick_ms / 1e3
    progress(f"{name}: elastic (model policy)")
    elastic = measured_run(
        make_op(),
        tables,
        1,
        n,
        label="elastic",
        tick_s=tick_s,
        policy=policy("model", args, n),
        keep_output=True,
    )
    statics = []
    for m in (1, n):
        progress(f"{name}: static {m}")
        statics.append(
            measured_run(
                make_op(), tables, m, n, label=f"static {m}", tick_s=tick_s, keep_output=True
            )
        )
    progress(f"{name}: run_sn over a prefix of the input")
    durations = [r["duration_ms"] for r in elastic.reconfigurations if r["duration_ms"] is not None]
    result = {
        "runs": [run.summary() for run in (elastic, *statics)],
        "reconfiguration_ms": percentiles(durations),
        "thread_seconds_ratio": elastic.thread_s / statics[-1].thread_s,
        "latency_mean_ms": float(elastic.latency_ms.mean()) if len(elastic.latency_ms) else None,
        "output": {
            "identical_to_static": all(same_output(elastic, s) for s in statics),
            "run_sn": sn_check(make_op(), tables, elastic.output, ws_ms, args.check_comparisons)
            if elastic.output is not None
            else None,
        },
    }
    return result, [elastic, *statics]


def q5(args: argparse.Namespace, capacities: Capacities) -> tuple[dict[str, Any], Any]:
    n, ws_ms = args.max_parallelism, args.ws_ms
    capacity = capacities.scalejoin(n, ws_ms)
    top = r_max(n, capacity, ws_ms)
    phases = rate_phases(np.random.default_rng(args.seed), args.duration_s, ws_ms / 1e3, top)
    tables = phased_scalejoin(phases, args.seed)
    result, runs = autoscaled("q5", lambda: scalejoin_op(ws_ms), tables, args, ws_ms)
    result |= {"ws_ms": ws_ms, "capacity_per_thread": capacity, "r_max": top, "phases": phases}
    result["targets"] = targets(result)
    return result, plot_autoscaled("Q5", result, runs)


def q6(args: argparse.Namespace, capacities: Capacities) -> tuple[dict[str, Any], Any]:
    n = args.max_parallelism
    capacity = capacities.hedge(n, 2000)
    ws_ms = args.q6_ws_ms or int(0.8 * n * capacity / (2 * args.q6_peak_rate**2) * 1e3)
    tables = trading_day(args.duration_s, args.q6_mean_rate, args.q6_peak_rate, args.q6_seed)
    progress(f"q6: WS {ws_ms} ms, {tables[0].num_rows:,} trades")
    result, runs = autoscaled("q6", lambda: hedge_op(ws_ms), tables, args, ws_ms)
    result |= {"ws_ms": ws_ms, "capacity_per_thread": capacity, "peak_rate": args.q6_peak_rate}
    return result, plot_autoscaled("Q6", result, runs)


def targets(result: dict[str, Any]) -> dict[str, Any]:
    return {
        "latency_mean_le_20ms": (result["latency_mean_ms"] or 0) <= TARGET_LATENCY_MS,
        "thread_seconds_le_0.8x_static_max": result["thread_seconds_ratio"]
        <= TARGET_THREAD_SECONDS,
        "output_identical_to_run_sn": bool(
            result["output"]["run_sn"] and result["output"]["run_sn"]["identical"]
        ),
    }


def print_autoscaled(name: str, result: dict[str, Any]) -> None:
    print(f"{name}: model policy against static runs (WS {result['ws_ms']} ms)")
    for run in result["runs"]:
        latency = run["latency_ms"]
        print(
            f"  {run['label']:>9}: {run['thread_seconds']:7.1f} thread-s, latency mean "
            f"{latency['mean']:.1f} ms p50 {latency['p50']:.1f} p99 {latency['p99']:.1f} "
            f"max {latency['max']:.0f} ms, {len(run['reconfigurations'])} reconfigurations"
        )
    d, out = result["reconfiguration_ms"], result["output"]
    sn = out["run_sn"] or {}
    print(
        f"  reconfigurations p50 {d['p50']:.1f} ms, p99 {d['p99']:.1f} ms, max {d['max']:.1f} ms; "
        f"thread-seconds {result['thread_seconds_ratio']:.2f}x static max"
    )
    print(
        f"  output identical to the static runs: {out['identical_to_static']}; to run_sn over "
        f"{sn.get('input_rows', 0):,} input rows per source (whole input: "
        f"{sn.get('whole_input')}): {sn.get('identical')}"
    )
    for target, met in result.get("targets", {}).items():
        print(f"  target {target}: {'met' if met else 'MISSED'}")


EXPERIMENTS = {"q4": q4, "q5": q5, "q6": q6}


# -- main ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        prog=prog(), description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--experiment", choices=("q4", "q5", "q6", "all"), default="all")
    parser.add_argument("--quick", action="store_true", help="a few seconds per experiment")
    parser.add_argument("--output", type=Path, default=RESULTS, help="directory for JSON/PNG")
    cores = len(os.sched_getaffinity(0))
    parser.add_argument("--max-parallelism", type=positive_int, default=cores, help="n (the cores)")
    parser.add_argument(
        "--ws-ms",
        type=positive_int,
        default=None,
        help="ScaleJoin WS for q4 and q5 (8000; --quick 2000)",
    )
    parser.add_argument(
        "--q4-settle-s", type=positive_float, default=2.0, help="q4: after the window fills"
    )
    parser.add_argument(
        "--q4-after-s", type=positive_float, default=8.0, help="q4: after the rate switch"
    )
    parser.add_argument(
        "--duration-s", type=positive_float, default=90.0, help="q5 and q6 input length"
    )
    parser.add_argument(
        "--q6-ws-ms", type=positive_int, default=None, help="hedge WS (default: scaled)"
    )
    parser.add_argument(
        "--q6-mean-rate", type=positive_float, default=1250.0, help="q6 mean trades/s"
    )
    parser.add_argument(
        "--q6-peak-rate", type=positive_float, default=4000.0, help="q6 peak trades/s"
    )
    parser.add_argument("--q6-seed", type=non_negative_int, default=3)
    parser.add_argument("--period-ms", type=positive_int, default=500, help="autoscaler period")
    parser.add_argument("--tick-ms", type=positive_float, default=2.0, help="feeder period")
    parser.add_argument("--seed", type=non_negative_int, default=1)
    parser.add_argument(
        "--check-comparisons",
        type=positive_float,
        default=2e7,
        help="run_sn budget: the input prefix checked costs at most this many comparisons",
    )
    args = parser.parse_args()
    if args.quick:  # a smoke run: the windows do not fill, nothing is worth reading
        args.q4_settle_s, args.q4_after_s = 0.3, 1.2
        args.duration_s, args.check_comparisons = 2.0, 1e6
    if args.ws_ms is None:
        args.ws_ms = 2000 if args.quick else 8000
    capacities = Capacities(args)
    experiments = ("q4", "q5", "q6") if args.experiment == "all" else (args.experiment,)
    for name in experiments:
        started = time.perf_counter()
        result, fig = EXPERIMENTS[name](args, capacities)
        result = {
            "experiment": name,
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "machine": machine(),
            "note": f"measured on {machine()['cpus']} cores (machine.load_average_1m says how "
            "busy they were); absolute figures depend on the machine",
            "calibration": capacities.values,
            **result,
            "seconds": time.perf_counter() - started,
        }
        progress(f"wrote {write(f'elastic_{name}', result, args.output)}")
        if name == "q4":
            print_q4(result)
        else:
            print_autoscaled(name.upper(), result)
        progress(f"wrote {save(fig, f'elastic_{name}', args.output)}")


if __name__ == "__main__":
    main()
