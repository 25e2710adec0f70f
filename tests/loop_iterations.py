"""Counts the event loop's iterations, to check how much work a burst puts in one of them."""

from __future__ import annotations

import asyncio
import collections


class Iterations:
    """A callback that reschedules itself with ``call_soon`` runs once per loop iteration: its count
    is the iteration's number. `mark` records, per iteration, how many times it was called."""

    def __init__(self) -> None:
        self.number = 0
        self.marks: collections.Counter[int] = collections.Counter()
        self._handle: asyncio.Handle | None = None

    def start(self) -> None:
        self._handle = asyncio.get_running_loop().call_soon(self._tick)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()

    def _tick(self) -> None:
        self.number += 1
        self._handle = asyncio.get_running_loop().call_soon(self._tick)

    def mark(self) -> None:
        self.marks[self.number] += 1

    @property
    def most_in_one(self) -> int:
        return max(self.marks.values(), default=0)
