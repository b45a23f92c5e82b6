"""``stretch pipeline``: a Structured Streaming job through an operator in the sidecar.

Each input directory of Parquet files is read as a stream of its files in name order
(``stretch.spark.files``, ``maxFilesPerTrigger`` files per micro-batch, whatever their
modification times) and written into one source of the operator by the ``stretch``
writer (``lateRows``, ``allowedLatenessMs`` from ``--late-rows``,
``--allowed-lateness-ms``); ``hedge`` takes one directory, which feeds both of its
streams. The operator's output is read back by the ``stretch`` reader and written by
Spark's Parquet sink to the output directory, with its ``offset`` column: ordered by
``offset``, the rows are the operator's output in order. The job processes the files
the directories hold when it starts (``Trigger.AvailableNow``), then closes the sources
and drains the output.

Exactly once across a crash, with the same ``--checkpoint``:

* the Parquet sink and the reader are exactly once by their checkpoints (the reader
  re-reads the offsets of a batch Spark had not committed; the log trims only committed
  ones);
* with the operator still running or restored (``--url``, or the embedded sidecar, whose
  state is kept under ``<checkpoint>/sidecar`` and restored when the job is rerun), the
  writers continue from their checkpoints and the sidecar ignores a replayed batch
  (staged commits are idempotent and durable);
* with an operator created afresh (a ``--url`` sidecar that kept no state), the writers
  start over from the first file: the operator is deterministic (docs/design.md decision
  2), so it produces the same log again and the reader continues at its checkpointed
  offset; nothing is lost or doubled.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from stretch.client import ServiceError, StretchClient
from stretch.errors import InputError, StretchError
from stretch.sharded import ShardedClient, connect
from stretch.spark.failures import QueryFailed, explain
from stretch.spark.files import FILES, spark_schema
from stretch.spark.preflight import Feed, check_inputs
from stretch.spark.reader import OFFSET
from stretch.spark.source import NAME

__all__ = [
    "ROWS_PER_TRIGGER",
    "PipelineConfig",
    "PipelineResult",
    "Prepared",
    "micro_batches",
    "prepare",
    "read_output",
    "run_pipeline",
]

logger = logging.getLogger(__name__)

PROGRESS_S = 2
"""Seconds between progress lines."""
DRAIN_TIMEOUT_S = 600.0
"""The longest wait for the operator's output to finish once the inputs are closed."""
QUERY_TIMEOUT_S = 24 * 3600
"""The longest a writing or reading query may run."""
START_ATTEMPTS = 3
"""How often a query whose source process missed Spark's connect-back deadline is started."""
_CONNECT_BACK = "Python worker failed to connect back"
INIT_TIMEOUT_S = 300.0
"""The longest a query may take to set up its source."""
_INITIALIZING = "Initializing sources"
JOB = "job.json"
"""The file in a checkpoint directory that names the job it belongs to (``claim``)."""
CAPACITY = 1 << 18
"""ESG_in nodes of an operator the pipeline creates (room for big micro-batches)."""
ROWS_PER_TRIGGER = 1 << 17
"""Input rows per micro-batch of a writing query without ``files_per_trigger``, in whole
files (at least one), and at most the largest batch the operator takes. Each micro-batch
costs Spark about half a second whatever its size, so a directory of small files went
slowly one file at a time (2 x 100,000 rows in ten files each: 0.90x the wall time)."""
_NOT_FOUND = 404


