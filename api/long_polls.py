"""Long-polls of the output: waits on the event loop, none holding a worker thread.

``GET .../output?wait_ms=W`` waits for a row at its offset. The wait is an ``asyncio``
event that the output log sets (through ``call_soon_threadsafe``) when rows are appended
or the log ends, so a waiting read costs no thread; ``LongPolls`` caps how many wait at
once (``--max-long-polls``), beyond which a read with a wait gets 429.

A wait ends early, freeing its slot at once, when its client hangs up (the server's
``http.disconnect``), when its operator is deleted (the read answers 404; a wait is bound
to the operator object it started on, never to a new operator of the same name) and when
the service shuts down (``stop``: the read answers 503, so SIGTERM never has to wait out
a long-poll or cancel it).
"""

from __future__ import annotations

import asyncio
import contextlib

from starlette.types import Receive

from stretch.api.errors import NotFoundError, UnavailableError
from stretch.api.operators import ManagedOperator
from stretch.errors import CapacityError

__all__ = ["LongPolls"]


class LongPolls:
    """The output reads waiting for rows: at most ``limit`` at once.

    Args:
        limit: The most reads waiting at once.

    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.waiting = 0
        self.stopping = False
        self._wakers: set[asyncio.Event] = set()

    def stop(self) -> None:
        """The service is shutting down: end every wait now (503), and later ones at once.

        Call it on the event loop's thread.
        """
        self.stopping = True
        for waker in self._wakers:
            waker.set()

    @property
    def full(self) -> bool:
        """Whether another read with a wait would be refused."""
        return self.waiting >= self.limit

    async def wait(
        self, managed: ManagedOperator, offset: int, timeout_s: float, receive: Receive
    ) -> bool:
        """Wait until ``managed``'s output has a row at ``offset`` or ends, at most ``timeout_s``.

        ``receive`` is the request's ASGI receive: a disconnect ends the wait.

        Returns:
            Whether the client is still there (False: it hung up, answer nothing).

        Raises:
            CapacityError: ``limit`` reads are waiting already.
            NotFoundError: the operator was deleted (before or while it waited).
            UnavailableError: the service is shutting down.

        """
        if self.full:
            msg = (
                f"{self.waiting} output reads are waiting, the service's limit "
                f"(--max-long-polls {self.limit}); retry later or read without wait_ms"
            )
            raise CapacityError(msg)
        loop = asyncio.get_running_loop()
        changed = asyncio.Event()

        def notify() -> None:  # called by the drainer's thread, or a deleting one
            with contextlib.suppress(RuntimeError):  # the loop closed
                loop.call_soon_threadsafe(changed.set)

        self.waiting += 1
        self._wakers.add(changed)
        managed.subscribe(notify)
        hung_up = asyncio.ensure_future(_disconnect(receive))
        try:
            deadline = loop.time() + timeout_s
            while not self.stopping:
                changed.clear()
                if managed.stopped:
                    msg = f"operator {managed.name!r} was deleted while this read waited"
                    raise NotFoundError(msg)
                remaining = deadline - loop.time()
                output = managed.pipeline.output_status()
                if output.finished or output.end_offset > offset or remaining <= 0:
                    return True
                woken = asyncio.ensure_future(changed.wait())
                await asyncio.wait(
                    (woken, hung_up), timeout=remaining, return_when="FIRST_COMPLETED"
                )
                woken.cancel()
                if hung_up.done():
                    return False
            msg = "the service is shutting down; read again once it is back"
            raise UnavailableError(msg)
        finally:
            hung_up.cancel()
            managed.unsubscribe(notify)
            self._wakers.discard(changed)
            self.waiting -= 1


async def _disconnect(receive: Receive) -> None:
    """Return once the client has hung up (a GET's body, if any, is skipped)."""
    while (await receive())["type"] != "http.disconnect":
        pass
