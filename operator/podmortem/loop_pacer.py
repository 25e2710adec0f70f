"""At most N callers go on per event-loop iteration: a burst of starts spread over iterations.

asyncio runs every callback that is ready in one iteration before it polls again. An operator
starting over 10,000 pods makes thousands of follower tasks ready at once, each a millisecond or so
of set-up (its store entry, its first request): one iteration then stopped the loop for seconds, and
with it every other task (the health server, the watches, the status writes). A `LoopPacer` hands
its waiters on in first-come order, ``per_turn`` of them each iteration, so an iteration holds at
most that many set-ups and the loop polls between them.
"""

from __future__ import annotations

import asyncio
from collections import deque


class LoopPacer:
    """`turn` returns in first-come order, to at most ``per_turn`` callers per event-loop iteration."""

    def __init__(self, per_turn: int) -> None:
        if per_turn < 1:
            raise ValueError(f"a pacer must let at least one caller on per iteration, got {per_turn}")
        self.per_turn = per_turn
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._scheduled = False

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def turn(self) -> None:
        """Wait for this caller's turn: a later iteration, with at most ``per_turn`` others let on in it."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiting.append(waiter)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._tick)
        await waiter  # a cancelled waiter is skipped by the next tick

    def _tick(self) -> None:
        """Once per iteration while anyone waits: wake the next ``per_turn`` (they run in the next one)."""
        self._scheduled = False
        woken = 0
        waiting = self._waiting
        while waiting and woken < self.per_turn:
            waiter = waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                woken += 1
        if waiting:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._tick)
