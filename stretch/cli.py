"""The ``stretch`` command: replay an operator over files, generate data, run the demo.

Bad input never produces a traceback: every ``StretchError`` (and a bad argument) ends the
command with exit status 2 and one line on stderr naming the file, row and column.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.abc
import importlib.util
import itertools
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType

import numpy as np
import pyarrow as pa
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import cpu_target
from numpy.typing import NDArray

from stretch import __version__
from stretch.bench import BENCHMARKS, DEFAULT_OUTPUT, run_benchmark, split_output
from stretch.errors import InputError, StretchError
from stretch.external_sort import SORT_RUN_BYTES, remove_spill_directories, sorted_by_ts
from stretch.generate import CHUNK_ROWS, CHUNKED, DEFAULT_ROWS
from stretch.io import (
    FORMATS,
    InputFile,
    TableWriter,
    csv_text,
    remove_partial_files,
)
from stretch.join_estimate import (
    DEFAULT_WS_MS,
    REFUSE_COMPARISONS,
    REFUSE_PAIRS,
    estimate_chunks,
    estimate_join,
)
from stretch.model.schema import TS, ColumnType, Schema, conform
from stretch.model.sn import run_sn
from stretch.operators.catalog import CATALOG, build, load_operators
from stretch.progress import ReplayProgress
from stretch.vsn import run_vsn_pieces
from stretch.warm import cold, warm, warm_operators

__all__ = ["main"]


MAX_PARALLELISM = 64
"""The most instances of an operator (the pool size limit of the VSN runtime's gates)."""

log = logging.getLogger("stretch")

PROGRESS_ROWS = 1_000_000
"""Rows per stream from which ``stretch generate`` reports its stages on stderr."""

PROGRESS_INTERVAL_S = 1.0
"""The least time between two of ``stretch generate``'s lines on the rows written so far."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status.

    Ctrl-C (or SIGTERM) stops every command but ``serve`` at once, with status 130 (143)
    and one line, since worker threads hold no state worth saving; ``serve`` shuts down
    gracefully (long-polls answered, operators stopped) and exits 0. A closed stdout
    (``stretch replay ... | head``) ends with status 141.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    # A server logs its events (one line each); other commands only with -v.
    logging.basicConfig(
        level=logging.INFO if args.verbose or args.command == "serve" else logging.WARNING,
        format="%(message)s",
    )
    # The modules' objects live as long as the process: keep them out of the cyclic
    # collector, which otherwise walks them all at each full collection while the
    # pipeline allocates (about a tenth of a replay's CPU time).
    gc.freeze()
    ahead = None
    if argv is None and args.command in ("replay", "serve"):
        _skip_pandas_probe()
    if argv is None and args.command == "replay":
        ahead = _numba_ahead()
    if argv is None and args.command in _RUNS_KERNELS and _interactive() and cold():
        log.warning(
            "stretch: the kernels of this install are not compiled yet: this run "
            "compiles those it uses (seconds each, once); 'stretch warm' compiles "
            "them all ahead"
        )
    stopping = () if args.command == "serve" else (signal.SIGINT, signal.SIGTERM)
    before = {signum: signal.signal(signum, _exit_on_signal) for signum in stopping}
    try:
        result: int = args.run(args)
    except StretchError as exc:
        sys.stderr.write(f"stretch: error: {exc}\n")
        return 2
    except BrokenPipeError:
        # The reader left: send what Python still flushes at exit nowhere, and stop.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
        if ahead is not None:
            ahead.join(NUMBA_AHEAD_S)
    return result


EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE

_RUNS_KERNELS = ("replay", "serve", "pipeline", "demo")
"""The commands that run operators: run before ``stretch warm``, they say they compile."""


def _interactive() -> bool:
    """Whether stderr is a terminal: hints are for a person, not for a script's log."""
    return sys.stderr.isatty()


class _NoPandas(importlib.abc.MetaPathFinder):
    """An import finder that reports pandas missing (``_skip_pandas_probe``)."""

    def find_spec(self, fullname: str, path: object, target: object = None) -> None:
        if fullname == "pandas":
            raise ModuleNotFoundError(name=fullname)


def _skip_pandas_probe() -> None:
    """Let pyarrow settle, without importing pandas, that a replay holds no pandas objects.

    The first time pyarrow asks whether a value is a pandas object (in any ``pa.array``,
    ``pa.scalar`` or ``to_numpy``) it imports pandas when it is installed, as it is with
    the ``spark`` extra: about 0.2 s of the 0.86 s that a replay of a few rows took as a
    process, and a sidecar paid it on its first batch (after each start or restart). A
    replay or a sidecar never hands pyarrow a pandas object, so that one probe runs with
    pandas hidden; pyarrow's explicit pandas paths (``to_pandas``, ``from_pandas``) still
    import it when called. Only for ``stretch replay`` and ``stretch serve`` run as
    commands (``main()`` without ``argv``), so a caller's own process is never changed; a
    no-op when pandas is already imported.
    """
    hide = _NoPandas()
    sys.meta_path.insert(0, hide)
    try:
        pa.scalar(0)
    finally:
        sys.meta_path.remove(hide)


NUMBA_AHEAD_S = 60.0
"""How long a command waits at its end for ``_numba_ahead``'s thread (it takes about 0.15 s)."""


def _numba_ahead() -> threading.Thread:
    """Start loading Numba's registries now, on a thread of their own; return the thread.

    The first kernel a process runs, even one loaded from the cache, first has Numba load
    its typing and lowering registries: about 0.15 s of imports, under Numba's compiler
    lock. A replay reads its input first, and reading Parquet or CSV releases the GIL, so
    the two overlap (`stretch replay forward` on 2 x 1.5M rows: 6% less wall time as a
    process). The thread takes the compiler lock, as a compile does, so a kernel called
    meanwhile waits for it instead of loading the registries beside it. It then imports
    ``numpy.ma``, which Numba's first look at an array's type imports (30-60 ms) on
    whichever runtime thread gets there first (a replay of 2 x 20,000 rows: 0.89x and
    0.90x the wall time, `farm-bench -n 15`, both orders).
    """

    def load() -> None:
        with global_compiler_lock:
            cpu_target.target_context.refresh()
        import numpy.ma  # noqa: F401, PLC0415

    thread = threading.Thread(target=load, name="numba-ahead")
    thread.start()
    return thread


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    """Stop now: skip joining the runtime's threads (daemons) and print no traceback.

    An output file being written is left as it was (its partial file is deleted).
    """
    remove_partial_files()
    remove_spill_directories()
    sys.stderr.write(f"stretch: interrupted ({signal.Signals(signum).name})\n")
    sys.stderr.flush()
    os._exit(128 + signum)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stretch",
        description="STRETCH O+ operators with virtual shared-nothing parallelism (see README.md).",
    )
    parser.add_argument("--version", action="version", version=f"stretch {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log progress (also after COMMAND)"
    )
    # -v after the command too; SUPPRESS keeps a -v given before it.
    verbose = argparse.ArgumentParser(add_help=False)
    verbose.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log progress"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    replay = commands.add_parser(
        "replay",
        parents=[verbose],
        help="run an operator over input files",
        description="Run a catalog operator over one file per input stream (formats by "
        f"extension: {', '.join(FORMATS)}). Each file needs an int64 'ts' column "
        "(event time in ms) or a timestamp column (Parquet/Arrow timestamps of any unit, ISO 8601 "
        "text in CSV/JSON lines; converted to ms, a zoneless one read as UTC) and the "
        "operator's columns. 'hedge' takes one file "
        "that feeds both of its streams (or two: L, then R). Parquet and Arrow files are "
        "read a batch at a time as the run takes them (CSV and JSON lines too when over 256 "
        "MiB, else whole), and the output is written as it comes.",
        epilog="operators: " + "; ".join(f"{n}: {s.description}" for n, s in CATALOG.items()),
    )
    replay.add_argument(
        "operator", help=f"one of {', '.join(CATALOG)}, or one that --operators registers"
    )
    replay.add_argument(
        "--input",
        action="append",
        required=True,
        metavar="PATH",
        help="input file of the next source, in stream order (repeatable)",
    )
    replay.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="K=V",
        help="operator parameter, e.g. ws=60000 (repeatable)",
    )
    replay.add_argument(
        "--output",
        metavar="PATH",
        help="output file (format by extension; missing folders are made, an --input is "
        "refused); CSV on stdout if omitted",
    )
    replay.add_argument(
        "--operators",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE (e.g. mypackage.ops), which registers operators with "
        "stretch.register (repeatable); operators of installed packages' "
        "'stretch.operators' entry points are loaded too",
    )
    replay.add_argument(
        "--runtime",
        choices=("vsn", "sn"),
        default="vsn",
        help="vsn: threads sharing input and state (default); sn: the sequential "
        "shared-nothing reference runtime (plain Python, for checking: it holds its input "
        "and output in memory)",
    )
    replay.add_argument(
        "--parallelism",
        type=int,
        default=1,
        metavar="M",
        help="number of operator instances (default 1)",
    )
    replay.add_argument(
        "--max-parallelism",
        type=int,
        default=None,
        metavar="N",
        help="pool size n for the vsn runtime (default: the largest of M and the "
        "--reconfigure targets)",
    )
    replay.add_argument(
        "--reconfigure",
        action="append",
        default=[],
        metavar="TS:M",
        help="vsn: switch to M instances once the watermark passes TS",
    )
    replay.add_argument(
        "--sorted",
        action="store_true",
        help="assert every input is sorted by ts (an unsorted row is an error, found as "
        "it is read); otherwise an input out of order is sorted first: in memory if it "
        "was read whole (or with --runtime sn), else through sorted runs of "
        f"{SORT_RUN_BYTES >> 20} MiB spilled to TMPDIR",
    )
    replay.set_defaults(run=_replay)

    generate = commands.add_parser(
        "generate",
        parents=[verbose],
        help="write synthetic input streams",
        description="scalejoin: streams L and R (section 8.3); hedge: a NYSE-like trade "
        "stream (section 8.6); tweets: for wordcount, paircount, longest_tweet. The rows are "
        f"made and written {CHUNK_ROWS:,} at a time, so memory does not grow with --rows; "
        "the same arguments write the same rows.",
    )
    generate.add_argument("kind", choices=sorted(CHUNKED))
    generate.add_argument(
        "--rows",
        type=int,
        default=None,
        help="rows per stream (default "
        + ", ".join(f"{kind} {rows}" for kind, rows in sorted(DEFAULT_ROWS.items()))
        + ")",
    )
    generate.add_argument(
        "--rate",
        type=float,
        default=1000.0,
        help="mean tuples per second of event time (default 1000)",
    )
    generate.add_argument("--seed", type=int, default=0)
    generate.add_argument(
        "--output",
        action="append",
        required=True,
        metavar="PATH",
        help="output file per stream (missing folders are made); with one PATH for scalejoin, "
        "writes PATH's stem + _l and _r",
    )
    generate.add_argument(
        "--force",
        action="store_true",
        help="write streams whose join would write over "
        f"{REFUSE_PAIRS:.0e} rows or compare over {REFUSE_COMPARISONS:.0e} pairs "
        "(refused otherwise; over a hundredth of that is a warning)",
    )
    generate.set_defaults(run=_generate)

    bench = commands.add_parser(
        "bench",
        parents=[verbose],
        help="run one of the experiments in benchmarks/",
        description="Run benchmarks/bench_NAME.py of a source checkout with this Python; "
        "arguments after NAME go to the script (NAME --help lists them). Results (JSON, "
        f"PNG) go to --output DIR, by default ./{DEFAULT_OUTPUT}; the repository's committed "
        "benchmarks/results/ only if named as DIR.",
    )
    bench.add_argument(
        "--output",
        metavar="DIR",
        default=DEFAULT_OUTPUT,
        help=f"folder for the results (default ./{DEFAULT_OUTPUT}); also accepted after NAME",
    )
    bench.add_argument("name", choices=BENCHMARKS, help="the experiment")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    bench.set_defaults(run=_bench)

    serve = commands.add_parser(
        "serve",
        parents=[verbose],
        help="run the REST sidecar service (uvicorn)",
        description="Serve the REST API under /v1 (OpenAPI at /docs). With a token (the "
        "first line of --token-file, else $STRETCH_TOKEN) every /v1 route and /metrics need "
        "'Authorization: Bearer <token>'; /healthz and /readyz stay open. Without a token "
        "the server warns, and refuses a host other than loopback unless --insecure.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    serve.add_argument("--port", type=int, default=8321, help="TCP port (default 8321)")
    serve.add_argument("--token-file", metavar="PATH", help="file holding the bearer token")
    serve.add_argument(
        "--operators",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE (e.g. mypackage.ops), which registers operators with "
        "stretch.register, before serving (repeatable); operators of installed packages' "
        "'stretch.operators' entry points are loaded too",
    )
    serve.add_argument(
        "--access-log", action="store_true", help="log one line per request (uvicorn's)"
    )
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="serve without a token on a host other than loopback (anyone reaching it "
        "can read and change every operator)",
    )
    serve.add_argument(
        "--max-operators", type=int, default=32, help="operators at once (default 32)"
    )
    serve.add_argument(
        "--max-pool-threads",
        type=int,
        default=512,
        help="threads of all operators together, n + 2 each (default 512)",
    )
    serve.add_argument(
        "--max-long-polls",
        type=int,
        default=256,
        help="output reads waiting for rows at once (default 256)",
    )
    serve.add_argument(
        "--state-dir",
        metavar="DIR",
        help="keep every operator durably in DIR: each acknowledged request is on disk "
        "(fsync'd) and a restart restores every operator from its latest checkpoint and "
        "journal (docs/api.md, 'Durability'); without it state is in memory only",
    )
    serve.add_argument(
        "--checkpoint-interval-s",
        type=float,
        default=10.0,
        metavar="S",
        help="checkpoint each changed operator every S seconds (default 10; with --state-dir)",
    )
    serve.add_argument(
        "--header-timeout-s",
        type=float,
        default=10.0,
        metavar="S",
        help="a connection that has not sent a request's headers within S seconds gets "
        "408 and is closed (default 10)",
    )
    serve.add_argument(
        "--body-timeout-s",
        type=float,
        default=60.0,
        metavar="S",
        help="a request body not complete S seconds after its headers gets 408 and its "
        "connection is closed (default 60)",
    )
    serve.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        metavar="PID",
        help="PID is the process that starts this server: shut down as on SIGTERM within "
        "a second of its exit, kill -9 included (stretch pipeline --sidecars passes its "
        "own); refused if PID is not this server's parent",
    )
    serve.set_defaults(run=_serve)

    pipeline = commands.add_parser(
        "pipeline",
        parents=[verbose],
        help="run an operator as a Spark Structured Streaming job over Parquet directories",
        description="Read each input directory of Parquet files as a file stream, its files "
        "in name order (one directory per "
        "operator source; one for 'hedge'), run the operator in the sidecar, and write its "
        "ordered output (with an 'offset' column giving the order) to a Parquet directory. "
        "Processes the files present at start, then drains the output. Without --url it "
        "starts its own sidecar on loopback and a local[*] Spark session. Needs the extra "
        "stretch[spark]. Inputs, --url and the token are checked before Spark starts; "
        "Spark's own output goes to CHECKPOINT/pipeline.log (to stderr with -v). "
        "Rerun with the same --checkpoint after a crash to continue.",
    )
    pipeline.add_argument("operator", help=f"one of {', '.join(CATALOG)}")
    pipeline.add_argument(
        "--input",
        action="append",
        required=True,
        metavar="DIR",
        help="directory of Parquet files of the next source (repeatable)",
    )
    pipeline.add_argument("--output", required=True, metavar="DIR", help="output directory")
    pipeline.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="K=V",
        help="operator parameter, e.g. ws=60000 (repeatable)",
    )
    pipeline.add_argument(
        "--parallelism",
        type=int,
        default=1,
        metavar="M",
        help="instances of the operator at start (default 1); like --max-parallelism and "
        "--autoscale, it applies when the job creates its operator, which a rerun continues",
    )
    pipeline.add_argument(
        "--max-parallelism",
        type=int,
        default=None,
        metavar="N",
        help="pool size n, the most instances (default: the sidecar's, max(M, 4))",
    )
    pipeline.add_argument(
        "--url",
        help="a running sidecar, or several separated by commas: the shards of the operator "
        "(default: start one on loopback for this job)",
    )
    pipeline.add_argument(
        "--sidecars",
        type=int,
        default=None,
        metavar="N",
        help="start N local sidecar processes (each its own port and state) and shard the "
        "operator over them; not with --url",
    )
    pipeline.add_argument("--token-file", metavar="PATH", help="the sidecar's bearer token")
    pipeline.add_argument(
        "--name", help="the operator's name on the sidecar (default pipeline-OPERATOR)"
    )
    pipeline.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="checkpoint directory of the job's queries (default OUTPUT/_checkpoint)",
    )
    pipeline.add_argument(
        "--trigger-rows",
        type=int,
        default=None,
        metavar="R",
        help="most output rows per micro-batch of the reading query (one sidecar only: "
        "refused with several, --sidecars N or --url A,B)",
    )
    pipeline.add_argument(
        "--autoscale",
        choices=("threshold", "model"),
        default=None,
        metavar="POLICY",
        help="create the operator under an autoscale policy: 'threshold' (the paper's Q4, "
        "measured load) or 'model' (Q5, predicted work); default: fixed --parallelism",
    )
    pipeline.add_argument(
        "--files-per-trigger",
        type=int,
        default=None,
        metavar="F",
        help="input files per micro-batch of each writing query (default: as many whole "
        "files as hold 131,072 rows, or the most the operator takes, at least one); each "
        "input directory's files are read in name order, whatever their modification times",
    )
    pipeline.add_argument(
        "--allowed-lateness-ms",
        type=int,
        default=None,
        metavar="MS",
        help="how far behind the largest ts seen a row may arrive (the writer option "
        "allowedLatenessMs; default: the operator's, 0 when the job creates it)",
    )
    pipeline.add_argument(
        "--late-rows",
        choices=("fail", "drop"),
        default="fail",
        help="a row behind its source's released watermark fails the job naming its file "
        "(fail, default) or is dropped and counted (drop): the writer option lateRows",
    )
    pipeline.set_defaults(run=_pipeline)

    warm_command = commands.add_parser(
        "warm",
        parents=[verbose],
        help="compile the kernels into Numba's cache (once after install)",
        description="Replay every catalog operator on a few rows (parallelism 1 and 2, "
        "sorted and not, reconfigured once) so that Numba compiles each kernel into its "
        "cache: the first real 'stretch replay' then runs at the warm speed instead of "
        "compiling for seconds. './dev install' runs it; after a plain 'pip install', run "
        "it once (about 1.5 minutes on two cores). Run it again after a kernel's source "
        "changed. With --operators MODULE it then compiles the kernels of the operators "
        "MODULE registers (a container image that serves them runs it at build time). "
        "With the extra stretch[spark] it then runs a small Spark job that "
        "archives the classes Spark's JVM loads, so that every later local Spark session "
        "('stretch pipeline', 'stretch demo') starts about 3 s sooner (about 40 s, once "
        "for each install of PySpark and Java; 160-190 MB under ~/.cache/stretch).",
    )
    warm_command.add_argument(
        "--operators",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE, which registers operators with stretch.register (repeatable), "
        "and compile their kernels too (a stretch.band_join predicate's: about 12 s each) by "
        "replaying each on 2,000 generated rows of its input schemas; operators of installed "
        "packages' 'stretch.operators' entry points are compiled too",
    )
    warm_command.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="K=V",
        help="a parameter for each of those operators, e.g. ws=60000 (repeatable)",
    )
    warm_command.add_argument(
        "--skip-spark",
        action="store_true",
        help="leave out the archive of Spark's classes",
    )
    warm_command.set_defaults(run=_warm)

    demo = commands.add_parser(
        "demo",
        parents=[verbose],
        help="the main job: a generated NYSE-like day through Spark and 'hedge'",
        description="Generate a trading day of trades as Parquet files, run them through "
        "a Spark Structured Streaming job into the hedge join in an embedded sidecar and "
        "back into Spark (Parquet output), then check the output against 'stretch replay' "
        "(the same join in one process) and say what was found. Exit status 1 if they "
        "differ. Needs the extra "
        "stretch[spark].",
    )
    demo.add_argument("--rows", type=int, default=100_000, help="trades (default 100000)")
    demo.add_argument(
        "--rate",
        type=float,
        default=None,
        help="mean trades per second of event time (default: the trades spread over a "
        "6.5-hour trading day)",
    )
    demo.add_argument("--seed", type=int, default=7)
    demo.add_argument("--parallelism", type=int, default=2, help="instances at start (default 2)")
    demo.add_argument(
        "--autoscale",
        choices=("threshold", "model", "off"),
        default="model",
        help="the join's autoscale policy (default model; off: fixed --parallelism)",
    )
    demo.add_argument(
        "--files", type=int, default=13, help="Parquet files (micro-batches) of the day"
    )
    demo.add_argument(
        "--keep",
        "--workdir",
        dest="workdir",
        metavar="DIR",
        help="write the trades, the pairs and the checkpoints here and keep them (default: "
        "a temporary directory, deleted at the end)",
    )
    demo.set_defaults(run=_demo)
    return parser


