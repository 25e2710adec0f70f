"""How the open-files limit is shared, and the connection slots that hold followers to their share."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podmortem import open_files
from podmortem.logs.following.connection_slots import ConnectionSlots


def test_a_container_default_leaves_servers_a_reserve() -> None:
    b = open_files.budget(segments=256, limit=1024)
    assert (b.reserved, b.segments, b.connections) == (128, 112, 672)
    high = open_files.budget(segments=256, limit=524_288)
    assert high.segments == 256 and high.connections == 524_288 - 52_428 - 2 * 256


@given(limit=st.integers(min_value=64, max_value=1 << 22),
       segments=st.integers(min_value=1, max_value=1 << 16))
def test_the_shares_never_exceed_the_limit_above_the_floors(limit: int, segments: int) -> None:
    b = open_files.budget(segments=segments, limit=limit)
    assert b.connections is not None
    assert b.reserved >= open_files.RESERVED_MIN and b.segments <= max(segments, open_files.BUDGET_FLOOR)
    if limit - b.reserved >= 10 * open_files.BUDGET_FLOOR:
        assert b.reserved + 2 * b.segments + b.connections == limit


async def test_followers_past_the_slots_wait_and_take_one_when_a_follow_ends() -> None:
    slots = ConnectionSlots(2)
    release = asyncio.Event()
    started: list[int] = []

    async def follow(i: int) -> None:
        async with slots.held():
            started.append(i)
            await release.wait()

    tasks = [asyncio.create_task(follow(i)) for i in range(5)]
    for _ in range(10):
        await asyncio.sleep(0)
    assert (slots.in_use, slots.waiting, len(started)) == (2, 3, 2)
    assert "3 followers waiting" in slots.describe()
    release.set()
    await asyncio.gather(*tasks)
    assert (slots.in_use, slots.waiting, sorted(started)) == (0, 0, [0, 1, 2, 3, 4])
    assert slots.describe() == "log connections 0 of 2"


async def test_a_cancelled_waiter_leaves_no_count_behind() -> None:
    slots = ConnectionSlots(1)
    async with slots.held():
        waiter = asyncio.create_task(slots.held().__aenter__())
        await asyncio.sleep(0)
        assert slots.waiting == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    assert (slots.in_use, slots.waiting) == (0, 0)
