"""``stretch warm``: compile every kernel into Numba's cache before a user's first run.

Numba compiles a kernel on its first call and caches the machine code (``cache=True``)
beside the kernel's source, keyed to the kernels' sources (an import drops the cache when
they change: ``scalegate/numba_cache.py``). A fresh install has no cache: its first
``stretch replay`` would pay about 4 s of compiling, its first reconfiguration about 5 s.
``warm`` replays every catalog operator on a few rows through the CLI's own replay, at
parallelism 1 and 2, sorted and not, with the band index and without, and once
reconfigured, then reads a pipeline's status and compacts a string dictionary: so each
kernel is compiled for the signatures real runs use. ``./dev install`` runs it; after a
plain ``pip install``, ``stretch warm`` does it once (about 1.5 minutes on two cores).

A user's operators compile kernels of their own (a ``stretch.band_join`` predicate's
entry points: about 12 s with a band's index): ``warm_operators`` replays each operator
that ``--operators`` modules or installed entry points register on 2,000 rows generated
from its input schemas, as one batch and in four, and, for a join with a band, once with
every band value equal (the nested loop a skewed window falls back to).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import scalegate
import stretch
from scalegate.numba_cache import mark_warm, warmed
from stretch import generate
from stretch.errors import StretchError
from stretch.io import write_table
from stretch.model._byte_table import ByteTable
from stretch.model.schema import ColumnType, Schema
from stretch.operators.catalog import build
from stretch.operators.kernels import BandJoinSpec
from stretch.vsn import Pipeline

__all__ = ["cold", "warm", "warm_operators"]

PACKAGES = (Path(stretch.__file__).parent, Path(scalegate.__file__).parent)
"""The packages whose kernels ``warm`` compiles."""

Replay = Callable[[Sequence[str]], int]
"""The CLI's entry point (``stretch.cli.main``): runs ``stretch ARGS``, returns the status."""


def warm(run: Replay, say: Callable[[str], None]) -> None:
    """Compile the kernels: replay each operator with ``run``, then a status and a compaction.

    Args:
        run: Runs one ``stretch`` command line in this process (``stretch.cli.main``).
        say: Reports each step (e.g. to stderr).

    Raises:
        RuntimeError: a replay failed (its status is not 0).

    """
    with tempfile.TemporaryDirectory(prefix="stretch-warm-") as folder:
        commands = _replays(Path(folder))
        for i, command in enumerate(commands, 1):
            say(f"[{i}/{len(commands) + 1}] stretch {' '.join(_short(command, folder))}")
            status = run(command)
            if status:
                msg = f"stretch {' '.join(command)} ended with status {status}"
                raise RuntimeError(msg)
    say(f"[{len(commands) + 1}/{len(commands) + 1}] a pipeline's status, a string compaction")
    _status_and_compaction()
    for root in PACKAGES:
        mark_warm(root)


def warm_operators(
    run: Replay, say: Callable[[str], None], names: Sequence[str], params: Mapping[str, str]
) -> list[str]:
    """Compile user operators' kernels: replay each on rows generated from its schemas.

    Args:
        run: Runs one ``stretch`` command line in this process (``stretch.cli.main``).
        say: Reports each step.
        names: The operators, registered in this process (``load_operators``).
        params: Parameters given to each of them (``--param``), e.g. ``{"ws": "60000"}``.

    Returns:
        One line per operator that could not be replayed (its kernels then compile on its
        first real run); empty when all were.

    """
    failed = []
    given = [part for key, value in params.items() for part in ("--param", f"{key}={value}")]
    with tempfile.TemporaryDirectory(prefix="stretch-warm-") as folder:
        for name in names:
            try:
                commands = _operator_replays(Path(folder), name, params)
            except StretchError as exc:
                failed.append(f"{name}: {exc}")
                continue
            for i, replay in enumerate(commands, 1):
                command = [*replay[:1], *given, *replay[1:]]
                say(f"{name} [{i}/{len(commands)}] stretch {' '.join(_short(command, folder))}")
                status = run(command)
                if status:
                    failed.append(f"{name}: a replay on generated rows ended with status {status}")
                    break
    return failed


def _operator_replays(folder: Path, name: str, params: Mapping[str, str]) -> list[list[str]]:
    """Replays of operator ``name`` over rows of its schemas, written into ``folder``."""
    op = build(name, params)
    tables = [_generated(schema, seed) for seed, schema in enumerate(op.inputs)]
    skewed: list[pa.Table] = []
    band = op.kernel.join.band if isinstance(op.kernel, BandJoinSpec) else None
    if band is not None and band.key is None:  # one column a side, all equal: the nested loop
        left, right = tables
        skewed = [_all_equal(left, band.left[0]), _all_equal(right, band.right[0])]
    _write_layouts(folder, {f"{name}-{i}": table for i, table in enumerate(tables)})
    skew = {f"{name}-skew-{i}": table for i, table in enumerate(skewed)}
    _write_layouts(folder, skew, parts=False)

    def replay(stem: str, layout: str = "") -> list[str]:
        paths = [folder / f"{stem}-{i}{layout}.parquet" for i in range(len(tables))]
        inputs = [part for path in paths for part in ("--input", str(path))]
        return ["replay", "--output", str(folder / "out.parquet"), name, *inputs]

    # Both layouts of the inputs; the skewed ones as one batch.
    commands = [replay(name), replay(name, ".parts")]
    if skewed:
        commands.append(replay(f"{name}-skew"))
    return commands