def _replay(args: argparse.Namespace) -> int:
    params = _params(args.param)
    for flag, value in (
        ("--parallelism", args.parallelism),
        ("--max-parallelism", args.max_parallelism),
    ):
        if value is not None and not 1 <= value <= MAX_PARALLELISM:
            msg = f"{flag} must be in 1..{MAX_PARALLELISM}, got {value}"
            raise InputError(msg)
    for name in load_operators(args.operators):
        log.info("loaded operator %r", name)
    if args.output is not None:
        _refuse_output_over_input(args.output, args.input)
    writer = None if args.output is None else TableWriter(args.output)  # before any work
    schedule = [_split_reconfigure(text) for text in args.reconfigure]
    if schedule and args.runtime != "vsn":
        msg = "--reconfigure needs --runtime vsn"
        raise InputError(msg)
    files = [InputFile(path) for path in args.input]
    if args.operator == "forward" and "columns" not in params and files:
        params["columns"] = _columns_of(files[0].schema, args.input[0])
        params.setdefault("inputs", str(len(files)))
    op = build(args.operator, params)
    # A self-join's one file feeds each of its streams: read once for all of them.
    shared = CATALOG[args.operator].one_stream and len(files) == 1
    if shared:
        files, args.input = files * op.n_inputs, args.input * op.n_inputs
    if len(files) != op.n_inputs:
        takes = str(op.n_inputs)
        if CATALOG[args.operator].one_stream:
            takes = f"1 (fed to each of its {op.n_inputs} streams) or {takes}"
        msg = f"operator {op.name!r} takes {takes} input file(s), got {len(files)}"
        raise InputError(msg)
    for file, schema, path in zip(files, op.inputs, args.input, strict=True):
        # The columns and the first rows, before the run: later rows are checked as read.
        conform(next(file.batches(), file.schema.empty_table()), schema, path)
    rows_in = sum(file.num_rows for file in files)
    log.info(
        "%s: replaying %d rows from %d input(s) on the %s runtime, %d instance(s)",
        op.name,
        rows_in,
        len(files),
        args.runtime,
        args.parallelism,
    )
    started = time.perf_counter()
    if args.runtime == "vsn":
        progress = ReplayProgress(op.name, log, rows_total=rows_in)
        if shared and len(set(op.inputs)) == 1:
            rows = _rows(files[0], op.inputs[0], args.input[0], args.sorted)
            streams = (
                [rows] * len(files)
                if isinstance(rows, pa.Table)
                else list(itertools.tee(rows, len(files)))
            )
        else:
            streams = [
                _rows(f, schema, path, args.sorted)
                for f, schema, path in zip(files, op.inputs, args.input, strict=True)
            ]
        pieces = run_vsn_pieces(
            op,
            streams,
            args.parallelism,
            args.max_parallelism,
            schedule,
            on_start=progress.watch if args.verbose else None,
        )
        try:
            rows_out = _write_output(pieces, writer)
        finally:
            pieces.close()
            progress.stop()
    else:
        tables = [
            _sorted(conform(f.read(), schema, path), path, args.sorted)
            for f, schema, path in zip(files, op.inputs, args.input, strict=True)
        ]
        rows_out = _write_output(iter([run_sn(op, tables, args.parallelism)]), writer)
    elapsed = time.perf_counter() - started
    log.info(
        "%s: %d rows in, %d rows out in %.2f s (output written)",
        op.name,
        rows_in,
        rows_out,
        elapsed,
    )
    return 0


