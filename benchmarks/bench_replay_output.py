"""Memory of a replay whose output grows: ``stretch replay`` writes it a piece at a time.

ScaleJoin over the section 8.3 streams (``stretch.generate.scalejoin``, 10,000 tuples/s a
side, WS 10 s) with ``x``, ``y``, ``a`` and ``b`` squeezed from [1, 10000] into [1, 1000],
so that each tuple matches about 40 of its window: the output grows with the input, about
12.5 million rows at 200,000 tuples a side. Each size runs as whole processes writing
Parquet, at parallelism 2:

* ``pieces``: ``stretch replay scalejoin`` (``run_vsn_pieces``: pieces of at most 262,144
  rows from an output log bounded at 1,048,576 rows, each written as it comes);
* ``whole``, the baseline: the same run with the whole output held, as ``stretch replay``
  ran before (``run_vsn``, then ``write_table``).

Reported per size: the output rows, wall seconds and the peak resident memory of each
process (its own ``ru_maxrss``, from a small launcher), medians of ``--runs`` after one
run of each that is not counted. The outputs are
checked to have the same rows. Writes ``replay_output.json`` and ``replay_output.png``.
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
from _args import positive_int, prog
from _util import machine, peaks_and_walls, plot_peaks_and_walls, write

from stretch.generate import scalejoin

STRETCH = str(Path(sys.executable).parent / "stretch")
WS = 10_000
PARALLELISM = 2

WHOLE = f"""
import sys
import pyarrow.parquet as pq
from stretch.io import write_table
from stretch.operators.catalog import build
from stretch.vsn import run_vsn
left, right, out = sys.argv[1:]
op = build("scalejoin", {{"ws": {WS}}})
write_table(run_vsn(op, [pq.read_table(left), pq.read_table(right)], {PARALLELISM}), out)
"""
"""The baseline: the replay as it was, the whole output held, then written."""


def squeezed(rows: int, folder: str) -> list[str]:
    """The two streams with their values in [1, 1000], written as Parquet; their paths."""
    paths = []
    streams = scalejoin(rows, 10_000.0, seed=1)
    for side, (stream, columns) in enumerate(zip(streams, (("x", "y"), ("a", "b")), strict=True)):
        table = stream
        for name in columns:
            values = np.asarray(table.column(name))
            narrow = values // 10 + 1 if values.dtype.kind == "i" else values / 10 + 1
            table = table.set_column(table.schema.get_field_index(name), name, pa.array(narrow))
        paths.append(os.path.join(folder, f"in_{side}.parquet"))
        pq.write_table(table, paths[-1])
    return paths


def run_size(rows: int, runs: int) -> dict[str, Any]:
    """Both cases at ``rows`` tuples a side, ``runs`` times in turn; their medians."""
    with tempfile.TemporaryDirectory() as folder:
        left, right = squeezed(rows, folder)
        outputs = {case: os.path.join(folder, f"{case}.parquet") for case in ("pieces", "whole")}
        commands = {
            "pieces": [STRETCH, "replay", "scalejoin", "--param", f"ws={WS}", "--sorted"]
            + ["--parallelism", str(PARALLELISM), "--input", left, "--input", right]
            + ["--output", outputs["pieces"]],
            "whole": [sys.executable, "-c", WHOLE, left, right, outputs["whole"]],
        }
        medians = peaks_and_walls(commands, runs, f"{rows:,} a side")
        written = {case: pq.read_table(path) for case, path in outputs.items()}
        assert written["pieces"].equals(written["whole"]), "the outputs differ"
        out_rows = written["pieces"].num_rows
    return {
        "rows_per_side": rows,
        "output_rows": out_rows,
        **medians,
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog=prog(), description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows", type=positive_int, nargs="+", default=[50_000, 100_000, 200_000, 400_000],
        help="tuples per side, one size each",
    )  # fmt: skip
    parser.add_argument("--runs", type=positive_int, default=3, help="runs of each case per size")
    args = parser.parse_args()
    result: dict[str, Any] = {"args": vars(args), "machine": machine(), "sizes": []}
    for rows in args.rows:
        result["sizes"].append(run_size(rows, args.runs))
    path = write("replay_output", result)
    plot_peaks_and_walls(
        result["sizes"],
        [s["output_rows"] / 1e6 for s in result["sizes"]],
        "output rows (millions)",
        "ScaleJoin replay, output written as Parquet (p2)",
        "replay_output",
    )
    for size in result["sizes"]:
        pieces, whole = size["pieces"], size["whole"]
        print(
            f"{size['rows_per_side']:>8,} a side, {size['output_rows']:>11,} rows out: pieces "
            f"{pieces['seconds']:.1f} s {pieces['peak_mib']:.0f} MiB, whole "
            f"{whole['seconds']:.1f} s {whole['peak_mib']:.0f} MiB"
        )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
