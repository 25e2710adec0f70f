"""Tasks an object runs beside its own work: each named, its failure logged, all cancelled on close.

A task nobody awaits loses its exception silently (asyncio only logs it when the task is garbage
collected, if ever), and one nobody cancels outlives its owner. Every background task of the
operator, the agent, the log store and the log followers is started through one of these, so
each has a name in a task dump, each failure is in the log (or raised to an owner that joins its
tasks), and stopping the owner stops them all.

Per-object work (one task per pod, per connection) is started under a key: a second start of a key
still running is refused (`AlreadyRunning`), so the owner decides what a second event means (queue
it for the running task, as `PerObject` does), and `cancel` ends one key's task. A loop meant to run
until cancelled is started ``eternal=True``: should it return, that is logged as the error it is
(as kopf's ``guard`` warns of a task "finished unexpectedly"), where it would otherwise stop working
without a word.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
logger = logging.getLogger(__name__)


class AlreadyRunning(RuntimeError):
    """`Background.start` was given a key whose task has not ended yet."""


class Background:
    """The background tasks of one owner (``owner`` prefixes their names: ``podmortem-reporter-...``)."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._tasks: set[asyncio.Task[Any]] = set()
        #: The running task of each key it was started under.
        self._keyed: dict[str, asyncio.Task[Any]] = {}
        #: Tasks that must not return (`start`'s ``eternal``).
        self._eternal: set[asyncio.Task[Any]] = set()
        #: Tasks whose starter awaits them and handles their failure (`start`'s ``awaited``).
        self._awaited: set[asyncio.Task[Any]] = set()
        #: While `join` waits, failures are collected for it to raise instead of being logged.
        self._joining = False
        self._failed: list[BaseException] = []

    def start(self, coro: Coroutine[Any, Any, T], *, name: str,
              context: contextvars.Context | None = None, key: str | None = None,
              eternal: bool = False, awaited: bool = False) -> asyncio.Task[T]:
        """Start ``coro`` as the task ``podmortem-<owner>-<name>``.

        ``context``: the context variables it runs with (default: a copy of the caller's, as
        ``asyncio.create_task``); an empty ``contextvars.Context()`` keeps a long task from holding
        what its starter's context refers to.
        ``key``: the object it works for; while a task of that key runs, another is refused with
        `AlreadyRunning` (``coro`` is closed unstarted).
        ``eternal``: it runs until cancelled; returning is logged as an error.
        ``awaited``: its starter awaits it and handles its failure, so a failure is not logged here
        (the starter must cancel it if it will not await it after all); it is still named, counted
        and cancelled with the others.
        """
        running = self.keyed(key) if key is not None else None
        if running is not None:
            coro.close()
            raise AlreadyRunning(f"podmortem-{self.owner}: a task for {key!r} is running: "
                                 f"{running.get_name()}")
        task = asyncio.create_task(coro, name=self.task_name(name), context=context)
        self._tasks.add(task)
        if key is not None:
            self._keyed[key] = task
            task.add_done_callback(functools.partial(self._unkey, key))
        if eternal:
            self._eternal.add(task)
        if awaited:
            self._awaited.add(task)
        task.add_done_callback(self._done)
        return task

    def _unkey(self, key: str, task: asyncio.Task[Any]) -> None:
        if self._keyed.get(key) is task:
            del self._keyed[key]

    def keyed(self, key: str) -> asyncio.Task[Any] | None:
        """The task started under ``key`` that has not ended yet, if any.

        Ended means done, not yet forgotten: the done callbacks run a turn later, and a key must be
        free the moment its coroutine returns (an owner that queues work for a running key would
        otherwise queue it for a task that will never look again).
        """
        task = self._keyed.get(key)
        return task if task is not None and not task.done() else None

    async def cancel(self, key: str) -> None:
        """Cancel the task started under ``key`` (if one runs) and wait until it has ended."""
        task = self.keyed(key)
        if task is None:
            return
        task.cancel()
        await asyncio.wait([task])

    def task_name(self, name: str) -> str:
        """The full name `start` gives a task started as ``name``."""
        return f"podmortem-{self.owner}-{name}"

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        eternal = task in self._eternal
        self._eternal.discard(task)
        awaited = task in self._awaited
        self._awaited.discard(task)
        if task.cancelled() or awaited:
            return
        exc = task.exception()
        if exc is None:
            if eternal:
                logger.error("%s returned: it should run until cancelled, so what it did has "
                             "stopped", task.get_name())
            return
        if self._joining:
            self._failed.append(exc)
        else:
            logger.error("%s failed: %s: %s", task.get_name(), type(exc).__name__, exc, exc_info=exc)

    def running(self, name: str) -> bool:
        """Whether a task started as ``name`` has not ended yet (a way to start one at most once)."""
        full = self.task_name(name)
        return any(task.get_name() == full and not task.done() for task in self._tasks)

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(list(self._tasks))

    def __len__(self) -> int:
        return len(self._tasks)

    async def wait(self) -> None:
        """Wait, cancelling nothing, until every task started so far (and meanwhile) has ended.

        For work that must finish rather than stop (a copy in a worker thread, which a cancel
        would only stop waiting for); failures are logged as always.
        """
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    async def join(self) -> None:
        """Wait until every task has ended, as ``asyncio.TaskGroup`` does for its own.

        The first task to fail cancels the others, and its exception is raised here: the owner
        handles it, so it is not logged as well (any further failure meanwhile is). Cancelling
        ``join`` cancels the tasks and waits for them.
        """
        self._joining = True
        try:
            while self._tasks and not self._failed:
                await asyncio.wait(list(self._tasks), return_when=asyncio.FIRST_EXCEPTION)
        except BaseException:  # cancelled: the tasks go too, and what failed meanwhile is logged
            await self._end_join(raising=False)
            raise
        failed = await self._end_join(raising=True)
        if failed:
            raise failed

    async def _end_join(self, *, raising: bool) -> BaseException | None:
        """Cancel what still runs; log every failure but the first when ``raising`` (returned)."""
        try:
            if self._tasks:
                await self.close()
        finally:
            self._joining = False
            failed, self._failed = self._failed, []
        for exc in failed[1 if raising else 0:]:
            logger.error("podmortem-%s: a task failed: %s: %s", self.owner, type(exc).__name__, exc,
                         exc_info=exc)
        return failed[0] if failed and raising else None

    async def close(self, *, wait_s: float | None = None) -> None:
        """Cancel every task still running and wait until each has ended (or ``wait_s`` passed)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=wait_s)
