"""Scale-out: one operator sharded over 1, 2 and 4 local sidecar processes.

Each configuration starts N ``stretch serve`` processes (``LocalSidecars``, as
``stretch pipeline --sidecars N`` does), creates the operator on all of them with
``ShardedClient``, sends the section 8.3 ScaleJoin streams (and a tweet stream through
wordcount) in batches, and reads the merged output. It reports, per N:

* the end-to-end rows/s (send, process, read and merge), which on a machine with fewer
  cores than N x threads measures contention as much as scale-out;
* the work split: each shard's comparisons (join) or output rows (aggregate) as a share
  of the whole, the figure that matters on a small machine (ideal: 1/N each);
* the merge cost: the time to read the finished output through the merge, against
  reading one sidecar's;
* that the merged output equals one sidecar's (row for row).

On a machine with more cores run ``--threads 4`` (N shards of 4 threads each).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from _args import positive_float, positive_int, prog
from _util import figure, machine, progress, save, write

from stretch import generate
from stretch.sharded import ShardedClient
from stretch.spark.sidecar import LocalSidecars

ROOT = Path(__file__).resolve().parents[1]
BATCH_ROWS = 20_000


def run(
    count: int, operator: str, params: dict[str, Any], tables: list[pa.Table], threads: int
) -> tuple[dict[str, Any], pa.Table]:
    """One configuration: N shards, the whole input, the merged output; its figures."""
    work = Path(tempfile.mkdtemp(prefix="stretch-scaleout-", dir=ROOT / "benchmarks"))
    try:
        with LocalSidecars(count, work) as sidecars:
            client = ShardedClient(sidecars.url.split(","), timeout_s=600)
            with client:
                client.create_operator(
                    "bench", operator, params, parallelism=threads, capacity=1 << 18
                )
                started = time.perf_counter()
                for start in range(0, tables[0].num_rows, BATCH_ROWS):
                    for source, table in enumerate(tables):
                        client.add_batch("bench", source, table.slice(start, BATCH_ROWS), None, 600)
                for source in range(len(tables)):
                    client.close_source("bench", source)
                status = client.wait_finished("bench", timeout_s=3600)
                processed = time.perf_counter() - started
                read_started = time.perf_counter()
                output = client.read_all("bench", timeout_s=600, commit=False)
                read_s = time.perf_counter() - read_started
                shards = status["shards"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows_in = sum(t.num_rows for t in tables)
    comparisons = [sum(i["comparisons"] for i in s["instances"]) for s in shards]
    rows_out = [int(s["output"]["end_offset"]) for s in shards]
    work_of = comparisons if sum(comparisons) else rows_out
    total = max(sum(work_of), 1)
    figures = {
        "shards": count,
        "threads_per_shard": threads,
        "rows_in": rows_in,
        "rows_out": output.num_rows,
        "seconds": processed + read_s,
        "rows_per_s": rows_in / (processed + read_s),
        "process_s": processed,
        "read_merge_s": read_s,
        "comparisons_per_shard": comparisons,
        "output_rows_per_shard": rows_out,
        "largest_share": max(work_of) / total,
    }
    progress(
        f"{operator} over {count} shard(s) x {threads} thread(s): "
        f"{figures['rows_per_s']:,.0f} rows/s, largest share {figures['largest_share']:.2f}, "
        f"read+merge {read_s:.2f} s"
    )
    return figures, output


def measure(
    operator: str, params: dict[str, Any], tables: list[pa.Table], counts: list[int], threads: int
) -> list[dict[str, Any]]:
    """Every configuration of ``counts``; checks each merged output against one sidecar's."""
    results, reference = [], None
    for count in counts:
        figures, output = run(count, operator, params, tables, threads)
        if reference is None:
            reference = output
        figures["equals_one_sidecar"] = bool(output.equals(reference))
        assert figures["equals_one_sidecar"], f"{operator}: {count} shards differ from one"
        results.append(figures)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(prog=prog(), description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rows", type=positive_int, default=60_000, help="ScaleJoin tuples per stream"
    )
    parser.add_argument("--rate", type=positive_float, default=2_000.0, help="tuples/s per stream")
    parser.add_argument("--ws-ms", type=positive_int, default=10_000)
    parser.add_argument("--tweets", type=positive_int, default=200_000, help="wordcount tweets")
    parser.add_argument("--shards", default="1,2,4", help="shard counts, comma-separated")
    parser.add_argument("--threads", type=positive_int, default=1, help="threads per shard")
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.tweets, args.shards = 6_000, 20_000, "1,2"
    counts = [int(c) for c in args.shards.split(",")]
    join = measure(
        "scalejoin",
        {"ws": args.ws_ms},
        generate.scalejoin(args.rows, args.rate, 1),
        counts,
        args.threads,
    )
    (tweets,) = generate.tweets(args.tweets, 5_000.0, 2)
    aggregate = measure("wordcount", {}, [tweets], counts, args.threads)
    write("scaleout", {"machine": machine(), "args": vars(args), "scalejoin": join,
                       "wordcount": aggregate})  # fmt: skip
    fig, axes = figure(3, f"Scale-out over local sidecars ({machine()['cpus']} cores)")
    for name, rows in (("scalejoin", join), ("wordcount", aggregate)):
        axes[0].plot(counts, [r["rows_per_s"] for r in rows], "o-", label=name)
        axes[1].plot(counts, [r["largest_share"] for r in rows], "o-", label=name)
        axes[2].plot(counts, [r["read_merge_s"] for r in rows], "o-", label=name)
    axes[1].plot(counts, [1 / c for c in counts], "k--", label="ideal 1/N")
    for ax, label in zip(
        axes,
        ["rows/s end to end", "largest shard's share of the work", "read + merge (s)"],
        strict=True,
    ):
        ax.set_xlabel("shards")
        ax.set_ylabel(label)
        ax.set_xticks(counts)
        ax.legend()
    save(fig, "scaleout")
    for name, rows in (("scalejoin", join), ("wordcount", aggregate)):
        for r in rows:
            print(
                f"{name}: {r['shards']} shard(s) x {r['threads_per_shard']}: "
                f"{r['rows_per_s']:,.0f} rows/s, largest share {r['largest_share']:.2f} "
                f"(ideal {1 / r['shards']:.2f}), read+merge {r['read_merge_s']:.2f} s for "
                f"{r['rows_out']:,} rows, equals one sidecar: {r['equals_one_sidecar']}"
            )


if __name__ == "__main__":
    main()
