"""`podmortem.background.Background`: named tasks, failures logged, all cancelled and awaited on close."""

from __future__ import annotations

import asyncio
import logging

import pytest

from podmortem.background import Background


async def test_tasks_are_named_for_their_owner_and_leave_the_set_when_done() -> None:
    tasks = Background("reporter")
    task = tasks.start(asyncio.sleep(0, result=7), name="kernel-record-trainer")
    assert task.get_name() == "podmortem-reporter-kernel-record-trainer"
    assert list(tasks) == [task]
    assert await task == 7
    await asyncio.sleep(0)  # done callbacks run on the next turn
    assert len(tasks) == 0


async def test_a_failure_is_logged_with_the_tasks_name(caplog: pytest.LogCaptureFixture) -> None:
    async def fail() -> None:
        raise RuntimeError("the agent went away")

    tasks = Background("service")
    with caplog.at_level(logging.ERROR, logger="podmortem.background"):
        task = tasks.start(fail(), name="report-trainer")
        await asyncio.wait([task])
        await asyncio.sleep(0)
    assert "podmortem-service-report-trainer failed: RuntimeError: the agent went away" in caplog.text


async def test_close_cancels_and_waits_for_every_task() -> None:
    ended: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(name)

    tasks = Background("operator")
    started = [tasks.start(forever(n), name=n) for n in ("lease", "log-status")]
    await asyncio.sleep(0)
    await tasks.close()
    assert sorted(ended) == ["lease", "log-status"] and all(t.cancelled() for t in started)
    await tasks.close()  # again: nothing left, nothing raised