@dataclass(frozen=True)
class PipelineConfig:
    """What ``stretch pipeline`` runs.

    Attributes:
        operator: The catalog operator.
        inputs: One directory of Parquet files per source (one for ``hedge``).
        output: The Parquet directory the output goes to.
        checkpoint: The job's checkpoint directory (one subdirectory per query).
        url: The sidecar's URL, or the shards' URLs separated by commas.
        token: The sidecar's bearer token, if any.
        name: The operator instance's name on the sidecar.
        params: The operator's catalog parameters.
        parallelism: m, the instances at start.
        max_parallelism: n, the pool size (None: the sidecar's default).
        files_per_trigger: Input files per micro-batch of each writing query (None: as
            many whole files as fit in ``ROWS_PER_TRIGGER`` rows, at least one).
        trigger_rows: The most output rows per micro-batch of the reading query.
        autoscale: An autoscale policy (``"threshold"`` or ``"model"``) the operator is
            created under, or None for a fixed parallelism.
        late_rows: The writers' ``lateRows``: ``fail`` or ``drop``.
        allowed_lateness_ms: The writers' ``allowedLatenessMs`` (None: the operator's).
        log: The file Spark's traces go to, named in failures (None: not kept).
        new_checkpoint: The checkpoint is this job's first (``claim``): an operator of
            ``name`` already on the sidecar belongs to another job.

    """

    operator: str
    inputs: Sequence[Path]
    output: Path
    checkpoint: Path
    url: str
    token: str | None = None
    name: str = "pipeline"
    params: Mapping[str, str] = field(default_factory=dict)
    parallelism: int = 1
    max_parallelism: int | None = None
    files_per_trigger: int | None = None
    trigger_rows: int | None = None
    autoscale: str | None = None
    late_rows: str = "fail"
    allowed_lateness_ms: int | None = None
    log: Path | None = None
    new_checkpoint: bool = False


def claim(checkpoint: Path, job: Mapping[str, Any], output: Path) -> bool:
    """Record in ``checkpoint`` that it belongs to ``job``; return whether it is new.

    ``job`` names what a rerun must keep (operator, name, parameters, output, shards); a
    checkpoint where no query ran yet takes a changed job (a first try refused before
    Spark started, say). A checkpoint written before this file existed counts as the job's
    if it holds a query's checkpoint. Two jobs sharing a checkpoint (the default one inside
    ``--output``, say) would continue each other's queries, and a new job writing into
    another job's output would have Spark's file sink skip its micro-batches (their ids are
    in the output's ``_spark_metadata``): both exited 0 with rows missing or doubled.

    Raises:
        InputError: the checkpoint belongs to another job, or it is new and ``output``
            holds another job's output.

    """
    path = checkpoint / JOB
    try:
        claimed = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        claimed = None
    except (OSError, ValueError) as exc:
        msg = f"cannot read {path}: {exc}; give this job a new --checkpoint"
        raise InputError(msg) from exc
    ran = any((checkpoint / query).is_dir() for query in ("out", "in0", "in1"))
    if claimed is not None and claimed != job and ran:
        differs = ", ".join(
            f"{key} {claimed.get(key)!r} (this run: {job.get(key)!r})"
            for key in job
            if claimed.get(key) != job.get(key)
        )
        msg = (
            f"checkpoint {checkpoint} belongs to another job: {differs}; rerun that job as it "
            "was, or give this one a new --output (or --checkpoint)"
        )
        raise InputError(msg)
    new = claimed is None and not ran
    if new and (output / "_spark_metadata").exists():
        msg = (
            f"{output} holds another job's output (its _spark_metadata): Spark would skip "
            "this job's micro-batches there; give --output a new directory, or remove it"
        )
        raise InputError(msg)
    if claimed != job:
        path.write_text(json.dumps(job, sort_keys=True), encoding="utf-8")
    return new


@dataclass(frozen=True)
class Prepared:
    """What was checked and set up before Spark starts: the feeds and the operator.

    Attributes:
        feeds: One per source of the operator, with its files in reading order.
        created: Whether the operator was created for this run.
        rows_per_trigger: The writers' ``maxRowsPerTrigger`` (None with
            ``files_per_trigger``): ``ROWS_PER_TRIGGER`` or the largest batch the operator
            takes, whichever is less.

    """

    feeds: list[Feed]
    created: bool
    rows_per_trigger: int | None = None


@dataclass(frozen=True)
class PipelineResult:
    """What a run did.

    Rows in per source, output rows, micro-batches, seconds, and the operator's
    reconfigurations (``GET .../reconfigurations`` entries).
    """

    rows_in: list[int]
    rows_out: int
    batches_in: int
    batches_out: int
    seconds: float
    created: bool
    reconfigurations: list[dict[str, Any]] = field(default_factory=list)


