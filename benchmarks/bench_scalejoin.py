"""Q3 (section 8.3): ScaleJoin comparisons/s in the VSN runtime vs a bare 1T kernel.

Runs the catalog ``scalejoin`` through ``stretch.setup`` at each ``--parallelism`` and the
bare single-thread band-join kernel (one key, same window) over the same merged input,
in one process, runs interleaved; reports medians and the ratios the performance budget
names (p1 >= 80% of 1T, p2 >= 1.8x p1). The VSN timing includes adding the input (the
feeding thread shares the cores with the instances). ``cores_used`` is process CPU time
over wall time: below the parallelism, the threads waited for a core (a loaded machine)
or for each other. Writes JSON and a PNG to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np
import pyarrow as pa
from _util import figure, interleaved, machine, medians, progress, save, write

from stretch.generate import scalejoin
from stretch.operators.catalog import build
from stretch.operators.kernels._band_join import LAST, NEVER, scalejoin_run
from stretch.vsn import setup


def bare_kernel(tables: list[pa.Table], ws: int) -> dict[str, float]:
    """1T: the runtime's band-join kernel alone, one key, over the merged input."""
    left, right = tables
    x = left.column("x").to_numpy()
    y = left.column("y").to_numpy()
    a = right.column("a").to_numpy()
    b = right.column("b").to_numpy()
    n = left.num_rows
    ts = np.concatenate([left.column("ts").to_numpy(), right.column("ts").to_numpy()])
    src = np.concatenate([np.zeros(n, np.int64), np.ones(right.num_rows, np.int64)])
    seq = np.concatenate([np.arange(n), np.arange(right.num_rows)]).astype(np.int64)
    order = np.lexsort((seq, src, ts))
    ts, src, seq = ts[order], src[order], seq[order]
    size = len(ts)
    one_key = np.zeros(1, np.int64)
    store_ts, store_seq = np.empty((1, 2, size), np.int64), np.empty((1, 2, size), np.int64)
    bounds = np.zeros((1, LAST + 1), np.int64)
    bounds[0, LAST] = NEVER
    out = np.empty((4, 1 << 20), np.int64)
    stats = np.zeros(2, np.int64)
    start = time.perf_counter()
    bases = np.zeros(2, np.int64)  # the columns hold every row from seq 0
    args = (ts, src, seq, store_ts, store_seq, bounds, (x, y), (a, b), bases, out, stats)
    assert scalejoin_run(one_key, 1, ws, 1, np.zeros(1, np.int64), *args), "out is too small"
    elapsed = time.perf_counter() - start
    return {"comparisons_per_s": int(stats[1]) / elapsed, "seconds": elapsed}


def bare_kernels(tables: list[pa.Table], ws: int, threads: int) -> dict[str, float]:
    """The machine's parallel ceiling: ``threads`` independent 1T kernels at once.

    The kernel releases the GIL, so on idle cores this is ``threads`` x 1T; less means
    the cores are shared (other processes, hyper-threads, memory bandwidth).
    """
    done: list[dict[str, float]] = []
    workers = [
        threading.Thread(target=lambda: done.append(bare_kernel(tables, ws)))
        for _ in range(threads)
    ]
    cpu = time.process_time()
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - start
    comparisons = sum(d["comparisons_per_s"] * d["seconds"] for d in done)
    cores = (time.process_time() - cpu) / elapsed
    return {"comparisons_per_s": comparisons / elapsed, "seconds": elapsed, "cores_used": cores}


def vsn(tables: list[pa.Table], ws: int, m: int, keys: int) -> dict[str, float]:
    """The catalog scalejoin at parallelism m: add everything, close, wait for the end."""
    op = build("scalejoin", {"ws": ws, "keys": keys})
    pipeline = setup(op, m, m)
    try:
        cpu = time.process_time()
        start = time.perf_counter()
        for i, table in enumerate(tables):
            pipeline.add(i, table)
        pipeline.close()
        assert pipeline.join(600)
        elapsed = time.perf_counter() - start
        cores = (time.process_time() - cpu) / elapsed
        instances = pipeline.stats()["instances"]
    finally:
        pipeline.shutdown()
    comparisons = sum(i["comparisons"] for i in instances)
    return {"comparisons_per_s": comparisons / elapsed, "seconds": elapsed, "cores_used": cores}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=20_000, help="tuples per stream")
    parser.add_argument("--rate", type=float, default=1000.0, help="tuples/s per stream")
    parser.add_argument("--ws", type=int, default=10_000, help="window size in ms")
    parser.add_argument("--keys", type=int, default=64, help="K of ScaleJoin (>= parallelism)")
    parser.add_argument("--parallelism", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    result: dict[str, object] = {"args": vars(args), "machine": machine()}
    tables = scalejoin(args.rows, args.rate, seed=1)
    warm = scalejoin(2000, args.rate, seed=2)
    progress("warm-up (JIT)")
    bare_kernel(warm, args.ws)
    for m in args.parallelism:
        vsn(warm, args.ws, m, args.keys)
    cases = {"1T": lambda: bare_kernel(tables, args.ws)}
    for m in args.parallelism:
        if m > 1:
            cases[f"{m}x1T"] = lambda m=m: bare_kernels(tables, args.ws, m)
    for m in args.parallelism:
        cases[f"p{m}"] = lambda m=m: vsn(tables, args.ws, m, args.keys)
    runs = interleaved(args.runs, cases)
    summary = {name: medians(samples) for name, samples in runs.items()}
    result["runs"] = runs
    result["median"] = summary
    one_t = summary["1T"]["comparisons_per_s"]
    print(f"1T: {one_t:,.0f} comparisons/s")
    base = summary.get("p1", {}).get("comparisons_per_s")
    for m in args.parallelism:
        rate = summary[f"p{m}"]["comparisons_per_s"]
        result[f"p{m}_over_1T"] = rate / one_t
        line = f"p{m}: {rate:,.0f} comparisons/s = {rate / one_t:.2f}x 1T"
        if m == 1:
            line += f" (target >= 0.80x: {'met' if rate / one_t >= 0.8 else 'MISSED'})"
        if base and m > 1:
            ceiling = summary[f"{m}x1T"]["comparisons_per_s"] / one_t
            result[f"p{m}_over_p1"] = rate / base
            result[f"{m}x1T_over_1T"] = ceiling
            line += f", {rate / base:.2f}x p1 ({m} bare kernels at once: {ceiling:.2f}x 1T)"
            if m == 2:
                line += f" (target >= 1.8x: {'met' if rate / base >= 1.8 else 'MISSED'})"
        print(line)
    write("scalejoin", result)
    fig, (ax,) = figure(1, "ScaleJoin: VSN vs the bare 1T kernel")
    ms = args.parallelism
    ax.plot(ms, [summary[f"p{m}"]["comparisons_per_s"] for m in ms], "o-", label="VSN (median)")
    ax.plot(ms, [one_t * m for m in ms], ":", color="grey", label="1T x parallelism (ideal)")
    ax.plot(ms, [summary.get(f"{m}x1T", summary["1T"])["comparisons_per_s"] for m in ms], "s--",
            label="m bare kernels at once (machine ceiling)")  # fmt: skip
    ax.axhline(one_t, color="k", linestyle="--", label="1T")
    ax.set_xlabel("parallelism")
    ax.set_ylabel("comparisons/s")
    ax.set_xticks(ms)
    ax.legend()
    progress(f"wrote {save(fig, 'scalejoin')}")


if __name__ == "__main__":
    main()
