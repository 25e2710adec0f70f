"""A wait on a `Wakeup` (and others beside it) returns once any is set, and leaves nothing behind."""

from __future__ import annotations

import asyncio
import collections

from podmortem.logs import wakeup
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


async def test_turns_let_a_few_per_turn_go_on_in_arrival_order() -> None:
    loop = asyncio.get_running_loop()
    turns = wakeup.Turns(loop, per_turn=4)
    went: list[tuple[int, int]] = []  # (caller, turn it went on in)
    turn = [0]

    def tick() -> None:
        turn[0] += 1
        loop.call_soon(tick)

    loop.call_soon(tick)

    async def caller(i: int) -> None:
        await turns.take()
        went.append((i, turn[0]))

    tasks = [asyncio.create_task(caller(i)) for i in range(14)]
    tasks[6].cancel()  # one that went away is skipped, not counted
    await asyncio.gather(*tasks, return_exceptions=True)
    assert [i for i, _ in went] == [i for i in range(14) if i != 6]
    per_turn = collections.Counter(t for _, t in went)
    assert max(per_turn.values()) <= 4 and len(per_turn) >= 4
    assert turns.waiting() == 0


async def test_a_timer_runs_between_the_turns_of_many_woken_readers() -> None:
    """The point of turns: a due timer (another request, the stall probe) is not held behind them all."""
    w = Wakeup()
    order: list[str] = []

    async def reader() -> None:
        await w.wait()
        await wakeup.take_turn()
        order.append("reader")

    tasks = [asyncio.create_task(reader()) for _ in range(20 * wakeup.PER_TURN)]
    await asyncio.sleep(0)
    asyncio.get_running_loop().call_later(0, order.append, "timer")
    w.set()
    await asyncio.gather(*tasks)
    assert order.index("timer") <= 2 * wakeup.PER_TURN
