"""Q1 (section 8.1): wordcount and paircount (b = 3, 10, inf: L, M, H), VSN vs SN.

Both runtimes process the same generated tweets (``stretch.generate.tweets``) at the same
parallelism, in chunks of ``--chunk`` tuples handed in as fast as they are taken:

* VSN: ``stretch.setup(op, p, p)``; every instance reads every tuple from ESG_in and
  updates the keys it owns in the one shared state, through the operators' Numba kernels
  (``stretch.vsn._compiled.aggregates``; f_MK runs once per tuple for all instances). With
  ``--generic`` the instances run the operators' Python functions instead, which isolates
  what sharing (no duplication) alone gives.
* SN: ``stretch.model.sn.SNRuntime(op, p)``; forwardSN sends each tuple to every instance
  that owns one of its keys, each with a private state, all in the calling thread.

Throughput is input tuples / (time from the first chunk to the last output row).
Latency of an output row (ts T, a window end) is the time it was available minus the time
the chunk holding the first input tuple with ts >= T (the one that expires the window)
was handed in; SN's rows are available when ``forward`` of that chunk returns, VSN's when
a consumer thread reads them from the output log. State is measured twice: the peak
number of window sets held (SN: after every chunk; VSN: at every output poll, entries of
the kernel's tables or sets of the shared state), and the tracemalloc peak of a separate
run (Python heap and NumPy bytes, input already in memory; the VSN figure includes the
rows its ingest keeps and the kernel's key table). Target (docs/design.md): paircount H,
VSN >= 2x SN throughput, state bytes <= SN's.
"""

from __future__ import annotations

import argparse
import gc
import threading
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
from _args import positive_float, positive_int, prog
from _util import figure, interleaved, machine, medians, percentiles, progress, save, write

from stretch.generate import tweets
from stretch.model.oplus import END_OF_INPUT, OPlus
from stretch.model.sn import SNRuntime, tuples_of
from stretch.operators.catalog import build
from stretch.vsn import setup
from stretch.vsn._compiled.aggregates import AggregateKernel

CASES = {"wordcount": {}, "paircount L": {"b": 3}, "paircount M": {"b": 10},
         "paircount H": {"b": "inf"}}  # fmt: skip


def run_sn(op: OPlus, table: pa.Table, p: int, chunk: int, sample: bool) -> dict[str, float]:
    """SNRuntime over the chunks; per-chunk timing gives the rows' latency."""
    items = tuples_of(op, [table])[0]
    runtime = SNRuntime(op, p)
    starts, counts, ends, peak_sets = [], [], [], 0
    begin = time.perf_counter()
    for c in range(0, len(items) + 1, chunk):
        starts.append(time.perf_counter())
        before = len(runtime.rows)
        if c < len(items):
            for t in items[c : c + chunk]:
                runtime.forward(t)
        else:
            runtime.watermark(END_OF_INPUT)
        ends.append(time.perf_counter())
        counts.append(len(runtime.rows) - before)
        if sample:
            peak_sets = max(peak_sets, sum(len(g) for i in runtime.instances for g in i.state))
    elapsed = ends[-1] - begin
    lat = np.repeat(np.array(ends) - np.array(starts), counts) * 1e3
    return {"tuples_per_s": len(items) / elapsed, "rows": float(len(runtime.rows)),
            **_lat(lat), "peak_window_sets": float(peak_sets)}  # fmt: skip


def run_vsn(
    op: OPlus, table: pa.Table, p: int, chunk: int, sample: bool, capacity: int, compiled: bool
) -> dict[str, float]:
    """A VSN pipeline fed chunk by chunk while a thread consumes the output log.

    ``capacity`` bounds the gates (flow control), so input waits at ``add`` rather than
    queueing without bound, as SN's synchronous calls do. With ``sample`` the consumer
    also counts the shared state's window sets each time it polls.
    """
    ts = table.column("ts").to_numpy()
    last_ts = ts[np.minimum(np.arange(chunk - 1, len(ts) + chunk - 1, chunk), len(ts) - 1)]
    starts: list[float] = []
    arrivals: list[tuple[float, np.ndarray]] = []
    peak_sets = [0]
    pipeline = setup(op, p, p, capacity=capacity, compiled=compiled)
    kernel = pipeline._pool.compiled  # the state size is measured inside the runtime
    try:

        def consume() -> None:
            offset = 0
            while True:
                if sample:
                    sets = sum(len(g) for g in pipeline._pool.sigma)
                    if isinstance(kernel, AggregateKernel):
                        sets += kernel.window_sets()
                    peak_sets[0] = max(peak_sets[0], sets)
                out, end = pipeline.output(offset, wait_s=0.01)
                if end > offset:
                    arrivals.append((time.perf_counter(), out.column("ts").to_numpy()))
                    pipeline.commit(end)
                    offset = end
                else:
                    done = pipeline.output_status()
                    if done.finished and offset == done.end_offset:
                        return

        consumer = threading.Thread(target=consume)
        begin = time.perf_counter()
        consumer.start()
        for c in range(0, len(ts), chunk):
            starts.append(time.perf_counter())
            pipeline.add(0, table.slice(c, chunk))
        starts.append(time.perf_counter())
        pipeline.close()
        consumer.join()
        assert pipeline.join(60)
    finally:
        pipeline.shutdown()
    elapsed = (arrivals[-1][0] if arrivals else time.perf_counter()) - begin
    start_of = np.array(starts)
    lat = np.concatenate(
        [(t - start_of[np.searchsorted(last_ts, out, "left")]) * 1e3 for t, out in arrivals]
        or [np.empty(0)]
    )
    rows = sum(len(out) for _, out in arrivals)
    return {"tuples_per_s": len(ts) / elapsed, "rows": float(rows), **_lat(lat),
            "peak_window_sets": float(peak_sets[0])}  # fmt: skip


