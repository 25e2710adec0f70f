"""Reading a pod's whole stored log back as the follower's events, for the exactly-once check."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from podmortem.logs.events import GapMarker, LogEnd, LogLine
from podmortem.logs.storage import reading
from podmortem.logs.storage.store import LogStore

T = TypeVar("T")


async def stored_events(
    log_store: LogStore, *, namespace: str = "default", pod: str = "p", container: str = "main"
) -> list[LogLine | GapMarker | LogEnd]:
    """Lines, gap markers and ends of every stored instance of a container, oldest first."""
    out: list[LogLine | GapMarker | LogEnd] = []
    for inst in log_store.instances(namespace=namespace, pod=pod, container=container):
        out.extend(await reading.read_lines(inst))
    return out


async def until(condition: Callable[[], bool], *, within_s: float = 30.0, poll_s: float = 0.002) -> None:
    """Wait until ``condition()`` holds (the store has no "lines written" event to wait on)."""
    async with asyncio.timeout(within_s):
        while True:
            if condition():
                return
            await asyncio.sleep(poll_s)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on a loop of its own, from a sync test (a hypothesis example).

    Not ``asyncio.run``: that sets the thread's current loop to None when it ends, which
    orphans the loop looptime opened around the test, and the orphan's ResourceWarning then
    fails a later test.
    """
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
