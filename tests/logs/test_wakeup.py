"""A wait on a `Wakeup` (and others beside it) returns once any is set, and leaves nothing behind."""

from __future__ import annotations

import asyncio

from podmortem.logs.wakeup import Wakeup


async def test_a_wait_returns_when_the_wakeup_is_set() -> None:
    w = Wakeup()
    waiter = asyncio.create_task(w.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    w.set()
    await asyncio.wait_for(waiter, 1)
    assert w.is_set()
    await asyncio.wait_for(w.wait(), 1)  # set before the wait: returns at once


async def test_a_wait_on_several_returns_when_any_is_set_and_unregisters() -> None:
    changed, stop = Wakeup(), Wakeup()
    waiters = [asyncio.create_task(changed.wait(stop)) for _ in range(100)]
    await asyncio.sleep(0)
    stop.set()
    await asyncio.wait_for(asyncio.gather(*waiters), 1)
    assert not changed.is_set()
    assert not changed._waiters  # nothing left registered on the one that was not set


async def test_a_cancelled_wait_unregisters_and_others_still_wake() -> None:
    changed, stop = Wakeup(), Wakeup()
    gone = asyncio.create_task(changed.wait(stop))
    stays = asyncio.create_task(changed.wait(stop))
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.sleep(0)
    assert gone.cancelled()
    assert len(changed._waiters) == 1 and len(stop._waiters) == 1
    changed.set()
    await asyncio.wait_for(stays, 1)
    assert not stop._waiters
