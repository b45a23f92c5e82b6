"""Q2 (section 8.2): Operator 15 (forward, I = 2) through ESG_in and ESG_out, in process.

Two timestamp-sorted streams of ``(ts, x, y)`` are added chunk by chunk, alternating
sources, as fast as the pipeline takes them (flow control: the gates' capacity), while a
consumer thread reads the output log. Throughput is input tuples / (last output row read
- first add); latency of a row is the time the consumer read it minus the time the add
of the chunk holding its input tuple started. Baseline, in the same run: the Elastic
ScaleGate alone (the same chunks added by the same thread, one reader thread getting
ready batches, no operator). Target (docs/design.md): >= 1,000,000 t/s.

End to end, in the same run: ``stretch replay forward`` as a whole process over two
Parquet files of ``--replay-rows`` rows each (its own log line gives the time of the run
itself, from the first add until the last output piece is written, writing overlapping
the run; the process adds reading and imports), against the bare baseline of the same
merge in memory: a NumPy lexsort of the two streams' rows by (ts, source, seq) and a take
of their columns.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _args import positive_float, positive_int, prog
from _util import figure, interleaved, machine, medians, percentiles, progress, save, write

from scalegate import DATA, TS_MAX, ElasticScaleGate
from stretch.generate import scalejoin
from stretch.operators.catalog import build
from stretch.vsn import setup

TARGET_TPS = 1_000_000
STRETCH = str(Path(sys.executable).parent / "stretch")


def streams(rows: int, rate: float) -> list[pa.Table]:
    """Two forward inputs ``(ts, x, y)`` with identical ts columns."""
    return [scalejoin(rows, rate, seed=s)[0] for s in (1, 2)]


def _latencies(
    arrivals: list[tuple[float, np.ndarray, np.ndarray]], added: np.ndarray, chunk: int
) -> dict[str, float]:
    """Latency percentiles (ms) from (read time, source, seq) batches and add times."""
    lat = [
        (t - added[source, seq // chunk]) * 1e3
        for t, sources, seqs in arrivals
        for source, seq in zip(sources.tolist(), seqs.tolist(), strict=True)
    ]
    return {f"latency_{k}_ms": v for k, v in percentiles(lat).items() if k != "n"}


def run_gate(tables: list[pa.Table], chunk: int) -> dict[str, float]:
    """The baseline: add + get through one ESG, no operator."""
    rows = tables[0].num_rows
    ts = [t.column("ts").to_numpy() for t in tables]
    gate = ElasticScaleGate(sources=[0, 1], readers=[0], max_sources=2, max_readers=1)
    n_chunks = -(-rows // chunk)
    added = np.zeros((2, n_chunks))
    arrivals: list[tuple[float, np.ndarray, np.ndarray]] = []
    done = threading.Event()

    def read() -> None:
        while True:
            batch = gate.get_ready_batch(0, 1 << 14)
            if len(batch) == 0:
                time.sleep(20e-6)
                continue
            data = batch.kind == DATA
            arrivals.append((time.perf_counter(), batch.source[data], batch.seq[data]))
            if batch.ts[-1] == TS_MAX:
                done.set()
                return

    reader = threading.Thread(target=read)
    start = time.perf_counter()
    reader.start()
    for c in range(n_chunks):
        for s in (0, 1):
            added[s, c] = time.perf_counter()
            part = ts[s][c * chunk : (c + 1) * chunk]
            gate.add_batch(s, part, np.arange(c * chunk, c * chunk + len(part)))
    for s in (0, 1):
        gate.add_watermark(s, TS_MAX)
    reader.join()
    elapsed = arrivals[-1][0] - start
    return {"tuples_per_s": 2 * rows / elapsed, **_latencies(arrivals, added, chunk)}


def run_forward(tables: list[pa.Table], chunk: int, m: int, keys: int) -> dict[str, float]:
    """Operator 15 at parallelism m: ESG_in -> m instances -> ESG_out -> output log."""
    rows = tables[0].num_rows
    op = build("forward", {"columns": "x:int,y:float", "keys": keys, "inputs": 2})
    ts = tables[0].column("ts").to_numpy()
    # The log's order is (ts, source, seq): the k-th output row is input (source, seq).
    order = np.lexsort(
        (np.r_[np.arange(rows), np.arange(rows)], np.repeat([0, 1], rows), np.r_[ts, ts])
    )
    out_source, out_seq = order // rows, order % rows
    n_chunks = -(-rows // chunk)
    added = np.zeros((2, n_chunks))
    arrivals: list[tuple[float, np.ndarray, np.ndarray]] = []
    pipeline = setup(op, m, m)
    try:

        def consume() -> None:
            offset = 0
            while offset < 2 * rows:
                _, end = pipeline.output(offset, wait_s=0.01)
                if end > offset:
                    now = time.perf_counter()
                    arrivals.append((now, out_source[offset:end], out_seq[offset:end]))
                    pipeline.commit(end)
                    offset = end

        consumer = threading.Thread(target=consume)
        start = time.perf_counter()
        consumer.start()
        for c in range(n_chunks):
            for s in (0, 1):
                added[s, c] = time.perf_counter()
                pipeline.add(s, tables[s].slice(c * chunk, chunk))
        pipeline.close()
        consumer.join()
        elapsed = arrivals[-1][0] - start
        assert pipeline.join(60)
    finally:
        pipeline.shutdown()
    return {"tuples_per_s": 2 * rows / elapsed, **_latencies(arrivals, added, chunk)}


def lexsort(tables: list[pa.Table]) -> dict[str, float]:
    """The bare merge: rows of both streams by (ts, source, seq), columns taken."""
    cpu = time.process_time()
    start = time.perf_counter()
    both = pa.concat_tables(tables)
    rows = [t.num_rows for t in tables]
    ts = both.column("ts").to_numpy()
    source = np.repeat(np.arange(len(rows)), rows)
    order = np.lexsort((np.arange(len(ts)), source, ts))
    merged = both.take(pa.array(order))
    elapsed = time.perf_counter() - start
    assert merged.num_rows == len(ts)
    return {
        "tuples_per_s": len(ts) / elapsed,
        "seconds": elapsed,
        "cpu_s": time.process_time() - cpu,
    }


def replay(files: list[str], m: int, rows: int) -> dict[str, float]:
    """``stretch replay forward`` over ``files`` as a whole process."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [STRETCH, "-v", "replay", "forward", "--parallelism", str(m), "--sorted"]
        command += [x for f in files for x in ("--input", f)]
        command += ["--output", os.path.join(tmp, "out.parquet")]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    found = re.search(r"rows out in ([0-9.]+) s", done.stderr)
    assert found, done.stderr
    run_s = float(found.group(1))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "tuples_per_s": rows / run_s,
        "run_s": run_s,
        "process_tuples_per_s": rows / elapsed,
        "process_s": elapsed,
        "cpu_s": cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog=prog(), description=__doc__)
    parser.add_argument("--rows", type=positive_int, default=100_000, help="tuples per stream")
    parser.add_argument(
        "--rate", type=positive_float, default=100_000.0, help="event-time t/s/stream"
    )
    parser.add_argument("--chunk", type=positive_int, default=4096, help="rows per add() call")
    parser.add_argument("--keys", type=positive_int, default=16, help="keys of forward")
    parser.add_argument("--parallelism", type=positive_int, nargs="+", default=[1, 2])
    parser.add_argument("--replay-rows", type=positive_int, default=1_500_000, help="rows per file")
    parser.add_argument("--runs", type=positive_int, default=3)
    args = parser.parse_args()
    result: dict[str, object] = {"args": vars(args), "machine": machine()}
    tables = streams(args.rows, args.rate)
    big = streams(args.replay_rows, args.rate)
    warm = streams(5000, args.rate)
    progress("warm-up (JIT)")
    run_gate(warm, args.chunk)
    for m in args.parallelism:
        run_forward(warm, args.chunk, m, args.keys)
    with tempfile.TemporaryDirectory() as tmp:
        files = [os.path.join(tmp, f"input_{i}.parquet") for i in range(len(big))]
        for table, path in zip(big, files, strict=True):
            pq.write_table(table, path)
        replay(files, 1, 2 * args.replay_rows)
        cases: dict[str, Callable[[], dict[str, float]]] = {
            "esg": partial(run_gate, tables, args.chunk)
        }
        for m in args.parallelism:
            cases[f"p{m}"] = partial(run_forward, tables, args.chunk, m, args.keys)
        cases["lexsort"] = partial(lexsort, big)
        for m in args.parallelism:
            cases[f"replay_p{m}"] = partial(replay, files, m, 2 * args.replay_rows)
        runs = interleaved(args.runs, cases)
    summary = {name: medians(samples) for name, samples in runs.items()}
    result["runs"] = runs
    result["median"] = summary
    base = summary["esg"]["tuples_per_s"]
    print(f"ESG alone: {base:,.0f} t/s, latency p50 {summary['esg']['latency_p50_ms']:.2f} ms")
    for m in args.parallelism:
        s = summary[f"p{m}"]
        ratio = s["tuples_per_s"] / base
        met = "met" if s["tuples_per_s"] >= TARGET_TPS else "MISSED"
        result[f"p{m}_over_esg"] = ratio
        print(
            f"forward p{m}: {s['tuples_per_s']:,.0f} t/s = {ratio:.2f}x ESG; latency p50 "
            f"{s['latency_p50_ms']:.2f} ms p99 {s['latency_p99_ms']:.2f} ms; target "
            f">= {TARGET_TPS:,} t/s {met}"
        )
    sort_rate = summary["lexsort"]["tuples_per_s"]
    print(f"lexsort of {2 * args.replay_rows:,} rows: {sort_rate:,.0f} t/s")
    for m in args.parallelism:
        s = summary[f"replay_p{m}"]
        result[f"replay_p{m}_over_lexsort"] = s["tuples_per_s"] / sort_rate
        met = "met" if s["tuples_per_s"] >= TARGET_TPS else "MISSED"
        print(
            f"replay forward p{m}: {s['tuples_per_s']:,.0f} t/s in the run "
            f"({s['tuples_per_s'] / sort_rate:.2f}x lexsort; target >= {TARGET_TPS:,} {met}), "
            f"{s['process_tuples_per_s']:,.0f} t/s as a whole process, {s['cpu_s']:.2f} s CPU"
        )
    if "p1" in summary and "p2" in summary:
        result["p2_over_p1"] = summary["p2"]["tuples_per_s"] / summary["p1"]["tuples_per_s"]
        print(f"forward p2 / p1: {result['p2_over_p1']:.2f} (target >= 1)")
    write("forward", result)
    fig, (ax_t, ax_l) = figure(2, "Operator 15 (I = 2) vs the ESG alone")
    names = [n for n in summary if "latency_p50_ms" in summary[n]]
    ax_t.bar(names, [summary[n]["tuples_per_s"] for n in names])
    ax_t.axhline(TARGET_TPS, color="red", linestyle="--", label="target")
    ax_t.set_ylabel("tuples/s (median)")
    ax_t.legend()
    ax_l.bar(names, [summary[n]["latency_p50_ms"] for n in names], label="p50")
    ax_l.scatter(names, [summary[n]["latency_p99_ms"] for n in names], color="k", label="p99")
    ax_l.set_ylabel("latency (ms)")
    ax_l.set_yscale("log")
    ax_l.legend()
    progress(f"wrote {save(fig, 'forward')}")


if __name__ == "__main__":
    main()
