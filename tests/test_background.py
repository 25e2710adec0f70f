"""`podmortem.background.Background`: named tasks, failures logged, all cancelled and awaited on close."""

from __future__ import annotations

import asyncio
import logging

import pytest

from podmortem.background import AlreadyRunning, Background


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


async def test_running_tells_a_named_task_until_it_ends() -> None:
    tasks = Background("log-store")
    release = asyncio.Event()
    task = tasks.start(release.wait(), name="free-early")
    assert tasks.running("free-early") and not tasks.running("retention-sweep")
    release.set()
    await task
    assert not tasks.running("free-early")


async def test_a_task_runs_in_the_context_it_is_given() -> None:
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    var.set("the handler's")

    async def read() -> str:
        return var.get()

    tasks = Background("follow")
    assert await tasks.start(read(), name="copied") == "the handler's"
    assert await tasks.start(read(), name="empty", context=contextvars.Context()) == "unset"


async def test_wait_cancels_nothing_and_returns_once_all_ended(caplog: pytest.LogCaptureFixture) -> None:
    tasks = Background("log-store-quarantine")
    ended: list[str] = []

    async def copy(name: str, fail: bool) -> None:
        await asyncio.sleep(0)
        ended.append(name)
        if fail:
            raise OSError("no space")

    with caplog.at_level(logging.ERROR, logger="podmortem.background"):
        tasks.start(copy("a", False), name="a")
        tasks.start(copy("b", True), name="b")
        await tasks.wait()
    assert sorted(ended) == ["a", "b"] and len(tasks) == 0
    assert "podmortem-log-store-quarantine-b failed: OSError: no space" in caplog.text


async def test_join_returns_when_every_task_ended() -> None:
    tasks = Background("follow-ns/pod")
    started = [tasks.start(asyncio.sleep(0, result=n), name=n) for n in ("main", "sidecar")]
    await tasks.join()
    assert [t.result() for t in started] == ["main", "sidecar"]


async def test_join_raises_the_first_failure_and_cancels_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    async def fail() -> None:
        await asyncio.sleep(0)
        raise LookupError("no such container")

    tasks = Background("follow-ns/pod")
    with caplog.at_level(logging.ERROR, logger="podmortem.background"):
        other = tasks.start(asyncio.Event().wait(), name="main")
        tasks.start(fail(), name="sidecar")
        with pytest.raises(LookupError, match="no such container"):
            await tasks.join()
    assert other.cancelled() and len(tasks) == 0
    assert caplog.text == ""  # raised to the owner, not logged as well


async def test_a_cancelled_join_cancels_and_awaits_its_tasks() -> None:
    ended: list[str] = []

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.append("main")

    tasks = Background("follow-ns/pod")
    tasks.start(forever(), name="main")
    joining = asyncio.create_task(tasks.join())
    await asyncio.sleep(0)
    joining.cancel()
    with pytest.raises(asyncio.CancelledError):
        await joining
    assert ended == ["main"] and len(tasks) == 0


async def test_a_key_runs_one_task_at_a_time_and_is_free_again_once_it_ended() -> None:
    tasks = Background("pod-events")
    release = asyncio.Event()
    first = tasks.start(release.wait(), name="uid-1", key="uid-1")
    assert tasks.keyed("uid-1") is first and tasks.keyed("uid-2") is None
    second = release.wait()
    with pytest.raises(AlreadyRunning, match="podmortem-pod-events-uid-1"):
        tasks.start(second, name="uid-1-again", key="uid-1")
    assert second.cr_frame is None  # closed, so no "never awaited" warning
    other = tasks.start(asyncio.sleep(0), name="uid-2", key="uid-2")  # another key is not held up
    release.set()
    await asyncio.gather(first, other)
    await asyncio.sleep(0)
    assert tasks.keyed("uid-1") is None
    again = tasks.start(asyncio.sleep(0, result="again"), name="uid-1", key="uid-1")
    assert await again == "again"


async def test_cancel_by_key_ends_that_task_only() -> None:
    tasks = Background("pod-events")
    one = tasks.start(asyncio.Event().wait(), name="a", key="a")
    two = tasks.start(asyncio.Event().wait(), name="b", key="b")
    await asyncio.sleep(0)
    await tasks.cancel("a")
    assert one.cancelled() and not two.done()
    assert tasks.keyed("a") is None and tasks.keyed("b") is two
    await tasks.cancel("a")  # nothing runs under it: nothing to do
    await tasks.close()


async def test_an_eternal_task_that_returns_is_logged_as_an_error(caplog: pytest.LogCaptureFixture) -> None:
    async def loop_that_gave_up() -> None:
        return

    tasks = Background("pod-watch")
    with caplog.at_level(logging.ERROR, logger="podmortem.background"):
        await tasks.start(loop_that_gave_up(), name="default", eternal=True)
        await tasks.start(asyncio.sleep(0), name="finite")  # not eternal: returning is its job
        await asyncio.sleep(0)
    [record] = caplog.records
    assert record.levelno == logging.ERROR
    assert "podmortem-pod-watch-default returned" in record.getMessage()


async def test_an_eternal_task_cancelled_is_not_an_error(caplog: pytest.LogCaptureFixture) -> None:
    tasks = Background("pod-watch")
    with caplog.at_level(logging.ERROR, logger="podmortem.background"):
        tasks.start(asyncio.Event().wait(), name="default", eternal=True)
        await asyncio.sleep(0)
        await tasks.close()
    assert not caplog.records


async def test_a_key_is_free_the_moment_its_task_returned() -> None:
    """Before the done callbacks run: an owner that queues work for a running key must not queue it
    for a task that has already looked for the last time."""
    tasks = Background("pod-events")
    seen: list[asyncio.Task[object] | None] = []

    async def last_look() -> None:
        # Runs after this step ends the task, before the done callbacks it schedules then.
        asyncio.get_running_loop().call_soon(lambda: seen.append(tasks.keyed("uid-1")))

    task = tasks.start(last_look(), name="uid-1", key="uid-1")
    await task
    assert seen == [None]
    assert await tasks.start(asyncio.sleep(0, result="next"), name="uid-1", key="uid-1") == "next"


async def test_an_awaited_tasks_failure_is_its_starters_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def fail() -> None:
        raise RuntimeError("Prometheus is down")

    tasks = Background("reporter")
    with caplog.at_level(logging.ERROR, logger="podmortem.background"):
        task = tasks.start(fail(), name="prometheus", awaited=True)
        with pytest.raises(RuntimeError, match="Prometheus is down"):
            await task
        await asyncio.sleep(0)
    assert not caplog.records and len(tasks) == 0
    slow = tasks.start(asyncio.Event().wait(), name="slow", awaited=True)
    await tasks.close()  # still cancelled with the others
    assert slow.cancelled()