def _refuse_output_over_input(output: str, inputs: Sequence[str]) -> None:
    """Refuse an ``--output`` that is one of the ``--input`` files (it would replace it)."""
    for path in inputs:
        with contextlib.suppress(OSError):  # a missing input is reported when it is opened
            if os.path.samefile(output, path):
                msg = f"--output {output} is also an --input: write the output elsewhere"
                raise InputError(msg)


def _params(texts: Sequence[str]) -> dict[str, str]:
    """The ``--param K=V`` flags as a dict; a key given twice is an error."""
    params: dict[str, str] = {}
    for text in texts:
        key, sep, value = text.partition("=")
        key = key.strip()
        if not sep or not key:
            msg = f"--param must look like K=V, got {text!r}"
            raise InputError(msg)
        if key in params:
            msg = f"--param {key} is given twice ({params[key]!r} and {value.strip()!r})"
            raise InputError(msg)
        params[key] = value.strip()
    return params


def _split_reconfigure(text: str) -> tuple[int, int]:
    ts, sep, parallelism = text.partition(":")
    try:
        if not sep:
            raise ValueError(text)
        return int(ts), int(parallelism)
    except ValueError:
        msg = f"--reconfigure must look like TS:M (two integers), got {text!r}"
        raise InputError(msg) from None