def _generated(schema: Schema, seed: int, rows: int = 2000) -> pa.Table:
    """``rows`` rows of ``schema``, one per ms, with small values that match now and then."""
    rng = np.random.default_rng(seed)
    values: dict[str, pa.Array] = {"ts": pa.array(np.arange(rows, dtype=np.int64))}
    for column, kind in schema:
        if kind is ColumnType.INT:
            values[column] = pa.array(rng.integers(1, 50, rows))
        elif kind is ColumnType.FLOAT:
            values[column] = pa.array(rng.uniform(1.0, 50.0, rows))
        elif kind is ColumnType.BOOL:
            values[column] = pa.array(rng.random(rows) < 0.5)
        else:
            values[column] = pa.array(rng.choice(["alpha beta", "beta gamma", "delta"], rows))
    return pa.table(values)


def cold() -> bool:
    """Whether the kernels were not compiled ahead for the code as it is.

    True when no ``warm`` ran since the install or since a kernel's source changed; False
    also where it cannot be told (a read-only install).
    """
    return any(warmed(root) is False for root in PACKAGES)


def _replays(folder: Path) -> list[list[str]]:
    """The replays to run, over small inputs written into ``folder``."""
    sj_l, sj_r = generate.scalejoin(2000, 1000.0, seed=1)
    inputs = {
        "sj_l": sj_l,
        "sj_r": sj_r,
        "trades": generate.hedge(2000, 1000.0, seed=1)[0],
        "tweets": generate.tweets(500, 1000.0, seed=1)[0],
    }
    _write_layouts(folder, inputs)
    # every x and a equal: the band index drops its grid (the skewed path's kernels)
    skew = {"skew_l": _all_equal(sj_l, "x"), "skew_r": _all_equal(sj_r, "a")}
    _write_layouts(folder, skew, parts=False)
    out = str(folder / "out.parquet")
    commands = [
        ["replay", "--output", out, "scalejoin"]
        + ["--input", str(folder / "skew_l.parquet"), "--input", str(folder / "skew_r.parquet")]
    ]
    for layout in ("", ".parts"):
        path = {name: str(folder / f"{name}{layout}.parquet") for name in inputs}
        joins = ["--input", path["sj_l"], "--input", path["sj_r"]]
        for m in ("1", "2"):
            for order in (["--sorted"], []):
                replay = ["replay", "--parallelism", m, "--output", out, *order]
                commands += [
                    [*replay, "forward", "--input", path["sj_l"], "--input", path["sj_l"]],
                    [*replay, "scalejoin", *joins],
                    [*replay, "hedge", "--input", path["trades"]],
                    # the nested loop (index=off) that the paper's Q1-Q3 measure
                    [*replay, "scalejoin", "--param", "index=off", *joins],
                    [*replay, "hedge", "--param", "index=off", "--input", path["trades"]],
                    *(
                        [*replay, op, "--input", path["tweets"]]
                        for op in ("wordcount", "paircount", "longest_tweet")
                    ),
                ]
    # One key: its stores outgrow their first size, so compactions carry the band index's
    # grid over (``grid_compact``), which the inputs spread over 16 keys never reach.
    commands.append(["replay", "--output", out, "scalejoin", "--param", "keys=1", *joins])
    # A reconfiguration (out and back in) changes the gates' readers and sources through
    # kernels of their own, the same for every operator (uncompiled, the first
    # reconfiguration after install took 4.7 s instead of about 0.1 s).
    reconfigure = ["--reconfigure", "700:2", "--reconfigure", "1200:1"]
    commands.append(
        ["replay", "--parallelism", "1", *reconfigure, "--output", out, "scalejoin", *joins]
    )
    return commands


def _write_layouts(folder: Path, inputs: Mapping[str, pa.Table], *, parts: bool = True) -> None:
    """Write each input as ``NAME.parquet``, one batch, and ``NAME.parts.parquet``, four.

    The runtime joins the batches of the second, and Numba compiles a kernel apart for
    arrays it may write and for read-only ones (Arrow's), so both layouts reach kernels
    that one alone does not. ``parts=False``: the first layout only.
    """
    for name, table in inputs.items():
        write_table(table, folder / f"{name}.parquet")
        if parts:
            rows = table.num_rows // 4
            pq.write_table(table, folder / f"{name}.parts.parquet", row_group_size=rows)


def _all_equal(table: pa.Table, column: str) -> pa.Table:
    """``table`` with every value of ``column`` equal."""
    index = table.schema.get_field_index(column)
    same = pa.array([5] * table.num_rows, table.schema.field(column).type)
    return table.set_column(index, column, same)


def _status_and_compaction() -> None:
    """Run the kernels no replay above reaches.

    A pipeline's status (``-v``, the REST status and metrics) reads the gates through two
    more, and the string dictionary's compaction packs its bytes through one.
    """
    pipeline = Pipeline(build("scalejoin", {}), 1, 2)
    try:
        pipeline.status(), pipeline.load()
    finally:
        pipeline.shutdown()
    strings = ByteTable()
    strings.number_texts(pa.array(["kept", "dropped"]))
    strings.retain(np.array([True, False]))


def _short(command: list[str], folder: str) -> list[str]:
    """``command`` with the temporary folder left out of its paths."""
    return [part.removeprefix(folder + "/") for part in command]
