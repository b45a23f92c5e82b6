"""The ``stretch pipeline`` command's body: checks, sidecar and session set-up, run, summary.

Kept apart from ``stretch.cli`` so ``stretch --help`` and every other command work without
PySpark; this module is imported only when the command runs.

A mistake costs a second, not Spark's start: the inputs (``stretch.spark.preflight``),
the sidecars of ``--url`` and the operator are checked before the session starts. The
JVM's output (Spark's logs, the Python workers' traces) goes to ``CHECKPOINT/pipeline.log``
unless ``-v``; a failed query is one line naming why and that file. Ctrl-C (SIGINT) prints
one line and exits 130 at once: PySpark's own handler (cancel the jobs over Py4J, raise
``KeyboardInterrupt``) would print the traces of every thread it interrupts.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from pyspark.sql import SparkSession

from stretch.api.serve import read_token
from stretch.errors import InputError
from stretch.spark.pipeline import PipelineConfig, claim, micro_batches, prepare, run_pipeline
from stretch.spark.preflight import check_inputs, check_sidecars
from stretch.spark.session import local_session
from stretch.spark.sidecar import EmbeddedSidecar, LocalSidecars

__all__ = ["LOG_NAME", "describe_reconfigurations", "run_pipeline_command"]

LOG_NAME = "pipeline.log"
"""The file under the checkpoint directory that Spark's output and traces go to."""


def run_pipeline_command(
    operator: str,
    inputs: Sequence[Path],
    output: Path,
    *,
    params: Mapping[str, str],
    parallelism: int,
    max_parallelism: int | None,
    url: str | None,
    token_file: str | None,
    name: str | None,
    checkpoint: Path | None,
    trigger_rows: int | None,
    files_per_trigger: int | None,
    out: TextIO,
    autoscale: str | None = None,
    sidecars: int | None = None,
    late_rows: str = "fail",
    allowed_lateness_ms: int | None = None,
    verbose: bool = False,
) -> int:
    """Run ``stretch pipeline``; print progress and a summary to ``out``; return 0.

    Raises:
        InputError: a bad argument, token file, input, sidecar or operator (before Spark
            starts).
        StretchError: the job failed (one line naming why and the log file).

    """
    try:
        token = read_token(token_file) if token_file else None
    except (OSError, ValueError) as exc:
        msg = f"--token-file: {exc}"
        raise InputError(msg) from exc
    feeds = check_inputs(operator, params, inputs)
    _refuse_output_among_inputs(output, inputs)
    if url is not None:
        check_sidecars(url, token)
    checkpoint = checkpoint or output / "_checkpoint"
    checkpoint.mkdir(parents=True, exist_ok=True)
    name = name or f"pipeline-{operator}"
    shards = sidecars or (1 if url is None else len(url.split(",")))
    job = {
        "operator": operator,
        "name": name,
        "params": {str(k): str(v) for k, v in params.items()},
        "output": str(output.resolve()),
        "shards": shards,
    }
    new_checkpoint = claim(checkpoint, job, output)
    log = checkpoint / LOG_NAME
    with ExitStack() as stack:
        stopping: list[Callable[[], None]] = []
        _stop_on_interrupt(stopping)
        if sidecars is not None:
            processes = LocalSidecars(sidecars, checkpoint / "sidecars", token_file)
            stopping.append(processes.terminate)
            url = stack.enter_context(processes).url
            out.write(
                f"started {sidecars} sidecar processes on {url} (state in {processes.root})\n"
            )
        elif url is None:
            state = checkpoint / "sidecar"
            url = stack.enter_context(EmbeddedSidecar(token, state_dir=state)).url
            out.write(f"started a sidecar on {url} (state in {state})\n")
        config = PipelineConfig(
            operator=operator,
            inputs=list(inputs),
            output=output,
            checkpoint=checkpoint,
            url=url,
            token=token,
            name=name,
            params=params,
            parallelism=parallelism,
            max_parallelism=max_parallelism,
            files_per_trigger=files_per_trigger,
            trigger_rows=trigger_rows,
            autoscale=autoscale,
            late_rows=late_rows,
            allowed_lateness_ms=allowed_lateness_ms,
            log=log,
            new_checkpoint=new_checkpoint,
        )
        prepared = prepare(config, feeds)
        owned = SparkSession.getActiveSession() is None
        if owned:
            out.write(f"starting Spark (its log: {log})\n")
            out.flush()
        with _jvm_output(log, to_stderr=verbose or not owned):
            spark = local_session(f"stretch pipeline {operator}")
        if owned:
            stack.callback(spark.stop)
        _stop_on_interrupt(stopping)  # the SparkContext installed its own handler
        result = run_pipeline(spark, config, out, prepared)
    rate = sum(result.rows_in) / result.seconds if result.seconds else 0.0
    out.write(
        f"done: {sum(result.rows_in)} rows in ({', '.join(map(str, result.rows_in))} per "
        f"source) over {micro_batches(result.batches_in)}, {result.rows_out} rows out over "
        f"{micro_batches(result.batches_out)}, in {result.seconds:.1f} s ({rate:,.0f} rows/s "
        f"in, Spark included); output in {output} (order rows by 'offset')\n"
    )
    out.write(describe_reconfigurations(result.reconfigurations))
    return 0


