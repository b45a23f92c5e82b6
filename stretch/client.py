"""A small typed client of the sidecar's REST API (used by tests, benchmarks and Spark).

``StretchClient`` speaks Arrow IPC for batches and output, splits a batch larger than the
operator takes into parts, retries a part that got 429 (the ingest buffer was full) with
exponential backoff up to a deadline, and raises ``ServiceError`` carrying the status and
the service's ``detail`` for any other error (``CapacityError`` for a 429 past the
deadline, with the service's reason).

Splitting serves an operator with one source, or a caller that interleaves its sources:
ESG_in lets a source run at most about half its capacity ahead of the others, so rows sent
to one source of a multi-source operator beyond that wait until the other sources catch
up, and ``add_batch`` to that source alone gets 429 until its deadline.
"""

from __future__ import annotations

import functools
import ssl
import time
from collections.abc import Iterable, Mapping, Sequence
from http import HTTPStatus
from types import TracebackType
from typing import Any, NamedTuple, Protocol

import httpx
import pyarrow as pa

from stretch.errors import CapacityError, StretchError

__all__ = [
    "ARROW_STREAM",
    "BatchResult",
    "OutputReader",
    "ServiceError",
    "SidecarUnreachableError",
    "StretchClient",
    "arrow_bytes",
    "read_until_finished",
    "ready",
    "tls_context",
]

