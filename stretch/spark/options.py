"""The options of the ``stretch`` data source, read and checked once, with clear errors.

Spark hands a data source its options as strings (keys case-insensitive). Every reader and
writer option is parsed here into a frozen dataclass, so a wrong value fails the query at
its start with a message naming the option, never deep in a task.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stretch.client import StretchClient
from stretch.errors import InputError
from stretch.merge import split_urls
from stretch.sharded import ShardedClient, connect

__all__ = ["LATE_ROWS", "ReaderOptions", "WriterOptions"]

LATE_ROWS = ("fail", "drop")
"""Values of the writer option ``lateRows``."""

DEFAULT_RETRY_MS = 120_000
DEFAULT_ROWS_PER_PARTITION = 100_000
_CREATE_KEYS = {"operator", "params", "parallelism", "max_parallelism", "capacity"}


def _get(options: Mapping[str, str], key: str) -> str | None:
    """The option ``key`` (case-insensitive, as Spark treats option keys)."""
    lowered = key.lower()
    for name, value in options.items():
        if name.lower() == lowered:
            return str(value)
    return None


def _required(options: Mapping[str, str], key: str) -> str:
    value = _get(options, key)
    if not value:
        msg = f"the stretch data source needs the option {key!r}"
        raise InputError(msg)
    return value


def _int(options: Mapping[str, str], key: str, default: int | None, low: int) -> int | None:
    text = _get(options, key)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        msg = f"option {key!r} of the stretch data source must be an integer, got {text!r}"
        raise InputError(msg) from None
    if value < low:
        msg = f"option {key!r} of the stretch data source must be >= {low}, got {value}"
        raise InputError(msg)
    return value


def _url(options: Mapping[str, str]) -> str:
    """The option ``url``: one sidecar, or the shards' sidecars separated by commas."""
    url = _required(options, "url")
    try:
        split_urls(url)
    except ValueError as exc:
        msg = f"option 'url': {exc}"
        raise InputError(msg) from None
    return url


def _token(options: Mapping[str, str]) -> str | None:
    token = _get(options, "token")
    path = _get(options, "tokenFile")
    if token and path:
        msg = "give the stretch data source 'token' or 'tokenFile', not both"
        raise InputError(msg)
    if path:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            msg = f"option 'tokenFile': cannot read {path}: {exc.strerror}"
            raise InputError(msg) from exc
        token = lines[0].strip() if lines else ""
        if not token:
            msg = f"option 'tokenFile': {path} is empty"
            raise InputError(msg)
    return token or None


@dataclass(frozen=True)
class _Service:
    """Where the operator runs: the sidecar's URL, the operator's name and the token."""

    url: str
    operator: str
    token: str | None = field(repr=False)

    @property
    def sharded(self) -> bool:
        """Whether ``url`` names several sidecars (the shards of one operator)."""
        return len(split_urls(self.url)) > 1

    def client(self, timeout_s: float = 60.0) -> StretchClient | ShardedClient:
        """A new client of the sidecar, or of the shards (close it after use)."""
        return connect(self.url, token=self.token, timeout_s=timeout_s)

    def shards(self, timeout_s: float = 60.0) -> ShardedClient:
        """A client of the shards, also of a single sidecar (close it after use)."""
        return ShardedClient(split_urls(self.url), token=self.token, timeout_s=timeout_s)


@dataclass(frozen=True)
class WriterOptions(_Service):
    """``df.writeStream.format("stretch")`` options.

    Attributes:
        source: The operator's input source the rows feed (option ``source``, default 0).
        timestamp_column: The event-time column (``timestampColumn``, default ``ts``): a
            TimestampType column or a long in ms; sent as ``ts`` in ms.
        late_rows: ``fail`` (default) stops the query on a row older than the source's
            released watermark; ``drop`` drops such rows and counts them (``lateRows``).
        allowed_lateness_ms: If set, the lateness the source's reorder buffer allows
            (``allowedLatenessMs``).
        create: If set, the body (``operator``, ``params``, ...) with which the writer
            creates the operator when it does not exist (option ``create``, JSON).
        retry_ms: How long a part or a commit is retried while the sidecar says 429
            (``retryTimeoutMs``, default 120 000).

    """

    source: int = 0
    timestamp_column: str = "ts"
    late_rows: str = "fail"
    allowed_lateness_ms: int | None = None
    create: Mapping[str, Any] | None = None
    retry_ms: int = DEFAULT_RETRY_MS

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriterOptions:
        """Read and check the writer's options.

        Raises:
            InputError: naming the missing or wrong option.

        """
        late_rows = (_get(options, "lateRows") or "fail").lower()
        if late_rows not in LATE_ROWS:
            msg = f"option 'lateRows' must be one of {', '.join(LATE_ROWS)}, got {late_rows!r}"
            raise InputError(msg)
        return cls(
            url=_url(options),
            operator=_required(options, "operator"),
            token=_token(options),
            source=_int(options, "source", 0, 0) or 0,
            timestamp_column=_get(options, "timestampColumn") or "ts",
            late_rows=late_rows,
            allowed_lateness_ms=_int(options, "allowedLatenessMs", None, 0),
            create=_create(_get(options, "create")),
            retry_ms=_int(options, "retryTimeoutMs", DEFAULT_RETRY_MS, 0) or 0,
        )


def _create(text: str | None) -> Mapping[str, Any] | None:
    if not text:
        return None
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if not isinstance(body, dict) or "operator" not in body:
        msg = (
            "option 'create' must be a JSON object with at least 'operator', e.g. "
            f'{{"operator": "scalejoin", "params": {{"ws": 2000}}}}, got {text!r}'
        )
        raise InputError(msg)
    unknown = sorted(set(body) - _CREATE_KEYS)
    if unknown:
        msg = (
            f"option 'create': unknown key(s) {', '.join(unknown)} (known: {sorted(_CREATE_KEYS)})"
        )
        raise InputError(msg)
    return body


@dataclass(frozen=True)
class ReaderOptions(_Service):
    """``spark.readStream.format("stretch")`` and ``spark.read`` options.

    Attributes:
        max_rows_per_trigger: The most rows a micro-batch reads (``maxRowsPerTrigger``).
        rows_per_partition: The most rows one read task fetches (``rowsPerPartition``,
            default 100 000).
        commit: Whether the streaming reader commits (trims) the log after Spark committed
            a batch (``commit``, default true).

    """

    max_rows_per_trigger: int | None = None
    rows_per_partition: int = DEFAULT_ROWS_PER_PARTITION
    commit: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReaderOptions:
        """Read and check the reader's options.

        Raises:
            InputError: naming the missing or wrong option.

        """
        commit = (_get(options, "commit") or "true").lower()
        if commit not in ("true", "false"):
            msg = f"option 'commit' must be true or false, got {commit!r}"
            raise InputError(msg)
        return cls(
            url=_url(options),
            operator=_required(options, "operator"),
            token=_token(options),
            max_rows_per_trigger=_int(options, "maxRowsPerTrigger", None, 1),
            rows_per_partition=_int(options, "rowsPerPartition", DEFAULT_ROWS_PER_PARTITION, 1)
            or DEFAULT_ROWS_PER_PARTITION,
            commit=commit == "true",
        )
