"""Durability: what ``--state-dir`` costs, how checkpoints and restores scale.

Four measurements, each against a real ``stretch serve`` process on loopback:

* ingest: Arrow batches (``--batch-rows`` rows of ``forward``) pushed by ``--clients``
  concurrent clients, rows/s until every batch was acknowledged, with and without
  ``--state-dir`` (every 202 waits for the journal's fsync: group commit), runs
  interleaved, medians. Target (docs/design.md): the durable service at >= 0.9x.
* fsync: this disk's fsync latency for a 64 KiB append (the floor of a durable 202).
* checkpoint: ``POST .../checkpoint`` of a ``scalejoin`` whose window and uncommitted
  output grow step by step: duration, the pause of the operator's requests, and bytes.
  Target: a pause <= 50 ms per 100 MB of state.
* restore: kill -9 and restart, time until ``/readyz`` answers 200, against the state's
  size (checkpoints) and against the journal's length after the last checkpoint.

Results: ``durability.json`` and ``durability.png`` in the results folder.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from _args import positive_int, prog
from _util import figure, machine, progress, save, write

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stretch.client import StretchClient, ready  # noqa: E402


class Server:
    """A ``stretch serve`` process, with or without a state directory."""

    def __init__(self, state_dir: Path | None) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.state_dir = state_dir
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Start it; return seconds until ``/readyz`` answers 200."""
        command = [sys.executable, "-m", "stretch.cli", "serve", "--port", str(self.port)]
        if self.state_dir is not None:
            command += ["--state-dir", str(self.state_dir), "--checkpoint-interval-s", "3600"]
        started = time.perf_counter()
        self.process = subprocess.Popen(  # noqa: S603 - our own CLI
            command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        while True:
            if ready(self.url):
                return time.perf_counter() - started
            if self.process.poll() is not None or time.perf_counter() - started > 300:
                msg = "the server did not start"
                raise RuntimeError(msg)
            time.sleep(0.01)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(60)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(60)


def ingest(durable: bool, rows: int, batch_rows: int, clients: int, work: Path) -> float:
    """Rows/s of ``clients`` concurrent pushers until every batch was acknowledged."""
    state = work / f"ingest-{time.monotonic_ns()}" if durable else None
    server = Server(state)
    server.start()
    try:
        with StretchClient(server.url) as client:
            for c in range(clients):
                client.create_operator(
                    f"f{c}", "forward", {"columns": "v:int", "inputs": 1}, capacity=1 << 20
                )
        per_client = rows // clients
        ts = np.arange(per_client, dtype=np.int64)
        table = pa.table({"ts": ts, "v": ts})
        barrier = threading.Barrier(clients + 1)

        def push(c: int) -> None:
            with StretchClient(server.url) as client:
                barrier.wait()
                for k, start in enumerate(range(0, per_client, batch_rows)):
                    client.add_batch(f"f{c}", 0, table.slice(start, batch_rows), batch_id=k)
                    if k % 8 == 7:  # keep the output log within its bound
                        client.commit(f"f{c}", client.status(f"f{c}")["output"]["end_offset"])

        threads = [threading.Thread(target=push, args=(c,)) for c in range(clients)]
        for thread in threads:
            thread.start()
        barrier.wait()
        started = time.perf_counter()
        for thread in threads:
            thread.join()
        return per_client * clients / (time.perf_counter() - started)
    finally:
        server.stop()
        if state is not None:
            shutil.rmtree(state, ignore_errors=True)


def fsync_latency(work: Path, count: int = 200) -> dict[str, float]:
    """fsync of a 64 KiB append, ``count`` times: p50 and p99 in ms."""
    path = work / "fsync-probe"
    block = os.urandom(1 << 16)
    times = []
    with path.open("ab") as file:
        for _ in range(count):
            file.write(block)
            file.flush()
            started = time.perf_counter()
            os.fsync(file.fileno())
            times.append((time.perf_counter() - started) * 1e3)
    path.unlink()
    times.sort()
    return {"p50_ms": times[len(times) // 2], "p99_ms": times[int(0.99 * (len(times) - 1))]}


def checkpoints_and_restores(steps: int, step_rows: int, work: Path) -> dict[str, Any]:
    """Grow an operator's state step by step; checkpoint and restore it at each size.

    The state is ``forward``'s output log, never committed: the checkpoint holds every
    uncommitted row (with a window join the state would be the window's rows; the cost
    per byte is the same, and this grows it without hours of comparisons).
    """
    server = Server(work / "growing")
    server.start()
    points = []
    try:
        with StretchClient(server.url) as client:
            client.create_operator(
                "f", "forward", {"columns": "v:int,w:float", "inputs": 1}, capacity=1 << 20
            )
            for step in range(steps):
                ts = np.arange(step * step_rows, (step + 1) * step_rows, dtype=np.int64)
                table = pa.table({"ts": ts, "v": ts, "w": ts.astype(np.float64)})
                for start in range(0, step_rows, 50_000):
                    client.add_batch("f", 0, table.slice(start, 50_000))
                client.watermark("f", 0, int(ts[-1]) + 1)
                while client.status("f")["output"]["end_offset"] < (step + 1) * step_rows:
                    time.sleep(0.05)
                info = client._request("POST", "/v1/operators/f/checkpoint").json()
                server.kill()
                restore_s = server.start()
                point = {
                    "rows": (step + 1) * step_rows,
                    "bytes": info["bytes"],
                    "duration_ms": info["duration_ms"],
                    "pause_ms": info["pause_ms"],
                    "restore_s": restore_s,
                }
                points.append(point)
                progress(f"checkpoint/restore at {point['rows']:,} rows: {point}")
    finally:
        server.stop()
    return {"points": points}


def journal_restores(lengths: list[int], batch_rows: int, work: Path) -> list[dict[str, float]]:
    """Restart time against the journal's length after the last checkpoint (forward)."""
    out = []
    for length in lengths:
        server = Server(work / f"journal-{length}")
        server.start()
        try:
            with StretchClient(server.url) as client:
                client.create_operator("f", "forward", {"columns": "v:int", "inputs": 1})
                ts = np.arange(length * batch_rows, dtype=np.int64)
                table = pa.table({"ts": ts, "v": ts})
                for k in range(length):
                    client.add_batch("f", 0, table.slice(k * batch_rows, batch_rows), k)
                    if k % 8 == 7:
                        client.commit("f", client.status("f")["output"]["end_offset"])
            server.kill()
            restore_s = server.start()
        finally:
            server.stop()
        out.append({"records": length, "restore_s": restore_s})
        progress(f"restore after {length} journal records: {restore_s:.2f} s")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog=prog(), description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=positive_int, default=2_000_000, help="rows per ingest run")
    parser.add_argument("--batch-rows", type=positive_int, default=10_000)
    parser.add_argument("--clients", type=positive_int, default=4, help="concurrent pushers")
    parser.add_argument("--runs", type=positive_int, default=3)
    parser.add_argument("--steps", type=positive_int, default=4, help="checkpoint sizes measured")
    parser.add_argument(
        "--step-rows", type=positive_int, default=400_000, help="rows added per step"
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.runs, args.steps, args.step_rows = 200_000, 1, 2, 50_000
    work = Path(tempfile.mkdtemp(prefix="stretch-durability-", dir=ROOT / "benchmarks"))
    try:
        plain, durable = [], []
        for run in range(args.runs):
            plain.append(ingest(False, args.rows, args.batch_rows, args.clients, work))
            durable.append(ingest(True, args.rows, args.batch_rows, args.clients, work))
            progress(f"run {run + 1}: memory {plain[-1]:,.0f} rows/s, durable {durable[-1]:,.0f}")
        fsync = fsync_latency(work)
        progress(f"fsync of 64 KiB: p50 {fsync['p50_ms']:.2f} ms, p99 {fsync['p99_ms']:.2f} ms")
        growing = checkpoints_and_restores(args.steps, args.step_rows, work)
        lengths = [10, 50] if args.quick else [10, 100, 400]
        journal = journal_restores(lengths, args.batch_rows, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratio = statistics.median(durable) / statistics.median(plain)
    result = {
        "machine": machine(),
        "args": vars(args),
        "ingest_rows_per_s": {"memory": plain, "durable": durable, "ratio_median": ratio},
        "fsync_64k": fsync,
        "checkpoints": growing["points"],
        "journal_restores": journal,
    }
    write("durability", result)
    fig, axes = figure(3, "Durability (--state-dir)")
    axes[0].bar(["memory", "durable"], [statistics.median(plain), statistics.median(durable)])
    axes[0].set_ylabel("ingest rows/s (median)")
    axes[0].set_title(f"ingest: durable {ratio:.2f}x")
    mb = [p["bytes"] / 1e6 for p in growing["points"]]
    axes[1].plot(mb, [p["duration_ms"] for p in growing["points"]], "o-", label="duration")
    axes[1].plot(mb, [p["pause_ms"] for p in growing["points"]], "s-", label="pause")
    axes[1].set_xlabel("checkpoint MB")
    axes[1].set_ylabel("ms")
    axes[1].legend()
    axes[1].set_title("checkpoint")
    axes[2].plot(mb, [p["restore_s"] for p in growing["points"]], "o-", label="vs checkpoint MB")
    axes[2].set_xlabel("checkpoint MB")
    axes[2].set_ylabel("restart to ready (s)")
    twin = axes[2].twiny()
    twin.plot([j["records"] for j in journal], [j["restore_s"] for j in journal], "s--", color="C1")
    twin.set_xlabel("journal records after the checkpoint (dashed)")
    axes[2].set_title("restore")
    save(fig, "durability")
    print(
        f"ingest: memory {statistics.median(plain):,.0f} rows/s, durable "
        f"{statistics.median(durable):,.0f} rows/s = {ratio:.2f}x (target >= 0.90)"
    )
    print(f"fsync 64 KiB: p50 {fsync['p50_ms']:.2f} ms, p99 {fsync['p99_ms']:.2f} ms")
    for p in growing["points"]:
        per_100mb = p["pause_ms"] / max(p["bytes"] / 1e8, 1e-9)
        print(
            f"checkpoint {p['bytes'] / 1e6:.1f} MB: {p['duration_ms']:.0f} ms, pause "
            f"{p['pause_ms']:.1f} ms ({per_100mb:.0f} ms per 100 MB; target <= 50), "
            f"restore {p['restore_s']:.2f} s"
        )
    for j in journal:
        print(f"restore after {j['records']} journal records: {j['restore_s']:.2f} s")


if __name__ == "__main__":
    main()