def _columns_of(schema: pa.Schema, path: str) -> str:
    """Forward's ``columns`` param from the payload columns of ``schema``, read from ``path``."""
    kinds = []
    for field in schema:
        if field.name == TS:
            continue
        dtype = field.type
        kind = ColumnType.holding(dtype.value_type if pa.types.is_dictionary(dtype) else dtype)
        if kind is None:
            msg = (
                f"{path}: column {field.name!r} has type {field.type}, which forward cannot "
                f"carry (it carries {', '.join(t.value for t in ColumnType)} columns)"
            )
            if pa.types.is_null(dtype):
                msg += (
                    "; the column holds no value, so its type is unknown: give the file at "
                    "least one row with a value, or use a typed format (Parquet, Arrow)"
                )
            raise InputError(msg)
        kinds.append(f"{field.name}:{kind.value}")
    if not kinds:
        msg = f"{path}: no column besides {TS!r} for forward to carry"
        raise InputError(msg)
    return ",".join(kinds)


def _rows(
    file: InputFile, schema: Schema, path: str, asserted: bool
) -> pa.Table | Iterator[pa.Table]:
    """An input's rows for the vsn runtime, in ts order, read as the run takes them.

    The file's batches, when it is in ts order (asserted, or checked by a pass over its
    ``ts`` column). Else, for a file read whole when opened, the table sorted in memory
    (spilling it would only add the disk); for one read as it goes, its batches sorted by
    ``ts`` in bounded memory (an external sort, ``stretch.external_sort``).
    """
    if asserted or _in_ts_order(file, path):
        return _checked(file.batches(), schema, path)
    if file.in_memory:
        return _sorted(conform(file.read(), schema, path), path, asserted=False)
    return sorted_by_ts(_conformed(file.batches(), schema, path), path)