def _client(config: PipelineConfig) -> StretchClient | ShardedClient:
    return connect(config.url, token=config.token)


def prepare(config: PipelineConfig, feeds: list[Feed] | None = None) -> Prepared:
    """Check the inputs (unless ``feeds`` are their check), then create the operator.

    Needs no Spark.

    Raises:
        InputError: a bad input directory or file (``check_inputs``), or an operator of
            that name the run cannot continue (``_ensure_operator``).

    """
    if feeds is None:
        feeds = check_inputs(config.operator, config.params, config.inputs)
    created, status = _ensure_operator(config, len(feeds))
    if config.files_per_trigger is not None:
        return Prepared(feeds, created)
    shards = status.get("shards") or [status]  # each shard takes every row
    largest = min(int(shard["max_batch_rows"]) for shard in shards)
    return Prepared(feeds, created, min(ROWS_PER_TRIGGER, largest))


def _continued(config: PipelineConfig, status: Mapping[str, Any]) -> None:
    """Check that the run may continue the running operator ``status`` describes.

    Raises:
        InputError: it is another operator or has other parameters, or it finished (its
            sources are closed) and this checkpoint never fed it.

    """
    way_out = f"delete it (DELETE /v1/operators/{config.name}) or give --name a new name"
    if status["operator"] != config.operator:
        msg = (
            f"the sidecar runs {config.name!r} as {status['operator']!r}, not "
            f"{config.operator!r}; {way_out}"
        )
        raise InputError(msg)
    params = {str(k): str(v) for k, v in status["params"].items()}
    asked = {str(k): str(v) for k, v in config.params.items()}
    if params != asked:
        msg = (
            f"the sidecar runs {config.name!r} with params {params or '{}'}, this run asks for "
            f"{asked or '{}'}; {way_out}"
        )
        raise InputError(msg)
    if config.new_checkpoint:
        msg = (
            f"an operator named {config.name!r} runs on {config.url}, fed by another job "
            f"(this checkpoint {config.checkpoint} is new); give --name a new name, or "
            f"DELETE /v1/operators/{config.name} if that job is gone"
        )
        raise InputError(msg)
    closed = [s["index"] for s in status["sources"] if s["closed"]]
    fed = all((config.checkpoint / f"in{i}" / "commits").is_dir() for i in closed)
    if closed and not fed:
        msg = (
            f"{config.name!r} on {config.url} has finished (its sources are closed) and the "
            f"checkpoint {config.checkpoint} did not feed it; {way_out}"
        )
        raise InputError(msg)


def _ensure_operator(config: PipelineConfig, sources: int) -> tuple[bool, dict[str, Any]]:
    """Create the operator unless it runs (and may be continued).

    Returns:
        Whether it was created, and its status.

    """
    with _client(config) as client:
        try:
            status = client.status(config.name)
        except ServiceError as exc:
            if exc.status != _NOT_FOUND:
                raise
        else:
            _continued(config, status)
            return False, status
        status = client.create_operator(
            config.name,
            config.operator,
            dict(config.params),
            parallelism=config.parallelism,
            max_parallelism=config.max_parallelism,
            capacity=CAPACITY,
            allowed_lateness_ms=config.allowed_lateness_ms,
            autoscale=None if config.autoscale is None else {"policy": config.autoscale},
        )
        return True, status


