"""Long-polls of the output: waits on the event loop, none holding a worker thread.

``GET .../output?wait_ms=W`` waits for a row at its offset. The wait is an ``asyncio``
event that the output log sets (through ``call_soon_threadsafe``) when rows are appended
or the log ends, so a waiting read costs no thread; ``LongPolls`` caps how many wait at
once (``--max-long-polls``), beyond which a read with a wait gets 429.
"""

from __future__ import annotations

import asyncio
import contextlib

from stretch.errors import CapacityError
from stretch.vsn import Pipeline

__all__ = ["LongPolls"]


class LongPolls:
    """The output reads waiting for rows: at most ``limit`` at once.

    Args:
        limit: The most reads waiting at once.

    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.waiting = 0

    @property
    def full(self) -> bool:
        """Whether another read with a wait would be refused."""
        return self.waiting >= self.limit

    async def wait(self, pipeline: Pipeline, offset: int, timeout_s: float) -> None:
        """Wait until the output has a row at ``offset`` or ends, at most ``timeout_s``.

        Raises:
            CapacityError: ``limit`` reads are waiting already.

        """
        if self.full:
            msg = (
                f"{self.waiting} output reads are waiting, the service's limit "
                f"(--max-long-polls {self.limit}); retry later or read without wait_ms"
            )
            raise CapacityError(msg)
        loop = asyncio.get_running_loop()
        changed = asyncio.Event()

        def notify() -> None:  # called by the drainer's thread
            with contextlib.suppress(RuntimeError):  # the loop closed
                loop.call_soon_threadsafe(changed.set)

        self.waiting += 1
        pipeline.subscribe(notify)
        try:
            deadline = loop.time() + timeout_s
            while True:
                changed.clear()
                remaining = deadline - loop.time()
                output = pipeline.output_status()
                if output.finished or output.end_offset > offset or remaining <= 0:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), remaining)
        finally:
            pipeline.unsubscribe(notify)
            self.waiting -= 1