ARROW_STREAM = "application/vnd.apache.arrow.stream"
NEXT_OFFSET = "Stretch-Next-Offset"
PART_BITS = 16
"""Batch id k is sent as the service's ids ``k * 2**PART_BITS + i`` of its parts i."""


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS settings that every client of this process shares (httpx's defaults).

    httpx makes them anew for each client it creates, loading the CA bundle each time:
    about 50 ms of CPU per client, plain ``http://`` included. The Spark reader's offset
    checks, commits and read tasks, and each readiness probe, paid it.
    """
    return httpx.create_ssl_context()


def ready(url: str, timeout_s: float = 1.0) -> bool:
    """Whether the service at ``url`` answers ``/readyz`` with 200 now (restore done).

    False while it starts, restores or cannot be reached; each call waits at most
    ``timeout_s``. For loops that wait for a started sidecar, under their own deadline.
    """
    try:
        answer = httpx.get(f"{url}/readyz", timeout=timeout_s, verify=tls_context())
    except httpx.TransportError:
        return False
    return answer.status_code == HTTPStatus.OK


class ServiceError(StretchError):
    """The service answered with an error status.

    Attributes:
        status: The HTTP status.
        detail: The service's explanation.

    """

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


class SidecarUnreachableError(StretchError, httpx.TransportError):
    """The service did not answer: the connection was refused or broke, or timed out.

    Its message names the service's URL and the request, then the transport's error
    (also its ``__cause__``). An ``httpx.TransportError`` too, for callers that catch those.
    """


class BatchResult(NamedTuple):
    """The answer to a batch: rows accepted, and whether it repeated a known batch id."""

    accepted: int
    duplicate: bool


def arrow_bytes(table: pa.Table) -> bytes:
    """``table`` as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


class StretchClient:
    """A client of one STRETCH service.

    Args:
        base_url: The service's address, e.g. ``http://127.0.0.1:8321``.
        token: The bearer token, if the service has one.
        timeout_s: The timeout of each request (long-polls add their wait).
        http: An existing ``httpx.Client`` (e.g. FastAPI's ``TestClient``) to use instead
            of a new one; ``base_url`` is then ignored.

    Every method raises ``ServiceError`` for an error status (its ``status`` and the
    service's ``detail``) and ``SidecarUnreachableError`` when no answer came (naming the
    URL and the request).

    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8321",
        token: str | None = None,
        timeout_s: float = 30.0,
        http: httpx.Client | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._owned = http is None
        self._http = (
            http
            if http is not None
            else httpx.Client(base_url=base_url, timeout=timeout_s, verify=tls_context())
        )
        self._headers = headers
        self._timeout_s = timeout_s
        self._batch_limits: dict[str, int] = {}

    def __enter__(self) -> StretchClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool (if this client created it)."""
        if self._owned:
            self._http.close()

    def _wait(self, wait_ms: int) -> dict[str, Any]:
        """A longer timeout for a long-poll (left to an injected client, e.g. TestClient)."""
        return {"timeout": self._timeout_s + wait_ms / 1000} if self._owned else {}

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {**self._headers, **kwargs.pop("headers", {})}
        try:
            response = self._http.request(method, path, headers=headers, **kwargs)
        except httpx.TransportError as exc:
            url = str(self._http.base_url).rstrip("/")
            why = f"{type(exc).__name__}: {exc}"
            msg = f"the sidecar at {url} did not answer {method} {path}: {why}"
            raise SidecarUnreachableError(msg) from exc
        if response.status_code >= 400:
            try:
                detail = str(response.json().get("detail", response.text))
            except ValueError:
                detail = response.text
            raise ServiceError(response.status_code, detail)
        return response

    # -- operators -------------------------------------------------------------------------

    def create_operator(
        self,
        name: str,
        operator: str,
        params: Mapping[str, str | int | float] | None = None,
        parallelism: int = 1,
        max_parallelism: int | None = None,
        capacity: int | None = None,
        allowed_lateness_ms: int | None = None,
        autoscale: Mapping[str, Any] | None = None,
        shard: tuple[int, int] | None = None,
    ) -> dict[str, Any]:
        """Start catalog ``operator`` under ``name``; return its status.

        ``autoscale`` (e.g. ``{"policy": "model"}``) starts it under a controller, as
        ``PUT .../autoscale`` does; ``shard`` ``(index, count)`` makes it one of count
        shards (``ShardedClient`` creates every shard).
        """
        body: dict[str, Any] = {
            "name": name,
            "operator": operator,
            "params": dict(params or {}),
            "parallelism": parallelism,
        }
        if max_parallelism is not None:
            body["max_parallelism"] = max_parallelism
        if capacity is not None:
            body["capacity"] = capacity
        if allowed_lateness_ms is not None:
            body["allowed_lateness_ms"] = allowed_lateness_ms
        if autoscale is not None:
            body["autoscale"] = dict(autoscale)
        if shard is not None:
            body["shard"] = {"index": shard[0], "count": shard[1]}
        status: dict[str, Any] = self._request("POST", "/v1/operators", json=body).json()
        return status

    def operators(self) -> list[dict[str, Any]]:
        """The status of every operator."""
        listing: list[dict[str, Any]] = self._request("GET", "/v1/operators").json()
        return listing

    def status(self, name: str) -> dict[str, Any]:
        """The status of operator ``name``."""
        status: dict[str, Any] = self._request("GET", f"/v1/operators/{name}").json()
        return status

    def metrics(self) -> str:
        """The service's Prometheus metrics, as text."""
        return self._request("GET", "/metrics").text

    def delete_operator(self, name: str) -> None:
        """Stop operator ``name`` and drop it."""
        self._batch_limits.pop(name, None)
        self._request("DELETE", f"/v1/operators/{name}")

    # -- input -----------------------------------------------------------------------------

    def add_batch(
        self,
        name: str,
        source: int,
        batch: pa.Table | Sequence[Mapping[str, Any]],
        batch_id: int | None = None,
        retry_s: float = 30.0,
    ) -> BatchResult:
        """Send a batch (an Arrow table, or JSON rows), retrying while the service says 429.

        A batch larger than the operator takes (its status' ``max_batch_rows``) is sent in
        parts, in order. Batch id k goes to the service as ``k * 2**PART_BITS + i`` for
        part i (part 0 when not split), so a resent batch is recognised part by part: use
        ids below ``2**(63 - PART_BITS)`` and do not mix them with raw ids on one source.
        On an operator with several sources, a source may run only about half the
        capacity ahead of the others: send each source's rows in batches of at most that,
        interleaving the sources (or from one thread per source); a larger table sent to
        one source while the others lag stalls until ``retry_s`` and raises.

        Returns:
            The rows accepted over all parts, and whether every part was a duplicate.

        Raises:
            CapacityError: the service was still full after ``retry_s`` seconds (the
                message gives the service's reason, e.g. waiting for the other sources).
            ServiceError: any other error answer.

        """
        limit = self._max_batch_rows(name)
        rows = batch.num_rows if isinstance(batch, pa.Table) else len(batch)
        deadline = time.monotonic() + retry_s
        accepted, duplicate = 0, True
        for part, start in enumerate(range(0, max(rows, 1), limit)):
            piece = (
                batch.slice(start, limit)
                if isinstance(batch, pa.Table)
                else batch[start : start + limit]
            )
            part_id = None if batch_id is None else (batch_id << PART_BITS) + part
            result = self._send_part(name, source, piece, part_id, deadline, retry_s)
            accepted += result.accepted
            duplicate = duplicate and result.duplicate
        return BatchResult(accepted, duplicate)

    def _max_batch_rows(self, name: str) -> int:
        """The largest batch operator ``name`` takes (asked once per name)."""
        if name not in self._batch_limits:
            self._batch_limits[name] = int(self.status(name)["max_batch_rows"])
        return self._batch_limits[name]

    def _send_part(
        self,
        name: str,
        source: int,
        batch: pa.Table | Sequence[Mapping[str, Any]],
        batch_id: int | None,
        deadline: float,
        retry_s: float,
    ) -> BatchResult:
        if isinstance(batch, pa.Table):
            kwargs: dict[str, Any] = {
                "content": arrow_bytes(batch),
                "headers": {"Content-Type": ARROW_STREAM},
            }
        else:
            kwargs = {"json": {"rows": [dict(row) for row in batch]}}
        params = {"batch_id": batch_id} if batch_id is not None else {}
        backoff_s = 0.002
        while True:
            try:
                body = self._request(
                    "POST",
                    f"/v1/operators/{name}/sources/{source}/batches",
                    params=params,
                    **kwargs,
                ).json()
                return BatchResult(int(body["accepted"]), bool(body["duplicate"]))
            except ServiceError as exc:
                if exc.status == 413:
                    self._batch_limits.pop(name, None)  # the operator may have been replaced
                if exc.status != 429:
                    raise
                if time.monotonic() + backoff_s > deadline:
                    msg = f"{name!r} source {source}: still full after {retry_s} s ({exc.detail})"
                    raise CapacityError(msg) from exc
            time.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, 0.1)

    # -- staged batches (a parallel writer: parts, then one commit) ------------------------

    def _retrying(
        self, what: str, retry_s: float, method: str, path: str, **kwargs: Any
    ) -> httpx.Response:
        """A request repeated with exponential backoff while the service answers 429.

        Raises:
            CapacityError: the service was still full after ``retry_s`` seconds.
            ServiceError: any other error answer.

        """
        deadline = time.monotonic() + retry_s
        backoff_s = 0.002
        while True:
            try:
                return self._request(method, path, **kwargs)
            except ServiceError as exc:
                if exc.status != 429:
                    raise
                if time.monotonic() + backoff_s > deadline:
                    msg = f"{what}: still full after {retry_s} s ({exc.detail})"
                    raise CapacityError(msg) from exc
            time.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, 0.25)

    def stage_part(
        self,
        name: str,
        source: int,
        writer: str,
        batch_id: int,
        part: int,
        table: pa.Table | bytes | Iterable[bytes],
        retry_s: float = 120.0,
    ) -> int:
        """Stage ``table`` as part ``part`` of the writer's batch; return the rows staged.

        Nothing is visible until ``commit_staged``; 0 means the batch was committed before.
        ``table`` may also be an Arrow IPC stream already encoded: bytes, or an iterable
        of chunks, sent as they come (chunked transfer), which must yield the whole stream
        each time it is iterated, so that a part retried after a 429 is sent whole again.

        Raises:
            CapacityError: the staging area was still full after ``retry_s`` seconds.
            ServiceError: any other error answer.

        """
        body = self._retrying(
            f"{name!r} source {source} writer {writer} batch {batch_id} part {part}",
            retry_s,
            "PUT",
            f"/v1/operators/{name}/sources/{source}/staged/{writer}/{batch_id}/{part}",
            content=arrow_bytes(table) if isinstance(table, pa.Table) else table,
            headers={"Content-Type": ARROW_STREAM},
        ).json()
        return int(body["rows"])

    def commit_staged(
        self,
        name: str,
        source: int,
        writer: str,
        batch_id: int,
        parts: Sequence[int],
        late_rows: str = "fail",
        allowed_lateness_ms: int | None = None,
        retry_s: float = 120.0,
        *,
        continues: bool = False,
    ) -> dict[str, Any]:
        """Add the staged ``parts``, in this order, as one batch of ``source``.

        ``continues``: the writer committed its earlier batches to this operator, so a
        commit that would be its first here is refused (ServiceError, 409).

        Returns:
            ``{"accepted": rows added, "dropped": late rows dropped, "duplicate": bool,
            "first_of_writer": bool}`` (the last: the source had no earlier batch of this
            writer).

        Raises:
            CapacityError: the ingest buffer was still full after ``retry_s`` seconds.
            ServiceError: any other error answer (422 for late rows with ``fail``).

        """
        payload: dict[str, Any] = {"parts": list(parts), "late_rows": late_rows}
        if allowed_lateness_ms is not None:
            payload["allowed_lateness_ms"] = allowed_lateness_ms
        if continues:
            payload["continues"] = True
        answer: dict[str, Any] = self._retrying(
            f"{name!r} source {source} writer {writer} batch {batch_id}",
            retry_s,
            "POST",
            f"/v1/operators/{name}/sources/{source}/staged/{writer}/{batch_id}/commit",
            json=payload,
        ).json()
        return answer

    def abort_staged(self, name: str, source: int, writer: str, batch_id: int) -> None:
        """Discard the staged parts of the writer's batch."""
        self._request("DELETE", f"/v1/operators/{name}/sources/{source}/staged/{writer}/{batch_id}")

    def watermark(self, name: str, source: int, ts_ms: int) -> None:
        """Promise that ``source`` sends no tuple with ``ts`` below ``ts_ms``."""
        self._request(
            "POST", f"/v1/operators/{name}/sources/{source}/watermark", json={"ts": ts_ms}
        )

    def close_source(self, name: str, source: int) -> None:
        """End of input for ``source``."""
        self._request("POST", f"/v1/operators/{name}/sources/{source}/close")

    # -- output ----------------------------------------------------------------------------

    def output(
        self, name: str, offset: int = 0, max_rows: int = 10_000, wait_ms: int = 0
    ) -> tuple[pa.Table, int]:
        """Output rows from ``offset`` as an Arrow table, and the next offset."""
        response = self._request(
            "GET",
            f"/v1/operators/{name}/output",
            params={"offset": offset, "max_rows": max_rows, "wait_ms": wait_ms},
            headers={"Accept": ARROW_STREAM},
            **self._wait(wait_ms),
        )
        table = pa.ipc.open_stream(pa.BufferReader(response.content)).read_all()
        return table, int(response.headers[NEXT_OFFSET])

    def output_rows(
        self, name: str, offset: int = 0, max_rows: int = 10_000, wait_ms: int = 0
    ) -> tuple[list[dict[str, Any]], int]:
        """Output rows from ``offset`` as JSON objects, and the next offset."""
        body = self._request(
            "GET",
            f"/v1/operators/{name}/output",
            params={"offset": offset, "max_rows": max_rows, "wait_ms": wait_ms},
            **self._wait(wait_ms),
        ).json()
        return list(body["rows"]), int(body["next_offset"])

    def read_all(
        self, name: str, timeout_s: float = 60.0, offset: int = 0, commit: bool = True
    ) -> pa.Table:
        """Every output row from ``offset`` until the log is finished (all sources closed).

        Raises:
            TimeoutError: the output did not finish within ``timeout_s``.

        """
        return read_until_finished(self, name, timeout_s, offset, commit, max_rows=100_000)

    def wait_finished(self, name: str, timeout_s: float = 60.0) -> dict[str, Any]:
        """Wait until every output row of ``name`` is in its log (all sources closed).

        Returns:
            The operator's status then.

        Raises:
            TimeoutError: the output did not finish within ``timeout_s``.

        """
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.status(name)
            if status["output"]["finished"]:
                return status
            if time.monotonic() > deadline:
                msg = f"the output of {name!r} did not finish in {timeout_s} s"
                raise TimeoutError(msg)
            # A long-poll at the log's end returns as soon as a row arrives or it finishes.
            # Not before the committed offset: a commit beyond the end (after a restart)
            # trims the rows up to it as they come, which could be before the poll.
            output = status["output"]
            at = max(int(output["end_offset"]), int(output["committed_offset"]))
            try:
                self.output(name, at, max_rows=1, wait_ms=200)
            except ServiceError as exc:
                if exc.status != HTTPStatus.BAD_REQUEST:
                    raise
                # Another client committed past ``at`` since the status: read it again.

    def output_cut(self, name: str, ts: int) -> dict[str, Any]:
        """Where the output rows of ``ts`` or later start: offset, watermark, finished."""
        cut: dict[str, Any] = self._request(
            "GET", f"/v1/operators/{name}/output/cut", params={"ts": ts}
        ).json()
        return cut

    def commit(self, name: str, offset: int, cut: Sequence[int] | None = None) -> None:
        """Everything before ``offset`` was consumed (a shard keeps a sharded reader's ``cut``)."""
        body: dict[str, Any] = {"offset": offset}
        if cut is not None:
            body["cut"] = list(cut)
        self._request("POST", f"/v1/operators/{name}/output/commit", json=body)

    # -- reconfiguration -------------------------------------------------------------------

    def reconfigure(
        self, name: str, parallelism: int | None = None, mapping: Sequence[int] | None = None
    ) -> int:
        """Queue a reconfiguration; return its epoch."""
        body: dict[str, Any] = {}
        if parallelism is not None:
            body["parallelism"] = parallelism
        if mapping is not None:
            body["mapping"] = list(mapping)
        epoch: int = self._request("POST", f"/v1/operators/{name}/reconfigure", json=body).json()[
            "epoch"
        ]
        return epoch

    def mapping(self, name: str) -> list[int]:
        """f_mu in force, every entry: entry g is the instance of key group g.

        The status (``status(name)["mapping"]``) has only a summary per instance; this
        list is what ``reconfigure(name, mapping=...)`` takes back.
        """
        full: list[int] = self._request("GET", f"/v1/operators/{name}/mapping").json()["mapping"]
        return full

    def set_autoscale(self, name: str, policy: str, **fields: float) -> dict[str, Any]:
        """Put ``name`` under an autoscale ``policy`` (``"threshold"`` or ``"model"``).

        ``fields`` are the optional ``upper``, ``target``, ``lower``, ``period_ms``,
        ``min_parallelism`` and ``max_parallelism``; returns the autoscale state.
        """
        body = {"policy": policy, **fields}
        state: dict[str, Any] = self._request(
            "PUT", f"/v1/operators/{name}/autoscale", json=body
        ).json()
        return state

    def autoscale(self, name: str) -> dict[str, Any]:
        """The autoscale state of ``name`` with its last decision (404 when manual)."""
        state: dict[str, Any] = self._request("GET", f"/v1/operators/{name}/autoscale").json()
        return state

    def clear_autoscale(self, name: str) -> None:
        """Back to manual reconfiguration of ``name``."""
        self._request("DELETE", f"/v1/operators/{name}/autoscale")

    def reconfigurations(self, name: str) -> list[dict[str, Any]]:
        """Every reconfiguration of ``name``: epoch, from, to, duration_ms, cause, reason."""
        records: list[dict[str, Any]] = self._request(
            "GET", f"/v1/operators/{name}/reconfigurations"
        ).json()
        return records


