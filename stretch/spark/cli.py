"""The ``stretch pipeline`` command's body: sidecar and session set-up, run, summary.

Kept apart from ``stretch.cli`` so ``stretch --help`` and every other command work without
PySpark; this module is imported only when the command runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TextIO

from pyspark.sql import SparkSession

from api.serve import read_token
from stretch.errors import InputError
from stretch.spark.pipeline import PipelineConfig, run_pipeline
from stretch.spark.session import local_session
from stretch.spark.sidecar import EmbeddedSidecar, LocalSidecars

__all__ = ["describe_reconfigurations", "run_pipeline_command"]


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
    files_per_trigger: int,
    out: TextIO,
    autoscale: str | None = None,
    sidecars: int | None = None,
) -> int:
    """Run ``stretch pipeline``; print progress and a summary to ``out``; return 0.

    Raises:
        InputError: a bad argument or token file.
        StretchError: the job failed (the message names why).

    """
    try:
        token = read_token(token_file) if token_file else None
    except (OSError, ValueError) as exc:
        msg = f"--token-file: {exc}"
        raise InputError(msg) from exc
    checkpoint = checkpoint or output / "_checkpoint"
    with ExitStack() as stack:
        if sidecars is not None:
            processes = LocalSidecars(sidecars, checkpoint / "sidecars", token_file)
            url = stack.enter_context(processes).url
            out.write(
                f"started {sidecars} sidecar processes on {url} (state in {processes.root})\n"
            )
        elif url is None:
            state = checkpoint / "sidecar"
            url = stack.enter_context(EmbeddedSidecar(token, state_dir=state)).url
            out.write(f"started a sidecar on {url} (state in {state})\n")
        owned = SparkSession.getActiveSession() is None
        spark = local_session(f"stretch pipeline {operator}")
        if owned:
            stack.callback(spark.stop)
        config = PipelineConfig(
            operator=operator,
            inputs=list(inputs),
            output=output,
            checkpoint=checkpoint,
            url=url,
            token=token,
            name=name or f"pipeline-{operator}",
            params=params,
            parallelism=parallelism,
            max_parallelism=max_parallelism,
            files_per_trigger=files_per_trigger,
            trigger_rows=trigger_rows,
            autoscale=autoscale,
        )
        result = run_pipeline(spark, config, out)
    rate = sum(result.rows_in) / result.seconds if result.seconds else 0.0
    out.write(
        f"done: {sum(result.rows_in)} rows in ({', '.join(map(str, result.rows_in))} per "
        f"source) over {result.batches_in} micro-batches, {result.rows_out} rows out over "
        f"{result.batches_out} micro-batches, in {result.seconds:.1f} s ({rate:,.0f} rows/s "
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
