"""Throughput of the Elastic ScaleGate (add + get) against two merge baselines.

Every configuration merges ``sources`` timestamp-sorted streams and delivers every tuple to
each of ``readers`` readers, in the total order (ts, source, seq). Measured side by side in
one run (medians over ``--runs`` after a JIT warm-up):

* ``esg-batch``: one thread, ``add_batch`` per source then ``get_ready_batch`` per reader.
* ``esg-tuple``: one thread, ``add_tuple`` and ``get_next_ready_tuple`` per tuple.
* ``esg-threads``: one writer thread per source, one reader thread per reader, batched.
* ``heapq``: pure-Python reference, ``heapq.merge`` of tuples, each reader iterates.
* ``numba-merge``: single-thread Numba k-way merge of the columns, one copy per reader.

Throughput is input tuples per second (each delivered to every reader). Writes JSON to
``benchmarks/results/bench_scalegate.json`` and prints a table with the ratios. docs/design.md's
budget: well over 1,000,000 t/s for 2 sources and 1-4 readers, batched.
"""

from __future__ import annotations

import argparse
import heapq
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from _args import positive_int, prog
from _util import machine, progress, write
from numba import njit
from numpy.typing import NDArray

from scalegate import TS_MAX, ElasticScaleGate

I64 = NDArray[np.int64]


def make_streams(n_sources: int, n: int, seed: int) -> list[tuple[I64, I64]]:
    """Per source: sorted ts with many ties across sources, and payloads."""
    rng = np.random.default_rng(seed)
    return [
        (np.cumsum(rng.integers(0, 3, size=n)).astype(np.int64), np.arange(n, dtype=np.int64))
        for _ in range(n_sources)
    ]


def esg_batch(streams: list[tuple[I64, I64]], readers: int, batch: int) -> int:
    gate = ElasticScaleGate(range(len(streams)), range(readers), capacity=1 << 16, max_sources=8)
    got = 0
    n = streams[0][0].shape[0]
    for i in range(0, n, batch):
        for s, (ts, payload) in enumerate(streams):
            gate.add_batch(s, ts[i : i + batch], payload[i : i + batch])
        for r in range(readers):
            got += len(gate.get_ready_batch(r, 1 << 20))
    for s in range(len(streams)):
        gate.add_watermark(s, TS_MAX)
    for r in range(readers):
        got += len(gate.get_ready_batch(r, 1 << 20))
    return got


def esg_tuple(streams: list[tuple[I64, I64]], readers: int, batch: int) -> int:
    gate = ElasticScaleGate(range(len(streams)), range(readers), capacity=1 << 16, max_sources=8)
    columns = [(ts.tolist(), payload.tolist()) for ts, payload in streams]
    got = 0
    for i in range(len(columns[0][0])):
        for s, (ts, payload) in enumerate(columns):
            gate.add_tuple(s, ts[i], payload[i])
        for r in range(readers):
            while gate.get_next_ready_tuple(r) is not None:
                got += 1
    for s in range(len(streams)):
        gate.add_watermark(s, TS_MAX)
    for r in range(readers):
        while gate.get_next_ready_tuple(r) is not None:
            got += 1
    return got