class OutputReader(Protocol):
    """What :func:`read_until_finished` reads through: a client or a sharded client."""

    def output(
        self, name: str, offset: int = 0, max_rows: int = ..., wait_ms: int = ...
    ) -> tuple[pa.Table, int]:
        """Output rows from ``offset``, and the next offset."""
        ...

    def commit(self, name: str, offset: int) -> None:
        """Everything before ``offset`` was consumed."""
        ...

    def status(self, name: str) -> dict[str, Any]:
        """The operator's status."""
        ...


def read_until_finished(
    client: OutputReader, name: str, timeout_s: float, offset: int, commit: bool, max_rows: int
) -> pa.Table:
    """Every output row of ``name`` from ``offset`` until its output is finished.

    Reads ``max_rows`` at a time, committing after each read if ``commit``.

    Raises:
        TimeoutError: the output did not finish within ``timeout_s``.

    """
    deadline = time.monotonic() + timeout_s
    tables = []
    while True:
        table, offset = client.output(name, offset, max_rows=max_rows, wait_ms=200)
        if table.num_rows:
            tables.append(table)
            if commit:
                client.commit(name, offset)
            continue
        out = client.status(name)["output"]
        if out["finished"] and offset >= out["end_offset"]:
            return pa.concat_tables(tables) if tables else table
        if time.monotonic() > deadline:
            msg = f"the output of {name!r} did not finish in {timeout_s} s"
            raise TimeoutError(msg)