def _checked(batches: Iterator[pa.Table], schema: Schema, path: str) -> Iterator[pa.Table]:
    """The batches conformed to ``schema``; an unsorted row is an error (``--sorted``)."""
    for table, unsorted in _in_order(_conformed(batches, schema, path), path):
        if unsorted is not None:
            raise unsorted
        yield table


def _in_ts_order(file: InputFile, path: str) -> bool:
    """Whether the file's rows are in ts order, from a pass over its ``ts`` column alone.

    No pass where opening the file found it out (a streamed CSV or JSON lines file).
    """
    if file.in_ts_order is not None:
        return file.in_ts_order
    ts_only = _conformed(file.batches([TS]), Schema(()), path)
    return all(unsorted is None for _, unsorted in _in_order(ts_only, path))


def _conformed(batches: Iterator[pa.Table], schema: Schema, path: str) -> Iterator[pa.Table]:
    """The batches conformed to ``schema``; messages name a row by its row in the file."""
    done = 0
    for batch in batches:
        table = conform(batch, schema, path, done)
        done += table.num_rows
        yield table


def _in_order(
    tables: Iterator[pa.Table], path: str
) -> Iterator[tuple[pa.Table, InputError | None]]:
    """Each table, and the error for its first row out of ts order, if any."""
    done, last = 0, None
    for table in tables:
        ts = table.column(TS).to_numpy()
        row = _first_unsorted(ts, last)
        if row is None:
            yield table, None
        else:
            before = int(ts[row - 1]) if row else last
            yield table, _unsorted(path, done + row, int(ts[row]), before)
        done += len(ts)
        last = int(ts[-1]) if len(ts) else last


