"""Tasks an object runs beside its own work: each named, its failure logged, all cancelled on close.

A task nobody awaits loses its exception silently (asyncio only logs it when the task is garbage
collected, if ever), and one nobody cancels outlives its owner. Every background task of the
operator and the agent is started through one of these, so each has a name in a task dump, each
failure is in the log, and stopping the owner stops them all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
logger = logging.getLogger(__name__)


class Background:
    """The background tasks of one owner (``owner`` prefixes their names: ``podmortem-reporter-...``)."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(self, coro: Coroutine[Any, Any, T], *, name: str) -> asyncio.Task[T]:
        task = asyncio.create_task(coro, name=f"podmortem-{self.owner}-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            logger.error("%s failed: %s: %s", task.get_name(), type(exc).__name__, exc, exc_info=exc)

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(list(self._tasks))

    def __len__(self) -> int:
        return len(self._tasks)

    async def close(self, *, wait_s: float | None = None) -> None:
        """Cancel every task still running and wait until each has ended (or ``wait_s`` passed)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=wait_s)