def _writer(
    spark: SparkSession, config: PipelineConfig, feed: Feed, rows_per_trigger: int | None
) -> StreamingQuery:
    """The query streaming ``feed``'s files, in name order, into its source."""
    reader = spark.readStream.format(FILES).schema(spark_schema(feed.schema))
    if config.files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", config.files_per_trigger)
    if rows_per_trigger is not None:
        reader = reader.option("maxRowsPerTrigger", rows_per_trigger)
    frame = reader.load(str(feed.directory.resolve()))
    writer = (
        frame.writeStream.format(NAME)
        .queryName(f"{config.name}-in{feed.source}")
        .option("url", config.url)
        .option("operator", config.name)
        .option("source", str(feed.source))
        .option("lateRows", config.late_rows)
        .option("checkpointLocation", str(config.checkpoint / f"in{feed.source}"))
    )
    if config.allowed_lateness_ms is not None:
        writer = writer.option("allowedLatenessMs", str(config.allowed_lateness_ms))
    if config.token:
        writer = writer.option("token", config.token)
    return writer.trigger(availableNow=True).start()


def _reader(spark: SparkSession, config: PipelineConfig) -> StreamingQuery:
    reader = spark.readStream.format(NAME).option("url", config.url).option("operator", config.name)
    if config.token:
        reader = reader.option("token", config.token)
    if config.trigger_rows:
        reader = reader.option("maxRowsPerTrigger", str(config.trigger_rows))
    writer = (
        reader.load()
        .writeStream.format("parquet")
        .queryName(f"{config.name}-out")
        .option("path", str(config.output))
        .option("checkpointLocation", str(config.checkpoint / "out"))
    )
    return writer.trigger(processingTime="500 milliseconds").start()


def _batches(query: StreamingQuery) -> int:
    progress: Mapping[str, Any] | None = query.lastProgress
    return int(progress["batchId"]) + 1 if progress else 0


def _ended(query: StreamingQuery, timeout_s: int) -> bool:
    """Wait up to ``timeout_s`` for ``query`` to end; whether it did.

    Raises:
        QueryFailed: the query failed (with Spark's text, which holds the sidecar's).

    """
    try:
        ended = bool(query.awaitTermination(timeout_s))
    except Exception as exc:  # Spark raises the query's failure here
        raise QueryFailed(str(query.name), str(exc)) from None
    error = query.exception() if ended else None
    if error is not None:
        raise QueryFailed(str(query.name), str(error))
    return ended


def _started(start: Callable[[], StreamingQuery]) -> StreamingQuery:
    """Start a query and wait until it set up its source; return it.

    Spark gives a Python source's process a fixed 10 s to connect back to the JVM, which a
    machine busy with other work can miss; the query then failed before it read anything,
    and it is started again (same checkpoint) up to ``START_ATTEMPTS`` times in all.

    Raises:
        QueryFailed: the query failed otherwise, or missed the 10 s every time.

    """
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            return _initialized(start())
        except QueryFailed as failure:
            if _CONNECT_BACK not in failure.detail or attempt == START_ATTEMPTS:
                raise
            logger.info("query %s: %s; starting it again", failure.query, _CONNECT_BACK)
    raise AssertionError  # the loop returns or raises


def _initialized(query: StreamingQuery) -> StreamingQuery:
    """Wait until ``query`` has set up its source; return it.

    Each Python source starts a Python process that must connect back to the JVM within
    Spark's fixed 10 s: the queries start one after another, before any micro-batch, so
    that these processes do not compete for a busy machine's cores.

    Raises:
        QueryFailed: the query failed meanwhile.
        StretchError: it was still initializing after ``INIT_TIMEOUT_S``.

    """
    deadline = time.monotonic() + INIT_TIMEOUT_S
    while query.isActive and query.status["message"] == _INITIALIZING:
        if time.monotonic() > deadline:
            msg = f"query {query.name} did not set up its source in {INIT_TIMEOUT_S} s"
            raise StretchError(msg)
        time.sleep(0.05)
    _check_failed(query)
    return query


def _check_failed(query: StreamingQuery) -> None:
    """Raise ``QueryFailed`` if ``query`` ended with a failure."""
    error = None if query.isActive else query.exception()
    if error is not None:
        raise QueryFailed(str(query.name), str(error))


def _await(query: StreamingQuery) -> None:
    if not _ended(query, QUERY_TIMEOUT_S):
        msg = f"query {query.name} did not finish in {QUERY_TIMEOUT_S} s"
        raise StretchError(msg)