def _lat(ms: np.ndarray) -> dict[str, float]:
    return {f"latency_{k}_ms": v for k, v in percentiles(ms.tolist()).items() if k != "n"}


def heap_peak(run: Callable[[], Any]) -> float:
    """tracemalloc peak (bytes) of ``run`` above what was allocated before it."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    run()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return float(peak - base)


def main() -> None:
    parser = argparse.ArgumentParser(prog=prog(), description=__doc__)
    parser.add_argument("--rows", type=positive_int, default=500, help="tweets")
    parser.add_argument(
        "--rate", type=positive_float, default=25.0, help="tweets per second (event time)"
    )
    parser.add_argument("--ws", type=positive_int, default=4_000, help="window size in ms")
    parser.add_argument("--wa", type=positive_int, default=2_000, help="window advance in ms")
    parser.add_argument("--parallelism", type=positive_int, default=2)
    parser.add_argument(
        "--chunk", type=positive_int, default=25, help="tuples per add()/forward burst"
    )
    parser.add_argument(
        "--capacity", type=positive_int, default=256, help="VSN gate capacity (nodes)"
    )
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--runs", type=positive_int, default=3)
    parser.add_argument(
        "--generic", action="store_true", help="VSN runs the Python functions, not the kernels"
    )
    args = parser.parse_args()
    result: dict[str, Any] = {"args": vars(args), "machine": machine()}
    table = tweets(args.rows, args.rate, seed=1)[0]
    p, chunk, cap, kernels = args.parallelism, args.chunk, args.capacity, not args.generic
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for case in args.cases:
        op = build(case.split()[0], {**CASES[case], "ws": args.ws, "wa": args.wa})
        progress(f"{case}: warm-up")
        run_vsn(op, table.slice(0, 100), p, chunk, False, cap, kernels)
        runs = interleaved(args.runs, {
            "sn": lambda op=op: run_sn(op, table, p, chunk, True),
            "vsn": lambda op=op: run_vsn(op, table, p, chunk, True, cap, kernels),
        })  # fmt: skip
        med = {name: medians(samples) for name, samples in runs.items()}
        med["sn"]["heap_peak_bytes"] = heap_peak(lambda op=op: run_sn(op, table, p, chunk, False))
        med["vsn"]["heap_peak_bytes"] = heap_peak(
            lambda op=op: run_vsn(op, table, p, chunk, False, cap, kernels)
        )
        assert med["sn"]["rows"] == med["vsn"]["rows"], "VSN and SN emitted different row counts"
        summary[case] = med
        result[case] = {"runs": runs, "median": med}
    name = "vsn_vs_sn_generic" if args.generic else "vsn_vs_sn"
    write(name, result)
    for case, med in summary.items():
        sn, vsn = med["sn"], med["vsn"]
        speed = vsn["tuples_per_s"] / sn["tuples_per_s"]
        state = vsn["heap_peak_bytes"] / sn["heap_peak_bytes"]
        sets = vsn["peak_window_sets"] / max(sn["peak_window_sets"], 1)
        print(f"{case:>12}: VSN {vsn['tuples_per_s']:,.0f} t/s vs SN {sn['tuples_per_s']:,.0f} "
              f"t/s = {speed:.2f}x; latency p50 VSN {vsn['latency_p50_ms']:.1f} ms, SN "
              f"{sn['latency_p50_ms']:.1f} ms; heap peak {state:.2f}x SN; window sets "
              f"{sets:.2f}x SN")  # fmt: skip
        if case == "paircount H":
            print(
                f"  target VSN >= 2x SN: {'met' if speed >= 2 else 'MISSED'}; "
                f"state bytes <= SN: {'met' if state <= 1 else 'MISSED'}"
            )
    path = "Python functions" if args.generic else "kernels"
    fig, (ax_t, ax_l, ax_s) = figure(3, f"VSN ({path}) vs SN at parallelism {p}")
    names = list(summary)
    x = np.arange(len(names))
    for offset, rt in ((-0.2, "sn"), (0.2, "vsn")):
        ax_t.bar(x + offset, [summary[n][rt]["tuples_per_s"] for n in names], 0.4, label=rt)
        ax_l.bar(x + offset, [summary[n][rt]["latency_p50_ms"] for n in names], 0.4, label=rt)
        ax_s.bar(x + offset, [summary[n][rt]["heap_peak_bytes"] / 2**20 for n in names], 0.4,
                 label=rt)  # fmt: skip
    for ax, label in ((ax_t, "tuples/s"), (ax_l, "latency p50 (ms)"), (ax_s, "heap peak (MiB)")):
        ax.set_xticks(x, names, rotation=20)
        ax.set_ylabel(label)
        ax.legend()
    progress(f"wrote {save(fig, name)}")


if __name__ == "__main__":
    main()
