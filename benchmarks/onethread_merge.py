"""The best simple program for ``forward`` over files: a streaming merge of sorted Parquet.

Reads each input a row group at a time, and writes each round the rows that no later row
can precede: those with ``ts`` below the least last ``ts`` held of the inputs not yet
read to their end. They go out in forward's order (docs/design.md, decision 2): by
``ts``, then input, then the row's content column by column (a stable sort by ``ts``,
then a ``np.lexsort`` of the rows that share ``ts`` and input; numeric columns). No
runtime, no gate, no threads: the output is forward's row for row, and memory is about a
row group per input.

With ``--unsorted`` (inputs out of ``ts`` order) each input is read whole and sorted
stably by ``ts`` first, then merged the same way: the plain program for that job, its
memory the inputs'.

Run as a script it is a whole process::

    python benchmarks/onethread_merge.py --input a.parquet --input b.parquet \\
        --output out.parquet [--unsorted]
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def row_groups(path: str) -> Iterator[pa.Table]:
    """The file's non-empty row groups, read one at a time."""
    file = pq.ParquetFile(path)
    for group in range(file.num_row_groups):
        table = file.read_row_group(group)
        if table.num_rows:
            yield table


def sorted_whole(path: str) -> Iterator[pa.Table]:
    """The file read whole and sorted stably by ``ts``, in slices of ``SLICE_ROWS`` rows."""
    table = pq.read_table(path)
    table = table.take(pa.array(np.argsort(table.column("ts").to_numpy(), kind="stable")))
    for start in range(0, table.num_rows, SLICE_ROWS):
        yield table.slice(start, SLICE_ROWS)


SLICE_ROWS = 1 << 20
"""Rows the merge takes in at a time from a file sorted whole (as a row group)."""


def merge(paths: list[str], output: str, unsorted: bool = False) -> int:
    """Merge the Parquet files ``paths`` into ``output``; the rows written.

    Each file sorted by ``ts``, or with ``unsorted`` in any order (then read whole and
    sorted first).
    """
    readers = [sorted_whole(path) if unsorted else row_groups(path) for path in paths]
    held = [next(reader, None) for reader in readers]
    ended = [table is None for table in held]
    held = [pq.ParquetFile(p).schema_arrow.empty_table() if t is None else t
            for p, t in zip(paths, held, strict=True)]  # fmt: skip
    written = 0
    with pq.ParquetWriter(output, held[0].schema) as writer:
        while True:
            live = [i for i, table in enumerate(held) if not ended[i] or table.num_rows]
            if not live:
                return written
            open_ends = [int(held[i].column("ts")[-1].as_py()) for i in live if not ended[i]]
            bound = min(open_ends) if open_ends else None
            parts = []
            for i in live:
                ts = held[i].column("ts").to_numpy()
                stop = len(ts) if bound is None else int(np.searchsorted(ts, bound, "left"))
                parts.append(held[i].slice(0, stop))
                held[i] = held[i].slice(stop)
            rows = pa.concat_tables(parts)
            if rows.num_rows:
                writer.write_table(rows.take(pa.array(_order(rows, parts))))
                written += rows.num_rows
            for i in live:  # the input that set the bound reads on
                if not ended[i] and (bound is None or held[i].column("ts")[-1].as_py() == bound):
                    more = next(readers[i], None)
                    if more is None:
                        ended[i] = True
                    else:
                        held[i] = pa.concat_tables([held[i], more])


def _order(rows: pa.Table, parts: list[pa.Table]) -> np.ndarray:
    """Forward's order of ``rows`` (the parts one after another, each sorted by ``ts``).

    A stable sort by ``ts`` (it merges the parts' sorted runs) gives ``(ts, input, row)``;
    then only the rows that share ``ts`` and input are sorted by content.
    """
    ts = rows.column("ts").to_numpy()
    source = np.repeat(np.arange(len(parts)), [part.num_rows for part in parts])
    order = np.argsort(ts, kind="stable")
    ts, source = ts[order], source[order]
    new = np.r_[True, (ts[1:] != ts[:-1]) | (source[1:] != source[:-1])]
    group = np.cumsum(new)
    tied = ~(new & np.r_[new[1:], True])  # in a group of two rows or more
    if tied.any():
        at = order[tied]
        payload = [rows.column(name).to_numpy()[at] for name in rows.column_names[:0:-1]]
        order[tied] = at[np.lexsort([*payload, group[tied]])]
    return order


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", action="append", required=True, help="an input file")
    parser.add_argument("--output", required=True, help="the merged Parquet file")
    parser.add_argument(
        "--unsorted", action="store_true", help="inputs out of ts order: sort each whole first"
    )
    args = parser.parse_args()
    merge(args.input, args.output, args.unsorted)


if __name__ == "__main__":
    main()
