"""Memory of a long run: wordcount fed tweets that are all distinct, with and without compaction.

Each tweet of ``stretch.generate.tweets`` gets a serial number as its first word, so every
tweet text is a new string for the pipeline's string dictionary and every tweet brings a
new word for wordcount's key table: what a sidecar meets on real text, where both would
otherwise grow for as long as it runs. The tweets go through one pipeline (``setup``,
parallelism 2, windows of ``--ws`` ms sliding by ``--wa``) in batches of ``--batch``,
each added once the output caught up with the one before, the output read and committed
as it comes (a service's steady state). Every ``--every`` tweets the dictionary's bytes,
the key table's keys and the process's resident memory are sampled.

Cases, each in a process of its own (so each has its own resident memory):

* ``compaction``: the runtime's default (``RuntimeSettings.compact_dictionary_bytes``,
  64 MiB), or ``--bound-mib``;
* ``none``: the same with compaction off (``compact_dictionary_bytes=None``), the baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from _args import positive_int, prog
from _util import figure, machine, progress, save, write

from stretch.generate import tweets
from stretch.operators.catalog import build
from stretch.vsn import RuntimeSettings, setup
from stretch.vsn._compiled.aggregates import AggregateKernel

PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_mib() -> float:
    """The process's resident memory now."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE / 2**20


def run_case(bound_mib: int | None, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Feed the tweets; return the samples."""
    base = tweets(args.batch, 1000.0, seed=1)[0]
    span = int(base.column("ts")[-1].as_py()) + 1
    texts = base.column("tweet")
    op = build("wordcount", {"wa": args.wa, "ws": args.ws})
    bound = None if bound_mib is None else bound_mib << 20
    samples = []
    started = time.perf_counter()
    with setup(op, 2, 2, settings=RuntimeSettings(compact_dictionary_bytes=bound)) as pipeline:
        kernel = pipeline._pool.compiled  # its key count has no public view
        assert isinstance(kernel, AggregateKernel)
        for k in range(args.tweets // args.batch):
            first = k * args.batch
            serials = pa.array([f"n{first + i} " for i in range(args.batch)])
            batch = pa.table(
                {
                    "ts": pc.add(base.column("ts"), k * span),
                    "user": base.column("user"),
                    "tweet": pc.binary_join_element_wise(serials, texts, ""),
                }
            )
            pipeline.add(0, batch)
            deadline = time.monotonic() + 120
            while pipeline.output_status().watermark < k * span - args.ws:
                if time.monotonic() > deadline:
                    msg = "the output did not catch up in 120 s"
                    raise TimeoutError(msg)
                time.sleep(0.001)
            pipeline.commit(pipeline.output_status().end_offset)
            if (first + args.batch) % args.every == 0:
                samples.append(
                    {
                        "tweets": first + args.batch,
                        "seconds": time.perf_counter() - started,
                        "dictionary_mib": pipeline.status().dictionary_bytes / 2**20,
                        "keys": len(kernel.keys.strings),
                        "resident_mib": resident_mib(),
                        "compaction_barriers": sum(
                            r.cause == "compaction" for r in pipeline.reconfigurations()
                        ),
                    }
                )
                progress(json.dumps(samples[-1]))
        pipeline.close()
        assert pipeline.join(120)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(prog=prog(), description=__doc__.splitlines()[0])
    parser.add_argument("--tweets", type=positive_int, default=3_000_000, help="tweets in all")
    parser.add_argument("--batch", type=positive_int, default=20_000, help="tweets per add")
    parser.add_argument(
        "--every", type=positive_int, default=200_000, help="tweets between samples"
    )
    parser.add_argument("--wa", type=positive_int, default=1_000, help="WA in ms")
    parser.add_argument("--ws", type=positive_int, default=10_000, help="WS in ms")
    parser.add_argument("--bound-mib", type=positive_int, default=64, help="the compaction bound")
    parser.add_argument("--case", choices=["compaction", "none"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case is not None:  # one case, in this process: samples as JSON on stdout
        bound = args.bound_mib if args.case == "compaction" else None
        print(json.dumps(run_case(bound, args)))
        return
    result: dict[str, Any] = {"args": vars(args), "machine": machine(), "cases": {}}
    for case in ("compaction", "none"):
        progress(f"case {case}: {args.tweets:,} tweets")
        command = [sys.executable, __file__, "--case", case]
        for name in ("tweets", "batch", "every", "wa", "ws", "bound_mib"):
            command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        result["cases"][case] = json.loads(done.stdout)
    path = write("memory", result)
    fig, axes = figure(3, "wordcount on distinct tweets: memory with and without compaction")
    for ax, field, label in zip(
        axes,
        ("dictionary_mib", "keys", "resident_mib"),
        ("string dictionary (MiB)", "keys in the key table", "resident memory (MiB)"),
        strict=True,
    ):
        for case, samples in result["cases"].items():
            ax.plot([s["tweets"] for s in samples], [s[field] for s in samples], "o-", label=case)
        ax.set_xlabel("tweets")
        ax.set_ylabel(label)
        ax.legend()
    save(fig, "memory")
    for case, samples in result["cases"].items():
        last = samples[-1]
        print(
            f"{case:>10}: after {last['tweets']:,} tweets, dictionary "
            f"{last['dictionary_mib']:.0f} MiB, {last['keys']:,} keys, resident "
            f"{last['resident_mib']:.0f} MiB (most {max(s['resident_mib'] for s in samples):.0f}),"
            f" {last['seconds']:.1f} s"
        )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
