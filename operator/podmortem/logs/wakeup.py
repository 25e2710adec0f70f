"""A one-shot wake-up that hundreds of log readers wait on, each with the server's stop beside it.

``asyncio.Event`` waits on one event; waiting on two (new lines, or the server stopping) took two
tasks and an ``asyncio.wait`` per wait, and with 500 followers that was the largest single cost of
the server's event loop in ``bench/hostile_workload.py``. Here a wait on several is one future,
registered with each.
"""

from __future__ import annotations

import asyncio


class Wakeup:
    """Set once; every wait on it (or on it and others) then returns."""

    __slots__ = ("_fired", "_waiters")

    def __init__(self) -> None:
        self._fired = False
        self._waiters: dict[asyncio.Future[None], None] = {}

    def is_set(self) -> bool:
        return self._fired

    def set(self) -> None:
        if self._fired:
            return
        self._fired = True
        waiters, self._waiters = self._waiters, {}
        for future in waiters:
            if not future.done():
                future.set_result(None)

    async def wait(self, *others: Wakeup) -> None:
        """Until this or any of ``others`` is set."""
        signals = (self, *others)
        if any(s._fired for s in signals):
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for s in signals:
            s._waiters[future] = None
        try:
            await future
        finally:
            for s in signals:
                s._waiters.pop(future, None)