def _first_unsorted(ts: NDArray[np.int64], last: int | None) -> int | None:
    """The first index of ``ts`` whose value is below the one before (``last`` before 0)."""
    if len(ts) and last is not None and ts[0] < last:
        return 0
    backwards = np.flatnonzero(ts[1:] < ts[:-1])
    return int(backwards[0]) + 1 if len(backwards) else None


def _sorted(table: pa.Table, path: str, asserted: bool) -> pa.Table:
    """The table in ts order; with ``asserted``, an unsorted row is an error instead."""
    ts = table.column(TS).to_numpy()
    row = _first_unsorted(ts, None)
    if row is None:
        return table
    if asserted:
        raise _unsorted(path, row, int(ts[row]), int(ts[row - 1]))
    return table.take(pa.array(np.argsort(ts, kind="stable")))


def _unsorted(path: str, row: int, ts: int, before: int | None) -> InputError:
    """The error for row ``row`` (0-based) of ``path``, whose ``ts`` is below ``before``."""
    msg = (
        f"{path}: row {row + 1}, column 'ts': {ts} is before the previous row's {before} "
        "(input asserted --sorted)"
    )
    return InputError(msg)


def _write_output(pieces: Iterator[pa.Table], writer: TableWriter | None) -> int:
    """Write the output's pieces as they come with ``writer`` (CSV on stdout if None).

    Returns the rows written. A file appears whole once the last piece is in (see
    ``TableWriter``); on stdout the pieces are printed as they come.
    """
    rows = 0
    if writer is None:
        for i, piece in enumerate(pieces):
            sys.stdout.writelines(csv_text(piece, header=i == 0))
            rows += piece.num_rows
        return rows
    with writer:
        for piece in pieces:
            writer.write(piece)
            rows += piece.num_rows
    return rows