class _Progress:
    """Progress lines, at most one per ``PROGRESS_S`` seconds (printed by the caller's thread).

    The driver's thread prints them between waits: Py4J gives every thread its own
    connection to the JVM, which a short-lived progress thread would leave open.
    """

    def __init__(
        self,
        config: PipelineConfig,
        writers: list[StreamingQuery],
        reader: StreamingQuery,
        out: TextIO,
        started: float,
    ) -> None:
        self._config = config
        self._writers = writers
        self._reader = reader
        self._out = out
        self._started = started
        self._last = started
        self._said = ""  # the last line's figures

    def tick(self) -> None:
        """Print a line if the last one is ``PROGRESS_S`` old."""
        if time.monotonic() - self._last < PROGRESS_S:
            return
        with _client(self._config) as client:
            self.line(client.status(self._config.name))

    def line(self, status: Mapping[str, Any], *, if_new: bool = False) -> None:
        """Print a line now, from the operator's ``status``.

        With ``if_new`` only if it says something the last line did not (the final line
        after a tick that just printed the same figures).
        """
        rows_in = sum(int(s["tuples_in"]) for s in status["sources"])
        shards = status.get("shards")
        threads = (
            f"parallelism {status['parallelism']}"
            if not shards
            else f"parallelism {status['parallelism']} over {len(shards)} shards "
            f"({', '.join(str(s['parallelism']) for s in shards)})"
        )
        said = (
            f"in: {rows_in} rows in {micro_batches(sum(_batches(q) for q in self._writers))}; "
            f"out: {status['output']['end_offset']} rows, read in "
            f"{micro_batches(_batches(self._reader))}; {threads}"
        )
        if if_new and said == self._said:
            return
        self._last, self._said = time.monotonic(), said
        self._out.write(f"[{self._last - self._started:7.1f} s] {said}\n")
        self._out.flush()


def run_pipeline(
    spark: SparkSession,
    config: PipelineConfig,
    out: TextIO,
    prepared: Prepared | None = None,
) -> PipelineResult:
    """Run the job to the end of its inputs; print progress lines to ``out``.

    Args:
        spark: The session.
        config: What to run.
        out: Where progress lines go.
        prepared: ``prepare(config)``'s result if the caller already checked (before
            starting Spark); else it is done here.

    Raises:
        InputError: bad inputs or a name clash on the sidecar.
        StretchError: a query failed (one line naming why; Spark's traces appended to
            ``config.log``) or the output did not finish.

    """
    started = time.monotonic()
    prepared = prepared or prepare(config)
    feeds, created = prepared.feeds, prepared.created
    if created:  # the writers' checkpoints belong to an operator that is gone
        for feed in feeds:
            shutil.rmtree(config.checkpoint / f"in{feed.source}", ignore_errors=True)
    out.write(
        f"{'created' if created else 'continuing'} {config.name!r} ({config.operator}) on "
        f"{config.url}; {len(feeds)} source(s) from "
        f"{', '.join(str(f.directory) for f in feeds)} (files in name order)"
        f"{'' if created else '; the rows counted below include the earlier runs'}\n"
    )
    if not created:
        out.write(
            "the running operator keeps its parallelism, pool and autoscale setting: "
            "--parallelism, --max-parallelism and --autoscale apply when a job creates its "
            f"operator (reconfigure a running one: POST /v1/operators/{config.name}/reconfigure)\n"
        )
    try:
        return _run(spark, config, out, prepared, started)
    except QueryFailed as failure:
        raise explain(
            failure,
            feeds,
            config.checkpoint,
            config.allowed_lateness_ms,
            config.log,
            config.files_per_trigger,
            prepared.rows_per_trigger,
        ) from None


