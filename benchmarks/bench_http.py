"""HTTP ingest vs in-process ingest: tuples/s and per-batch latency, same run, same machine.

Pushes Arrow batches (10,000 rows by default) to ``forward`` and ``scalejoin`` through a
real uvicorn server on loopback (a separate process) with ``stretch.client``, and the same
batches through ``stretch.setup`` in this process. For each it reports, as medians over
the runs after a warm-up: ingest throughput (rows / time until every batch was accepted),
end-to-end throughput (rows / time until the whole output was read back), and p50/p99 of
the per-batch call latency (HTTP: request -> 202, including 429 retries; in process: add).
The target: HTTP ingest >= 200,000 tuples/s for forward.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

CAPACITY = [1 << 16]
"""ESG_in's capacity for both paths (set by --capacity)."""

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._args import positive_int, prog  # noqa: E402
from stretch import build, generate  # noqa: E402
from stretch.client import StretchClient  # noqa: E402
from stretch.vsn import setup  # noqa: E402

OPERATORS: dict[str, dict[str, Any]] = {
    "forward": {"params": {"columns": "v:int", "inputs": 1}},
    "scalejoin": {"params": {"ws": 100}},
}


def inputs(operator: str, rows: int) -> list[pa.Table]:
    if operator == "forward":
        return [
            pa.table(
                {"ts": np.arange(rows, dtype=np.int64) // 10, "v": np.arange(rows, dtype=np.int64)}
            )
        ]
    return generate.scalejoin(rows, 10_000.0, 1)


def batches(tables: list[pa.Table], size: int) -> list[tuple[int, pa.Table]]:
    longest = max(t.num_rows for t in tables)
    return [
        (source, table.slice(start, size))
        for start in range(0, longest, size)
        for source, table in enumerate(tables)
        if start < table.num_rows
    ]


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def run_http(
    client: StretchClient,
    operator: str,
    tables: list[pa.Table],
    size: int,
    parallelism: int,
    run: int,
) -> dict[str, float]:
    name = f"{operator}-{run}"
    client.create_operator(
        name,
        operator,
        OPERATORS[operator]["params"],
        parallelism=parallelism,
        max_parallelism=max(parallelism, 2),
        capacity=CAPACITY[0],
    )
    latencies = []
    start = time.perf_counter()
    for k, (source, batch) in enumerate(batches(tables, size)):
        began = time.perf_counter()
        client.add_batch(name, source, batch, batch_id=k, retry_s=300.0)
        latencies.append(time.perf_counter() - began)
    ingest_s = time.perf_counter() - start
    for source in range(len(tables)):
        client.close_source(name, source)
    out = client.read_all(name, timeout_s=600.0)
    total_s = time.perf_counter() - start
    client.delete_operator(name)
    rows = sum(t.num_rows for t in tables)
    return {
        "ingest_tps": rows / ingest_s,
        "end_to_end_tps": rows / total_s,
        "p50_ms": percentile(latencies, 50) * 1e3,
        "p99_ms": percentile(latencies, 99) * 1e3,
        "output_rows": out.num_rows,
    }


def run_inprocess(
    operator: str, tables: list[pa.Table], size: int, parallelism: int
) -> dict[str, float]:
    op = build(operator, OPERATORS[operator]["params"])
    pipeline = setup(op, parallelism, max(parallelism, 2), capacity=CAPACITY[0])
    try:
        latencies = []
        start = time.perf_counter()
        for source, batch in batches(tables, size):
            began = time.perf_counter()
            pipeline.add(source, batch)
            latencies.append(time.perf_counter() - began)
        ingest_s = time.perf_counter() - start
        pipeline.close()
        pipeline.join(600.0)
        total_s = time.perf_counter() - start
        out, _ = pipeline.output()
    finally:
        pipeline.shutdown()
    rows = sum(t.num_rows for t in tables)
    return {
        "ingest_tps": rows / ingest_s,
        "end_to_end_tps": rows / total_s,
        "p50_ms": percentile(latencies, 50) * 1e3,
        "p99_ms": percentile(latencies, 99) * 1e3,
        "output_rows": out.num_rows,
    }


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "stretch.api.main:create_app",
            "--factory",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    with StretchClient(url) as probe:
        while True:
            try:
                probe.operators()
                return server, url
            except Exception:  # noqa: BLE001 - not up yet
                if time.monotonic() > deadline or server.poll() is not None:
                    server.kill()
                    raise
                time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog=prog(), description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--operators", nargs="+", default=list(OPERATORS), choices=OPERATORS)
    parser.add_argument(
        "--rows",
        type=positive_int,
        default=100_000,
        help="tuples per source for forward (default 100000)",
    )
    parser.add_argument(
        "--join-rows",
        type=positive_int,
        default=20_000,
        help="tuples per source for scalejoin (default 20000)",
    )
    parser.add_argument("--batch", type=positive_int, default=10_000, help="rows per batch")
    parser.add_argument("--runs", type=positive_int, default=3, help="timed runs after the warm-up")
    parser.add_argument("--parallelism", type=positive_int, default=1)
    parser.add_argument(
        "--capacity",
        type=positive_int,
        default=1 << 16,
        help="ESG_in nodes; above the rows sent, ingest never waits on processing",
    )
    results = os.environ.get("STRETCH_BENCH_RESULTS") or ROOT / "benchmarks" / "results"
    parser.add_argument("--output", type=Path, default=Path(results) / "bench_http.json")
    args = parser.parse_args()
    CAPACITY[0] = args.capacity
    server, url = start_server()
    results: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "batch_rows": args.batch,
        "capacity": args.capacity,
        "runs": args.runs,
        "parallelism": args.parallelism,
        "operators": {},
    }
    try:
        with StretchClient(url, timeout_s=600.0) as client:
            for operator in args.operators:
                rows = args.rows if operator == "forward" else args.join_rows
                tables = inputs(operator, rows)
                warm = [t.slice(0, min(t.num_rows, args.batch)) for t in tables]
                run_http(client, operator, warm, args.batch, args.parallelism, -1)
                run_inprocess(operator, warm, args.batch, args.parallelism)
                http_runs, local_runs = [], []
                for run in range(args.runs):
                    http_runs.append(
                        run_http(client, operator, tables, args.batch, args.parallelism, run)
                    )
                    local_runs.append(run_inprocess(operator, tables, args.batch, args.parallelism))
                http, local = medians(http_runs), medians(local_runs)
                results["operators"][operator] = {
                    "tuples": sum(t.num_rows for t in tables),
                    "http": http,
                    "in_process": local,
                    "http_over_in_process_ingest": http["ingest_tps"] / local["ingest_tps"],
                    "http_runs": http_runs,
                    "in_process_runs": local_runs,
                }
                print(
                    f"{operator}: HTTP ingest {http['ingest_tps']:,.0f} t/s "
                    f"(p50 {http['p50_ms']:.1f} ms, p99 {http['p99_ms']:.1f} ms), "
                    f"end-to-end {http['end_to_end_tps']:,.0f} t/s; in process ingest "
                    f"{local['ingest_tps']:,.0f} t/s (p50 {local['p50_ms']:.1f} ms), "
                    f"end-to-end {local['end_to_end_tps']:,.0f} t/s"
                )
    finally:
        server.terminate()
        server.wait(30)
    forward = results["operators"].get("forward")
    if forward is not None:
        results["target_forward_http_ingest_tps"] = 200_000
        results["target_met"] = forward["http"]["ingest_tps"] >= 200_000
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
