"""`LoopPacer`: at most N callers go on per event-loop iteration, first come first served."""

from __future__ import annotations

import asyncio

import pytest
from tests.loop_iterations import Iterations

from podmortem.loop_pacer import LoopPacer


async def test_a_burst_goes_on_a_few_per_iteration_in_order() -> None:
    pacer = LoopPacer(per_turn=4)
    iterations = Iterations()
    iterations.start()
    order: list[int] = []

    async def caller(i: int) -> None:
        await pacer.turn()
        iterations.mark()
        order.append(i)

    await asyncio.gather(*(caller(i) for i in range(50)))
    iterations.stop()
    assert order == list(range(50))
    assert sum(iterations.marks.values()) == 50
    assert iterations.most_in_one == 4  # 13 iterations of 4 (the last 2), never all 50 in one
    assert pacer.waiting == 0


async def test_a_cancelled_waiter_takes_no_turn() -> None:
    pacer = LoopPacer(per_turn=2)
    iterations = Iterations()
    iterations.start()
    went: list[int] = []

    async def caller(i: int) -> None:
        await pacer.turn()
        iterations.mark()
        went.append(i)

    tasks = [asyncio.create_task(caller(i)) for i in range(6)]
    await asyncio.sleep(0)  # every caller waits
    tasks[0].cancel()
    tasks[1].cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    iterations.stop()
    assert went == [2, 3, 4, 5]
    # The first tick finds two cancelled waiters and lets the next two on in their place.
    assert list(iterations.marks.values()) == [2, 2]


def test_at_least_one_per_turn() -> None:
    with pytest.raises(ValueError):
        LoopPacer(per_turn=0)