def _run(
    spark: SparkSession,
    config: PipelineConfig,
    out: TextIO,
    prepared: Prepared,
    started: float,
) -> PipelineResult:
    feeds, rows = prepared.feeds, prepared.rows_per_trigger
    # The reader first: each query's source process starts before any micro-batch runs.
    reader = _started(partial(_reader, spark, config))
    writers = [_started(partial(_writer, spark, config, feed, rows)) for feed in feeds]
    progress = _Progress(config, writers, reader, out, started)
    try:
        deadline = time.monotonic() + QUERY_TIMEOUT_S
        for query in writers:
            while not _ended(query, PROGRESS_S):
                if time.monotonic() > deadline:
                    msg = f"query {query.name} did not finish in {QUERY_TIMEOUT_S} s"
                    raise StretchError(msg)
                for other in [*writers, reader]:  # the first failure ends the job
                    _check_failed(other)
                progress.tick()
        with _client(config) as client:
            for feed in feeds:
                client.close_source(config.name, feed.source)
            status = _wait_finished(client, config.name)
            reconfigurations = client.reconfigurations(config.name)
        _caught_up(reader, int(status["output"]["end_offset"]), progress)
        progress.line(status, if_new=True)
    finally:
        for query in [*writers, reader]:
            if query.isActive:
                query.stop()
    return PipelineResult(
        rows_in=[int(s["tuples_in"]) for s in status["sources"]],
        rows_out=int(status["output"]["end_offset"]),
        batches_in=sum(_batches(q) for q in writers),
        batches_out=_batches(reader),
        seconds=time.monotonic() - started,
        created=prepared.created,
        reconfigurations=reconfigurations,
    )


def _read_up_to(query: StreamingQuery) -> int:
    """The end offset of the reading query's last completed micro-batch (-1: none yet)."""
    progress: Mapping[str, Any] | None = query.lastProgress
    if not progress or not progress["sources"]:
        return -1
    end = progress["sources"][0]["endOffset"]
    offsets = json.loads(end) if isinstance(end, str) else end
    return int(offsets[OFFSET]) if offsets else -1


def _caught_up(query: StreamingQuery, end_offset: int, progress: _Progress) -> None:
    """Wait until the reading query committed the log's last row, then stop it.

    Stopping it between micro-batches, not in one, keeps Spark from aborting a write.

    Raises:
        StretchError: the query failed or did not catch up within ``DRAIN_TIMEOUT_S``.

    """
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while _read_up_to(query) < end_offset or query.status["isTriggerActive"]:
        if not query.isActive:
            _await(query)
        if time.monotonic() > deadline:
            msg = f"query {query.name} did not read the output to {end_offset} in time"
            raise StretchError(msg)
        progress.tick()
        time.sleep(0.05)
    query.stop()


def _wait_finished(client: StretchClient | ShardedClient, name: str) -> dict[str, Any]:
    try:
        return client.wait_finished(name, DRAIN_TIMEOUT_S)
    except TimeoutError as exc:
        raise StretchError(str(exc)) from exc


def micro_batches(count: int) -> str:
    """``count`` micro-batches in words: "1 micro-batch", "4 micro-batches"."""
    return f"{count} micro-batch" if count == 1 else f"{count} micro-batches"


def read_output(spark: SparkSession, directory: Path) -> pa.Table:
    """The pipeline's output directory as a pyarrow table in output order (no ``offset``).

    Spark names the files its sink committed (a streaming sink's log, ``_spark_metadata``,
    leaves out those of a failed micro-batch); they are read here and ordered by
    ``offset``, without a Spark job (a global sort in Spark took 3 s for 800,000 rows).
    """
    frame = spark.read.parquet(str(directory))
    files = [_local_path(uri) for uri in frame.inputFiles()]
    if not files:
        return frame.toArrow().drop_columns([OFFSET])
    table = pa.concat_tables([pq.read_table(file) for file in files])
    order = np.argsort(table.column(OFFSET).to_numpy(), kind="stable")
    return table.take(pa.array(order)).drop_columns([OFFSET])


def _local_path(uri: str) -> str:
    """The path of a ``file:`` URI as Spark gives it (percent-encoded)."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        msg = f"the pipeline's output is read from local files, not {uri!r}"
        raise InputError(msg)
    return unquote(parsed.path)
