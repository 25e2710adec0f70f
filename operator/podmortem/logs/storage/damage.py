"""Damaged bytes the store meets, counted once each and set aside in the background.

A load checks only an instance's newest segment; readers meet damage in older ones. Either way a
range is counted once (``corrupt_bytes_total``), however many loads and readers meet it, and a
writable store copies it into the segment's quarantine file in a worker thread, once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from podmortem.background import Background
from podmortem.logs.storage import quarantine
from podmortem.logs.storage.instance import Instance
from podmortem.logs.storage.totals import StoreTotals

#: Ranges remembered as counted; past this many, a range met again is counted again (bounded memory).
_SEEN_MAX = 100_000


class DamageLedger:
    """The damaged ranges a store has counted, and the quarantine copies it has in flight."""

    def __init__(self, totals: StoreTotals) -> None:
        self._totals = totals
        self._seen: set[tuple[Path, int]] = set()
        #: Quarantine copies in flight: waited for, never cancelled, when the store closes.
        self._copies = Background("log-store-quarantine")

    def note(self, path: Path, offset: int, length: int, *, set_aside: bool) -> None:
        """Count a damaged range of a segment once; ``set_aside``: also copy it to quarantine, once."""
        key = (path, offset)
        if key in self._seen:
            return
        if len(self._seen) < _SEEN_MAX:
            self._seen.add(key)
        self._totals.corrupt_bytes_total += length
        if set_aside:
            self._copies.start(asyncio.to_thread(quarantine.set_aside_range, path, offset, length),
                               name=f"{path.name}@{offset}")

    def adopt(self, insts: list[Instance]) -> list[Instance]:
        """Count the damage that loading ``insts`` found (the load set it aside already)."""
        for inst in insts:
            for path, damage in inst.damage_found:
                self.note(path, damage.offset, damage.length, set_aside=False)
            inst.damage_found.clear()
        return insts

    async def wait(self) -> None:
        """Wait until every quarantine copy in flight has landed."""
        await self._copies.wait()
