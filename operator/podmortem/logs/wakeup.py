"""Waking hundreds of log readers without stalling the event loop.

``asyncio.Event`` waits on one event; waiting on two (new lines, or the server stopping) took two
tasks and an ``asyncio.wait`` per wait, and with 500 followers that was the largest single cost of
the server's event loop in ``bench/hostile_workload.py``. Here a wait on several is one future,
registered with each (`Wakeup`).

Waking them is the other cost: every reader woken runs its next step (read, render, send) in the
same turn of the loop, and 500 readers connecting at once, or catching up after one shared read,
held the loop for over 100 ms at a time. `Turns` lets `PER_TURN` readers' steps run per turn of
the loop and queues the rest for the next turns, so timers and other requests run in between.
"""

from __future__ import annotations

import asyncio
import collections
import weakref

#: Reader steps per turn of the event loop. A step is at most one chunk (256 KiB) read, rendered
#: and sent: up to about 1.5 ms measured, so a turn stays under about 25 ms.
PER_TURN = 16


class Turns:
    """At most ``per_turn`` callers of `take` go on per turn of the loop; the rest wait in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, per_turn: int = PER_TURN) -> None:
        self._loop = loop
        self._per_turn = per_turn
        self._used = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._next_turn_due = False

    async def take(self) -> None:
        """Return at once while this turn has room, else in a later turn (first come, first served)."""
        if self._used < self._per_turn and not self._waiters:
            self._used += 1
            self._due()
            return
        future = self._loop.create_future()
        self._waiters.append(future)
        self._due()
        await future  # a cancelled caller's future is skipped below

    def waiting(self) -> int:
        return len(self._waiters)

    def _due(self) -> None:
        if not self._next_turn_due:
            self._next_turn_due = True
            self._loop.call_soon(self._turn)

    def _turn(self) -> None:
        """The next turn: room again, first for those waiting."""
        self._next_turn_due = False
        self._used = 0
        while self._waiters and self._used < self._per_turn:
            future = self._waiters.popleft()
            if not future.done():
                future.set_result(None)
                self._used += 1
        if self._used:
            self._due()


_TURNS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Turns] = weakref.WeakKeyDictionary()


async def take_turn() -> None:
    """`Turns.take` on the running loop's turns (one per loop: every log reader of it shares them)."""
    loop = asyncio.get_running_loop()
    turns = _TURNS.get(loop)
    if turns is None:
        turns = _TURNS[loop] = Turns(loop)
    await turns.take()


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