def describe_reconfigurations(entries: Sequence[Mapping[str, Any]]) -> str:
    """One line per reconfiguration of a run (with the autoscaler's reason), or none."""
    lines = []
    for entry in entries:
        took = entry["duration_ms"]
        reason = f": {entry['reason']}" if entry.get("reason") else ""
        lines.append(
            f"  epoch {entry['epoch']}: {entry['from']} -> {entry['to']} instances "
            f"({entry['cause']}, {'pending' if took is None else f'{took:.1f} ms'}){reason}\n"
        )
    return f"reconfigurations: {len(entries)}\n" + "".join(lines)


def _refuse_output_among_inputs(output: Path, inputs: Sequence[Path]) -> None:
    """Refuse an output directory that is, holds or lies in an input directory.

    Spark's file source would read the output's files as new input, or the output would
    be written among the input files.
    """
    out = output.resolve()
    for path in inputs:
        given = path.resolve()
        if out == given or given in out.parents or out in given.parents:
            msg = (
                f"--output {output} and --input {path} overlap: the output directory must "
                "be apart from every input directory"
            )
            raise InputError(msg)


@contextmanager
def _jvm_output(log: Path, to_stderr: bool) -> Iterator[None]:
    """Point file descriptor 2 at ``log`` while the JVM starts (unless ``to_stderr``).

    The JVM, and the Python workers it forks, keep the descriptor they inherit: Spark's
    logs and traces go to the file for the session's life; ours return to stderr. Py4J's
    own log lines go to the file too.
    """
    if to_stderr:
        yield
        return
    py4j = logging.getLogger("py4j")
    handler = logging.FileHandler(log, encoding="utf-8")
    py4j.addHandler(handler)
    py4j.propagate = False
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(target, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


def _stop_on_interrupt(stopping: list[Callable[[], None]]) -> None:
    """On SIGINT or SIGTERM: run ``stopping`` (stop local sidecars), one line, exit 128 + n.

    Installed again once Spark started, which replaces the handler with its own. (After
    a kill -9 the ``--sidecars`` processes stop themselves: ``stretch serve --parent-pid``.)
    """

    def interrupted(signum: int, frame: FrameType | None) -> None:
        for stop in stopping:
            stop()
        sys.stderr.write(
            f"stretch: interrupted ({signal.Signals(signum).name}); rerun with the same "
            "--checkpoint to continue\n"
        )
        sys.stderr.flush()
        os._exit(128 + signum)

    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)