def _generate(args: argparse.Namespace) -> int:
    if args.seed < 0:
        msg = f"--seed must be >= 0, got {args.seed}"
        raise InputError(msg)
    if args.rows is not None and args.rows < 0:
        msg = f"--rows must be >= 0, got {args.rows}"
        raise InputError(msg)
    if not (math.isfinite(args.rate) and args.rate > 0):
        msg = f"--rate must be a positive, finite number of tuples/s, got {args.rate}"
        raise InputError(msg)
    rows = DEFAULT_ROWS[args.kind] if args.rows is None else args.rows
    progress = _StageLines(rows >= PROGRESS_ROWS)
    progress.stage(f"generating {rows:,} rows per stream of {args.kind}")

    def chunks(*, ts_only: bool = False) -> Iterator[list[pa.Table]]:
        more = {"ts_only": True} if ts_only else {}  # tweets make no join: no such option
        return CHUNKED[args.kind](rows=rows, rate=args.rate, seed=args.seed, **more)

    try:
        made = chunks()
        first = next(made)
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    paths = [Path(p) for p in args.output]
    if len(paths) == 1 and len(first) == 2:
        stem, suffix = paths[0].with_suffix(""), paths[0].suffix
        paths = [Path(f"{stem}_l{suffix}"), Path(f"{stem}_r{suffix}")]
    if len(paths) != len(first):
        msg = f"{args.kind} writes {len(first)} stream(s); give {len(first)} --output path(s)"
        raise InputError(msg)
    if args.kind in DEFAULT_WS_MS:
        progress.stage("estimating the join's work")
        if len(first[0]) == rows:  # the chunk in hand is all there is: not made again
            estimate = estimate_join(args.kind, first)
        else:
            estimate = estimate_chunks(args.kind, chunks)
        if estimate.refused and not args.force:
            msg = f"{estimate.describe(rows, args.rate)}; --force writes it anyway"
            raise InputError(msg)
        if estimate.explodes:
            sys.stderr.write(f"warning: {estimate.describe(rows, args.rate)}\n")
    writers = [TableWriter(path) for path in paths]  # each file appears whole at the end
    with contextlib.ExitStack() as stack:
        for writer in writers:
            stack.enter_context(writer)
        written = 0
        tables: list[pa.Table] | None = first
        del first  # each chunk is dropped before the next is made
        while tables is not None:
            for writer, table in zip(writers, tables, strict=True):
                writer.write(table)
            written += tables[0].num_rows
            line = f"wrote {written:,} of {rows:,} rows per stream"
            progress.stage(line, at_most_every_s=0.0 if written == rows else PROGRESS_INTERVAL_S)
            tables = None
            tables = next(made, None)
    for path in paths:
        sys.stdout.write(f"wrote {rows} rows to {path}\n")
    progress.stage("done")
    return 0


