"""At most ``FollowSettings.max_setups`` requests wait for their answer's headers at once.

Thousands of followers opening their streams together had thousands of connections complete in
one event-loop iteration (issue 40); the streams once open are not counted.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, ClassVar

import aiohttp
import pytest
from tests.loop_iterations import Iterations

from podmortem.logs.following.pod_log_api import OPENS_PER_TURN, PodLogApi
from podmortem.logs.settings import FollowSettings


class Answer:
    status = 200
    headers: ClassVar[dict[str, str]] = {}
    content = b"the stream"

    async def read(self) -> bytes:
        return b"{}"

    def release(self) -> None:
        pass

    def close(self) -> None:
        pass


class HeldTransport:
    """Answers every request once `go` is set; counts those waiting for their answer."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.waiting = 0
        self.most_waiting = 0
        self.answered = 0

    async def get(self, path: str, *, query: list[tuple[str, str]],
                  client_timeout: aiohttp.ClientTimeout) -> Any:
        self.waiting += 1
        self.most_waiting = max(self.most_waiting, self.waiting)
        try:
            await self.go.wait()
        finally:
            self.waiting -= 1
        self.answered += 1
        return Answer()


async def test_requests_wait_for_a_set_up_slot() -> None:
    transport = HeldTransport()
    api = PodLogApi(transport, settings=FollowSettings(max_setups=4))
    reads = [asyncio.create_task(api.read_pod(namespace="ns", name=f"p{i}")) for i in range(20)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert transport.waiting == 4  # the other 16 wait for a slot, not for the API
    transport.go.set()
    assert await asyncio.gather(*reads) == [{}] * 20
    assert transport.most_waiting == 4


async def test_open_streams_hold_no_set_up_slot() -> None:
    transport = HeldTransport()
    transport.go.set()
    api = PodLogApi(transport, settings=FollowSettings(max_setups=2))
    async with contextlib.AsyncExitStack() as streams:
        bodies = [await streams.enter_async_context(
            api.open_log(namespace="ns", name=f"p{i}", container="main", follow=True)) for i in range(10)]
        assert bodies == [b"the stream"] * 10  # ten streams open at once with two set-up slots
    assert transport.answered == 10


async def test_answered_streams_go_on_to_their_first_read_a_few_per_iteration() -> None:
    transport = HeldTransport()
    transport.go.set()  # every answer at once
    api = PodLogApi(transport, settings=FollowSettings())
    iterations = Iterations()
    iterations.start()

    async def first_read(i: int) -> None:
        async with api.open_log(namespace="ns", name=f"p{i}", container="main", follow=True):
            iterations.mark()

    await asyncio.gather(*(first_read(i) for i in range(4 * OPENS_PER_TURN)))
    iterations.stop()
    assert sum(iterations.marks.values()) == 4 * OPENS_PER_TURN
    assert iterations.most_in_one == OPENS_PER_TURN


async def test_an_answered_stream_holds_its_set_up_slot_until_its_first_read() -> None:
    """Answered streams waiting for their turn must not let ever more requests go meanwhile."""
    transport = HeldTransport()
    transport.go.set()
    api = PodLogApi(transport, settings=FollowSettings(max_setups=OPENS_PER_TURN))
    read = 0
    most_unread = 0

    async def first_read(i: int) -> None:
        nonlocal read, most_unread
        async with api.open_log(namespace="ns", name=f"p{i}", container="main", follow=True):
            read += 1
            most_unread = max(most_unread, transport.answered - read)
            await asyncio.sleep(0)

    await asyncio.gather(*(first_read(i) for i in range(8 * OPENS_PER_TURN)))
    assert read == 8 * OPENS_PER_TURN
    assert most_unread < OPENS_PER_TURN  # never more answered and unread than there are slots


async def test_no_bound_when_none() -> None:
    transport = HeldTransport()
    api = PodLogApi(transport, settings=FollowSettings(max_setups=None))
    reads = [asyncio.create_task(api.read_pod(namespace="ns", name=f"p{i}")) for i in range(20)]
    for _ in range(3):
        await asyncio.sleep(0)
    assert transport.waiting == 20
    transport.go.set()
    await asyncio.gather(*reads)


def test_at_least_one_set_up() -> None:
    with pytest.raises(ValueError, match="max_setups"):
        FollowSettings(max_setups=0)
