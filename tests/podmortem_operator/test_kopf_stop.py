"""The operator's exit is bounded even when kopf's is not (`run.await_kopf`, `run.run_to_end`).

On the real API server a kopf that gave up on a 403 once left a watch task that ignored its
cancellation: the process never exited and SIGTERM (kopf's handlers spent) did nothing, so the pod
sat terminating until the kubelet's SIGKILL. These fakes ignore their cancellation the same way.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from podmortem.operator.watching import run


async def _ignores_cancellation() -> None:
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue


def test_a_kopf_that_never_ends_is_cancelled_then_left_and_the_loop_still_closes(
        caplog: pytest.LogCaptureFixture) -> None:
    seen: dict[str, float] = {}

    async def main() -> None:
        stopping = asyncio.Event()
        kopf = asyncio.create_task(_ignores_cancellation(), name="fake-kopf")
        asyncio.get_running_loop().call_later(0.1, stopping.set)
        began = time.monotonic()
        with pytest.raises(run.KopfStuck, match=r"did not stop within .* left behind"):
            await run.await_kopf(kopf, stopping=stopping, grace_s=0.3, cancel_grace_s=0.2)
        seen["await_kopf"] = time.monotonic() - began
        assert not kopf.done()

    began = time.monotonic()
    with caplog.at_level(logging.ERROR, logger=run.__name__):
        run.run_to_end(main(), leftover_grace_s=0.2)
    total = time.monotonic() - began
    # stop after 0.1 s + 0.3 s grace + 0.2 s after the cancel; then 0.2 s for the leftovers.
    assert 0.55 <= seen["await_kopf"] < 2.0, seen
    assert total < 3.0, total
    assert "cancelling it" in caplog.text
    assert "did not end on cancellation: fake-kopf" in caplog.text


def test_a_kopf_that_ends_only_on_its_cancellation_is_no_clean_stop() -> None:
    async def ends_when_cancelled() -> None:
        await asyncio.sleep(3600)

    async def main() -> None:
        stopping = asyncio.Event()
        stopping.set()
        task = asyncio.create_task(ends_when_cancelled())
        with pytest.raises(run.KopfStuck, match="cancelled, it ended"):
            await run.await_kopf(task, stopping=stopping, grace_s=0.1, cancel_grace_s=1.0)

    run.run_to_end(main())


def test_kopfs_own_error_is_raised_and_a_kopf_that_ends_in_its_grace_is_awaited() -> None:
    async def fails() -> None:
        raise RuntimeError("watch escalated")

    async def ends_soon_after_its_stop(stopping: asyncio.Event) -> None:
        await stopping.wait()
        await asyncio.sleep(0.2)

    async def main() -> None:
        stopping = asyncio.Event()
        with pytest.raises(RuntimeError, match="watch escalated"):
            await run.await_kopf(asyncio.create_task(fails()), stopping=stopping)
        task = asyncio.create_task(ends_soon_after_its_stop(stopping))
        asyncio.get_running_loop().call_later(0.1, stopping.set)
        await run.await_kopf(task, stopping=stopping, grace_s=5.0)
        assert task.done() and not task.cancelled()

    run.run_to_end(main())


def test_run_to_end_cancels_what_main_left_running_and_it_ends() -> None:
    ended: list[str] = []

    async def cleans_up() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            ended.append("cleaned")

    async def main() -> None:
        left = asyncio.create_task(cleans_up())
        assert not left.done()
        await asyncio.sleep(0)

    run.run_to_end(main())
    assert ended == ["cleaned"]