class _StageLines:
    """Stage lines on stderr with the seconds since the start (``generate``, ``warm``)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.start = time.perf_counter()
        self.last = -math.inf

    def stage(self, what: str, *, at_most_every_s: float = 0.0) -> None:
        """Print ``what``, unless a line went out less than ``at_most_every_s`` ago."""
        elapsed_s = time.perf_counter() - self.start
        if self.enabled and elapsed_s - self.last >= at_most_every_s:
            self.last = elapsed_s
            sys.stderr.write(f"[{elapsed_s:6.1f} s] {what}\n")
            sys.stderr.flush()


def _bench(args: argparse.Namespace) -> int:
    output, rest = split_output(args.output, args.args)
    return run_benchmark(args.name, rest, output)


def _serve(args: argparse.Namespace) -> int:
    from stretch.api.limits import ServiceLimits  # noqa: PLC0415 - the web stack loads only here
    from stretch.api.serve import serve  # noqa: PLC0415

    _require_positive(
        [
            ("--max-operators", args.max_operators),
            ("--max-pool-threads", args.max_pool_threads),
            ("--max-long-polls", args.max_long_polls),
        ]
    )
    for name in load_operators(args.operators):
        log.info("loaded operator %r", name)
    try:
        limits = ServiceLimits(
            max_operators=args.max_operators,
            max_pool_threads=args.max_pool_threads,
            max_long_polls=args.max_long_polls,
        )
        serve(
            args.host,
            args.port,
            args.token_file,
            insecure=args.insecure,
            access_log=args.access_log,
            limits=limits,
            state_dir=args.state_dir,  # serve refuses "" (an unset $VAR, say)
            checkpoint_interval_s=args.checkpoint_interval_s,
            header_timeout_s=args.header_timeout_s,
            body_timeout_s=args.body_timeout_s,
            parent_pid=args.parent_pid,
        )
    except (OSError, ValueError) as exc:
        raise InputError(str(exc)) from exc
    return 0


def _require_positive(flags: Sequence[tuple[str, int]]) -> None:
    """Raise ``InputError`` naming the first ``(flag, value)`` below 1."""
    for flag, value in flags:
        if value < 1:
            msg = f"{flag} must be >= 1, got {value}"
            raise InputError(msg)


def _pipeline(args: argparse.Namespace) -> int:
    _require_positive(
        [
            ("--parallelism", args.parallelism),
            (
                "--files-per-trigger",
                1 if args.files_per_trigger is None else args.files_per_trigger,
            ),
            ("--trigger-rows", 1 if args.trigger_rows is None else args.trigger_rows),
            ("--sidecars", 1 if args.sidecars is None else args.sidecars),
            ("--max-parallelism", 1 if args.max_parallelism is None else args.max_parallelism),
        ]
    )
    if args.max_parallelism is not None and args.parallelism > args.max_parallelism:
        msg = (
            f"--parallelism {args.parallelism} is above --max-parallelism "
            f"{args.max_parallelism} (the pool's size)"
        )
        raise InputError(msg)
    if args.allowed_lateness_ms is not None and args.allowed_lateness_ms < 0:
        msg = f"--allowed-lateness-ms must be >= 0, got {args.allowed_lateness_ms}"
        raise InputError(msg)
    if args.sidecars is not None and args.url is not None:
        msg = "give --url (running sidecars) or --sidecars N (start them), not both"
        raise InputError(msg)
    shards = args.sidecars or len([u for u in (args.url or "").split(",") if u.strip()])
    if args.trigger_rows is not None and shards > 1:
        several = f"--sidecars {shards}" if args.sidecars else f"--url with {shards} sidecars"
        msg = (
            f"--trigger-rows applies to one sidecar only, not with {several}: a sharded "
            "reader reads up to the shards' common output watermark per micro-batch; leave "
            "--trigger-rows out, or run one sidecar"
        )
        raise InputError(msg)
    try:
        from stretch.spark.cli import run_pipeline_command  # noqa: PLC0415 - needs pyspark
    except ImportError as exc:
        msg = f"'stretch pipeline' needs the extra stretch[spark]: {exc}"
        raise InputError(msg) from exc
    return run_pipeline_command(
        args.operator,
        [Path(p) for p in args.input],
        Path(args.output),
        params=_params(args.param),
        parallelism=args.parallelism,
        max_parallelism=args.max_parallelism,
        url=args.url,
        sidecars=args.sidecars,
        token_file=args.token_file,
        name=args.name,
        checkpoint=Path(args.checkpoint) if args.checkpoint else None,
        trigger_rows=args.trigger_rows,
        files_per_trigger=args.files_per_trigger,
        out=sys.stdout,
        autoscale=args.autoscale,
        late_rows=args.late_rows,
        allowed_lateness_ms=args.allowed_lateness_ms,
        verbose=args.verbose,
    )


def _warm(args: argparse.Namespace) -> int:
    params = _params(args.param)
    names = load_operators(args.operators)  # a module that cannot be loaded: exit 2 now
    if params and not names:
        msg = "--param is for the operators of --operators modules and entry points; none loaded"
        raise InputError(msg)
    stages = _StageLines(enabled=True)
    try:
        warm(main, stages.stage)
    except RuntimeError as exc:
        sys.stderr.write(f"stretch: warm failed: {exc}\n")
        return 1
    stages.stage("done: the kernels are in Numba's cache")
    if names:
        failed = warm_operators(main, stages.stage, names, params)
        for line in failed:
            sys.stderr.write(f"stretch: warm: operator {line}; it compiles on its first run\n")
        if failed:
            return 1
        stages.stage(f"done: the kernels of {', '.join(names)} are in Numba's cache")
    if args.skip_spark or importlib.util.find_spec("pyspark") is None:
        return 0
    from stretch.spark.class_archive import archive_path, options  # noqa: PLC0415
    from stretch.spark.class_archive_job import build  # noqa: PLC0415

    if options():
        stages.stage(f"Spark's classes were archived already: {archive_path()}")
        return 0
    stages.stage("a small Spark job, to archive the classes Spark's JVM loads (about 40 s)")
    try:
        path = build()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        # Only a quicker start is lost: local sessions run without the archive.
        stages.stage(f"no archive of Spark's classes: {exc}")
    else:
        stages.stage(f"done: Spark's classes are in {path}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    _require_positive(
        [("--rows", args.rows), ("--parallelism", args.parallelism), ("--files", args.files)]
    )
    try:
        from stretch.demo import run_demo  # noqa: PLC0415 - needs pyspark
    except ImportError as exc:
        msg = f"'stretch demo' needs the extra stretch[spark]: {exc}"
        raise InputError(msg) from exc
    workdir = Path(args.workdir) if args.workdir else None
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    autoscale = None if args.autoscale == "off" else args.autoscale
    identical = run_demo(
        args.rows,
        args.rate,
        args.seed,
        args.parallelism,
        sys.stdout,
        args.files,
        workdir,
        autoscale,
    )
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