def esg_threads(streams: list[tuple[I64, I64]], readers: int, batch: int) -> int:
    gate = ElasticScaleGate(range(len(streams)), range(readers), capacity=1 << 16, max_sources=8)
    counts = [0] * readers

    def write(s: int) -> None:
        ts, payload = streams[s]
        for i in range(0, ts.shape[0], batch):
            gate.add_batch(s, ts[i : i + batch], payload[i : i + batch])
        gate.add_watermark(s, TS_MAX)

    def read(r: int) -> None:
        ends = 0
        while ends < len(streams):
            got = gate.get_ready_batch(r, 1 << 20)
            counts[r] += len(got)
            ends += int(np.count_nonzero(got.ts == TS_MAX))
            if len(got) == 0:
                time.sleep(0)

    threads = [threading.Thread(target=write, args=(s,)) for s in range(len(streams))]
    threads += [threading.Thread(target=read, args=(r,)) for r in range(readers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts)


def heapq_merge(streams: list[tuple[I64, I64]], readers: int, batch: int) -> int:
    lists = [
        [(t, s, q, p) for q, (t, p) in enumerate(zip(ts.tolist(), payload.tolist(), strict=True))]
        for s, (ts, payload) in enumerate(streams)
    ]
    merged = list(heapq.merge(*lists))
    got = 0
    for _ in range(readers):
        for _node in merged:
            got += 1
    return got + readers * len(streams)  # the end watermarks the ESG also delivers


@njit(nogil=True, cache=True)
def _kway_merge(ts: I64, starts: I64, out_src: I64, out_seq: I64) -> None:
    """Merge k sorted runs of ``ts`` (run s at starts[s]:starts[s+1]) by (ts, s, seq)."""
    k = starts.shape[0] - 1
    heads = starts[:-1].copy()
    for i in range(out_src.shape[0]):
        best = -1
        for s in range(k):
            if heads[s] < starts[s + 1] and (best < 0 or ts[heads[s]] < ts[heads[best]]):
                best = s
        out_src[i] = best
        out_seq[i] = heads[best] - starts[best]
        heads[best] += 1


def numba_merge(streams: list[tuple[I64, I64]], readers: int, batch: int) -> int:
    ts = np.concatenate([s[0] for s in streams])
    payload = np.concatenate([s[1] for s in streams])
    starts = np.cumsum([0] + [s[0].shape[0] for s in streams]).astype(np.int64)
    src = np.empty(ts.shape[0], dtype=np.int64)
    seq = np.empty(ts.shape[0], dtype=np.int64)
    _kway_merge(ts, starts, src, seq)
    rows = starts[src] + seq
    got = 0
    for _ in range(readers):
        delivered = (ts[rows], src.copy(), seq.copy(), payload[rows])
        got += delivered[0].shape[0]
    return got + readers * len(streams)


MODES: dict[str, Callable[[list[tuple[I64, I64]], int, int], int]] = {
    "esg-batch": esg_batch,
    "esg-tuple": esg_tuple,
    "esg-threads": esg_threads,
    "heapq": heapq_merge,
    "numba-merge": numba_merge,
}


def measure(mode: str, streams: list[tuple[I64, I64]], readers: int, args: Any) -> dict[str, Any]:
    fn = MODES[mode]
    expected = readers * len(streams) * (streams[0][0].shape[0] + 1)
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        got = fn(streams, readers, args.batch)
        times.append(time.perf_counter() - start)
        assert got == expected, f"{mode}: delivered {got}, expected {expected}"
    n_in = len(streams) * streams[0][0].shape[0]
    median = statistics.median(times)
    return {
        "mode": mode,
        "sources": len(streams),
        "readers": readers,
        "tuples": n_in,
        "runs_s": times,
        "median_s": median,
        "tuples_per_s": n_in / median,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog=prog(), description=__doc__.split("\n\n")[0])
    parser.add_argument("--tuples", type=positive_int, default=200_000, help="tuples per source")
    parser.add_argument(
        "--tuple-tuples", type=positive_int, default=20_000, help="per source, esg-tuple"
    )
    parser.add_argument("--batch", type=positive_int, default=1024, help="tuples per add_batch")
    parser.add_argument("--runs", type=positive_int, default=3, help="timed runs per configuration")
    parser.add_argument("--sources", type=positive_int, nargs="+", default=[1, 2])
    parser.add_argument("--readers", type=positive_int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()

    warm = make_streams(2, 5000, seed=0)
    for fn in MODES.values():  # JIT compile (or load from cache) before timing
        fn(warm, 2, args.batch)
    results = []
    for n_sources in args.sources:
        for readers in args.readers:
            for mode in MODES:
                n = args.tuple_tuples if mode == "esg-tuple" else args.tuples
                streams = make_streams(n_sources, n, seed=n_sources)
                results.append(measure(mode, streams, readers, args))
                progress(f"{mode} {n_sources} source(s) {readers} reader(s): done")
    rate = {(r["mode"], r["sources"], r["readers"]): r["tuples_per_s"] for r in results}
    for r in results:
        key = (r["sources"], r["readers"])
        r["vs_heapq"] = r["tuples_per_s"] / rate[("heapq", *key)]
        r["vs_numba_merge"] = r["tuples_per_s"] / rate[("numba-merge", *key)]
    path = write(
        "bench_scalegate",
        {"machine": machine(), "args": vars(args), "unit": "input tuples/s", "results": results},
    )
    print(f"{'mode':<12} {'src':>3} {'rdr':>3} {'tuples/s':>12} {'x heapq':>8} {'x numba':>8}")
    for r in results:
        print(
            f"{r['mode']:<12} {r['sources']:>3} {r['readers']:>3} {r['tuples_per_s']:>12,.0f}"
            f" {r['vs_heapq']:>8.2f} {r['vs_numba_merge']:>8.2f}"
        )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
