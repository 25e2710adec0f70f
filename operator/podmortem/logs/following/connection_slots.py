"""At most N log requests open at once: the followers' share of the open-files limit.

A follow holds its connection (a socket) for hours. With more pods than descriptors, followers that
opened a socket past the limit would take the descriptors the process's servers, watches and store
need (see ``podmortem.open_files.budget``). Past the budget a follower waits here for a slot, visibly
(`ConnectionSlots.waiting`), and takes one when another follow ends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class ConnectionSlots:
    """A counted semaphore over log requests; ``waiting`` and ``in_use`` are for metrics and readiness."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"at least one connection slot is needed, got {size}")
        self.size = size
        self.in_use = 0
        self.waiting = 0
        self._free = asyncio.Semaphore(size)

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """Hold a slot for the life of one request (its response read or its stream closed)."""
        self.waiting += 1
        try:
            await self._free.acquire()
        finally:
            self.waiting -= 1
        self.in_use += 1
        try:
            yield
        finally:
            self.in_use -= 1
            self._free.release()

    def describe(self) -> str:
        text = f"log connections {self.in_use:,} of {self.size:,}"
        if self.waiting:
            text += f" ({self.waiting:,} followers waiting for one: raise the open-files hard limit)"
        return text
