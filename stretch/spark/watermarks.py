"""The query's event-time watermark, forwarded as its stretch source's watermark.

Spark's data source API gives a writer no watermark, but the session's listeners see it in
every progress event. ``forward_watermarks(spark, query, ...)`` registers (once per
session) a ``StreamingQueryListener`` that posts the watermark of each tracked query to
its source on the sidecar, so a source whose query defines ``withWatermark`` releases its
rows up to Spark's watermark even when its own data are idle. A lower watermark than the
source's released one is ignored by the sidecar; rows behind it that still arrive follow
the writer's ``lateRows``. Once the source is closed (the end of its input: a job closes
it after its writing query ends, and Spark may deliver that query's last progress event
later) the listener stops forwarding to it, without a warning.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime

from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)
from pyspark.sql.streaming.query import StreamingQuery

from stretch.client import ServiceError, StretchClient
from stretch.errors import StretchError
from stretch.sharded import ShardedClient, connect

__all__ = ["WatermarkForwarder", "forward_watermarks", "watermark_ms"]

logger = logging.getLogger(__name__)


def watermark_ms(text: str) -> int:
    """A progress event's watermark (ISO 8601, e.g. ``2026-01-02T09:30:00.000Z``) in ms."""
    return int(datetime.fromisoformat(text).timestamp() * 1000)


@dataclass
class _Target:
    url: str
    operator: str
    source: int
    token: str | None = field(repr=False)
    forwarded_ms: int | None = None


class WatermarkForwarder(StreamingQueryListener):
    """A listener that forwards tracked queries' watermarks to their sources."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._targets: dict[str, _Target] = {}

    def track(
        self, query_id: str, url: str, operator: str, source: int, token: str | None = None
    ) -> None:
        """Forward the watermark of query ``query_id`` to ``source`` of ``operator``."""
        with self._lock:
            self._targets[query_id] = _Target(url, operator, source, token)

    def onQueryStarted(self, event: QueryStartedEvent) -> None:  # noqa: N802 - Spark's name
        """Nothing to do: the watermark comes with progress."""

    def onQueryProgress(self, event: QueryProgressEvent) -> None:  # noqa: N802
        """Post the query's watermark if it is tracked and the watermark moved."""
        with self._lock:
            target = self._targets.get(str(event.progress.id))
        text = event.progress.eventTime.get("watermark") if target else None
        if target is None or not text:
            return
        ts_ms = watermark_ms(text)
        if target.forwarded_ms is not None and ts_ms <= target.forwarded_ms:
            return
        try:
            with connect(target.url, token=target.token) as client:
                try:
                    client.watermark(target.operator, target.source, ts_ms)
                except ServiceError as exc:
                    if exc.status != _CONFLICT or not _closed(client, target):
                        raise
                    self._untrack(str(event.progress.id), target)
                    return
        except StretchError as exc:
            logger.warning(
                "watermark %d for source %d of %r not forwarded: %s",
                ts_ms,
                target.source,
                target.operator,
                exc,
            )
            return
        target.forwarded_ms = ts_ms

    def _untrack(self, query_id: str, target: _Target) -> None:
        """The source is closed: its input ended, and so does forwarding to it."""
        logger.debug(
            "source %d of %r is closed: its watermark is no longer forwarded",
            target.source,
            target.operator,
        )
        with self._lock:
            if self._targets.get(query_id) is target:
                del self._targets[query_id]

    def onQueryIdle(self, event: QueryIdleEvent) -> None:  # noqa: N802 - Spark's name
        """Nothing to do: an idle query's watermark does not move."""

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:  # noqa: N802
        """Stop tracking the query."""
        with self._lock:
            self._targets.pop(str(event.id), None)


_CONFLICT = 409


def _closed(client: StretchClient | ShardedClient, target: _Target) -> bool:
    """Whether ``target``'s source is closed (a 409 to a watermark may mean it, or not)."""
    try:
        sources = client.status(target.operator)["sources"]
    except StretchError:
        return False
    return any(s["index"] == target.source and s["closed"] for s in sources)


_FORWARDERS: dict[int, WatermarkForwarder] = {}
_FORWARDERS_LOCK = threading.Lock()


def forward_watermarks(
    spark: SparkSession,
    query: StreamingQuery,
    url: str,
    operator: str,
    source: int,
    token: str | None = None,
) -> None:
    """Forward ``query``'s event-time watermark to ``source`` of ``operator`` from now on.

    Args:
        spark: The session running ``query`` (one listener per session).
        query: A streaming query (typically writing into that source with ``withWatermark``).
        url: The sidecar's URL.
        operator: The operator's name.
        source: The source index.
        token: The sidecar's bearer token, if any.

    """
    with _FORWARDERS_LOCK:
        forwarder = _FORWARDERS.get(id(spark))
        if forwarder is None:
            forwarder = WatermarkForwarder()
            spark.streams.addListener(forwarder)
            _FORWARDERS[id(spark)] = forwarder
    forwarder.track(str(query.id), url, operator, source, token)
