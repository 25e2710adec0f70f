"""The read pool runs the least-served request's job first, returns results and errors, and drops
jobs whose caller went away before they started."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from podmortem.logs.storage import read_pool
from podmortem.logs.storage.read_pool import ReadPool

from .stored import run_sync


class _Blocker:
    """A job that holds the pool's one worker until released."""

    def __init__(self) -> None:
        self.gate, self.started = threading.Event(), threading.Event()

    def __call__(self) -> None:
        self.started.set()
        assert self.gate.wait(30)

    async def hold(self, pool: ReadPool) -> asyncio.Task[None]:
        """Start it and return once the worker is in it."""
        task = asyncio.create_task(pool.run(self))
        assert await asyncio.to_thread(self.started.wait, 10), "the worker never started the blocker"
        return task


async def _queued(pool: ReadPool, n: int) -> None:
    """Let the loop run until ``n`` jobs wait (tasks queue theirs within a few steps)."""
    for _ in range(1000):
        if pool.waiting() >= n:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{pool.waiting()} jobs queued, not {n}")


def test_a_fresh_request_goes_before_a_heavy_one_that_asked_first() -> None:
    pool = ReadPool(threads=1)
    order: list[str] = []
    blocker = _Blocker()

    async def main() -> None:
        async def heavy(ready: asyncio.Event, go: asyncio.Event) -> None:
            await pool.run(time.sleep, 0.2)  # charged 0.2 s of worker time
            ready.set()
            await go.wait()
            await pool.run(order.append, "heavy")

        ready, go = asyncio.Event(), asyncio.Event()
        heavy_task = asyncio.create_task(heavy(ready, go))
        await ready.wait()
        block = await blocker.hold(pool)
        go.set()
        await _queued(pool, 1)  # the heavy request's job is queued first
        fresh = asyncio.create_task(pool.run(order.append, "fresh"))
        await _queued(pool, 2)
        blocker.gate.set()
        await asyncio.gather(heavy_task, block, fresh)

    run_sync(main())
    assert order == ["fresh", "heavy"]


def test_results_and_errors_reach_the_caller() -> None:
    pool = ReadPool(threads=1)

    def fail() -> None:
        raise FileNotFoundError("gone")

    async def main() -> int:
        with pytest.raises(FileNotFoundError, match="gone"):
            await pool.run(fail)
        return await pool.run(sum, [1, 2, 3])

    assert run_sync(main()) == 6


def test_a_job_whose_caller_was_cancelled_before_it_started_is_not_run() -> None:
    pool = ReadPool(threads=1)
    ran: list[str] = []
    blocker = _Blocker()

    async def main() -> None:
        block = await blocker.hold(pool)
        doomed = asyncio.create_task(pool.run(ran.append, "doomed"))
        await _queued(pool, 1)
        doomed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await doomed
        blocker.gate.set()
        await block
        await pool.run(ran.append, "after")  # the worker has passed the dropped job by now

    run_sync(main())
    assert ran == ["after"]


def test_a_pool_needs_a_thread() -> None:
    with pytest.raises(ValueError, match="at least one thread"):
        ReadPool(threads=0)


def test_a_hung_job_does_not_hold_up_the_jobs_behind_it() -> None:
    """A read that never returns (a network volume that hangs): after `STUCK_S` the next job gets
    a thread of its own."""
    pool = ReadPool(threads=1)
    hang = _Blocker()

    async def main() -> list[object]:
        hung = await hang.hold(pool)
        await asyncio.sleep(read_pool.STUCK_S + 0.05)
        done: list[object] = [await pool.run(str, "behind")]  # answered while the first job hangs
        hang.gate.set()
        done.append(await hung)
        return done

    try:
        assert run_sync(main()) == ["behind", None]
    finally:
        hang.gate.set()


def test_a_job_queued_at_once_behind_a_hung_one_runs_without_another_submission() -> None:
    """The job behind the hang was queued before the hang counted as one: a later check starts a thread."""
    pool = ReadPool(threads=1)
    hang = _Blocker()

    async def main() -> object:
        hung = await hang.hold(pool)
        try:
            return await asyncio.wait_for(pool.run(str, "behind"), timeout=10)
        finally:
            hang.gate.set()
            await hung

    try:
        assert run_sync(main()) == "behind"
    finally:
        hang.gate.set()
