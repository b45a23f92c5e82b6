"""Memory of a replay whose input grows: ``stretch replay`` reads Parquet a batch at a time.

``forward`` over two Parquet files of N rows each (``ts`` sorted over N ms, an int and a
float column; row groups of 1,048,576 rows), writing Parquet, at parallelism 1, as whole
processes:

* ``batches``: ``stretch replay forward`` (a pass over each file's ``ts`` finds it in
  order, then its batches are read as the run takes them);
* ``whole``: the same command with its inputs read whole first, as ``stretch replay``
  did before (and, before it sorted by runs on disk, for a file out of order);
* ``merge``, the best simple program for the job: ``onethread_merge.py``, a streaming
  merge of the two sorted files a row group at a time, in forward's order.

With ``--late SHARE`` that share of each file's rows comes early in the file, before rows
up to 1% of the time span ahead of it (out of ``ts`` order): ``batches`` is then the
replay's external sort (runs spilled to the temporary directory, merged as the run takes
them), ``whole`` the input read whole and sorted, and ``merge`` the same 1T with each file
read whole and sorted stably first (``onethread_merge.py --unsorted``).

Reported per size: wall seconds and the peak resident memory of each process (its own
``ru_maxrss``, from a small launcher), medians of ``--runs`` after one run of each that is
not counted. The outputs are checked equal, a row group at a time. Writes
``replay_input.json`` and ``replay_input.png`` (with ``--late``: ``replay_input_late``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _args import non_negative_float, positive_int, prog
from _util import machine, peaks_and_walls, plot_peaks_and_walls, write
from onethread_merge import row_groups

BATCHES = "import sys; from stretch.cli import main; sys.exit(main(sys.argv[1:]))"
"""``stretch replay`` itself."""

WHOLE = """
import sys
from stretch import cli

def whole(file, schema, path, asserted):
    return cli._sorted(cli.conform(file.read(), schema, path), path, asserted)

cli._rows = whole  # every input read whole first (and sorted)
sys.exit(cli.main(sys.argv[1:]))
"""
"""The baseline: ``stretch replay`` with its inputs read whole first, as it did before."""

MERGE = str(Path(__file__).parent / "onethread_merge.py")
"""The best simple program for the job: a streaming merge of the sorted files."""


def inputs(rows: int, folder: str, late: float = 0.0) -> list[str]:
    """Two streams of ``rows`` rows as Parquet files; their paths.

    Sorted by ``ts``, except that a share ``late`` of the rows comes before rows up to
    ``rows // 100`` ms ahead of it.
    """
    rng = np.random.default_rng(1)
    paths = []
    for side in range(2):
        ts = np.sort(rng.integers(0, rows, rows))
        table = pa.table({"ts": ts, "x": rng.integers(1, 10_000, rows), "y": rng.random(rows)})
        if late:
            shown = ts - np.where(rng.random(rows) < late, rng.integers(0, rows // 100, rows), 0)
            table = table.take(pa.array(np.argsort(shown, kind="stable")))
        paths.append(os.path.join(folder, f"in_{side}.parquet"))
        pq.write_table(table, paths[-1], row_group_size=1 << 20)
    return paths


def same_rows(a: str, b: str) -> bool:
    """Whether two Parquet files hold the same rows, read a row group at a time.

    The files' row groups may differ in size (the replay's pieces depend on timing).
    """
    groups_a, groups_b = row_groups(a), row_groups(b)
    part_a, part_b = next(groups_a, None), next(groups_b, None)
    while part_a is not None and part_b is not None:
        rows = min(part_a.num_rows, part_b.num_rows)
        if not part_a.slice(0, rows).equals(part_b.slice(0, rows)):
            return False
        part_a, part_b = part_a.slice(rows), part_b.slice(rows)
        if not part_a.num_rows:
            part_a = next(groups_a, None)
        if not part_b.num_rows:
            part_b = next(groups_b, None)
    return part_a is None and part_b is None


def run_size(rows: int, runs: int, late: float) -> dict[str, Any]:
    """Every case at ``rows`` rows a side, ``runs`` times in turn; their medians."""
    with tempfile.TemporaryDirectory() as folder:
        left, right = inputs(rows, folder, late)
        outputs = {
            case: os.path.join(folder, f"{case}.parquet") for case in ("batches", "whole", "merge")
        }
        replay = ["replay", "forward", "--input", left, "--input", right, "--output"]
        commands = {
            case: [sys.executable, "-c", script, *replay, outputs[case]]
            for case, script in (("batches", BATCHES), ("whole", WHOLE))
        }
        commands["merge"] = [sys.executable, MERGE, "--input", left, "--input", right]
        commands["merge"] += ["--output", outputs["merge"], *(["--unsorted"] if late else [])]
        medians = peaks_and_walls(commands, runs, f"{rows:,} a side")
        for baseline in ("whole", "merge"):
            assert same_rows(outputs["batches"], outputs[baseline]), f"{baseline} differs"
    return {
        "rows_per_side": rows,
        **medians,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog=prog(), description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows", type=positive_int, nargs="+", default=[1_500_000, 5_000_000, 15_000_000],
        help="rows per input file, one size each",
    )  # fmt: skip
    parser.add_argument("--runs", type=positive_int, default=3, help="runs of each case per size")
    parser.add_argument(
        "--late", type=non_negative_float, default=0.0,
        help="share of each file's rows out of ts order (default 0: sorted files)",
    )  # fmt: skip
    args = parser.parse_args()
    if not 0 <= args.late < 1:
        parser.error(f"--late must be in [0, 1), got {args.late}")
    name = "replay_input_late" if args.late else "replay_input"
    result: dict[str, Any] = {"args": vars(args), "machine": machine(), "sizes": []}
    for rows in args.rows:
        result["sizes"].append(run_size(rows, args.runs, args.late))
    path = write(name, result)
    plot_peaks_and_walls(
        result["sizes"],
        [2 * s["rows_per_side"] / 1e6 for s in result["sizes"]],
        "input rows (millions)",
        "forward replay of two Parquet files (p1)"
        + (f", {args.late:.0%} of rows out of ts order" if args.late else ""),
        name,
    )
    for size in result["sizes"]:
        batches, whole, merge = size["batches"], size["whole"], size["merge"]
        print(
            f"{size['rows_per_side']:>11,} a side: batches {batches['seconds']:.1f} s "
            f"{batches['peak_mib']:.0f} MiB, whole {whole['seconds']:.1f} s "
            f"{whole['peak_mib']:.0f} MiB, merge {merge['seconds']:.1f} s "
            f"{merge['peak_mib']:.0f} MiB; batches {merge['seconds'] / batches['seconds']:.2f}x "
            "the merge's speed"
        )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
