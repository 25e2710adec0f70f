"""A loop thread that does not end when asked says so, and a stopped one leaves its loop closed."""

from __future__ import annotations

import asyncio
import threading

import pytest

from podmortem_demo.threads import LoopThread, StopFailed


class _Stuck(LoopThread):
    """Ignores the stop: its serve() waits on a threading.Event the test holds."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__(name="stuck-loop")
        self.release = release

    async def serve(self) -> None:
        self.ready()
        await asyncio.to_thread(self.release.wait, 30)


class _Polite(LoopThread):
    async def serve(self) -> None:
        self.ready()
        await self.stopped()


def test_a_thread_that_outlives_its_stop_raises() -> None:
    release = threading.Event()
    stuck = _Stuck(release)
    stuck.start()
    try:
        with pytest.raises(StopFailed, match=r"stuck-loop was still running 0\.2 s"):
            stuck.stop(timeout=0.2)
    finally:
        release.set()
    stuck.stop(timeout=30)  # once released it ends, and stop() returns
    assert stuck.loop.is_closed()


def test_a_stopped_thread_closes_its_loop() -> None:
    polite = _Polite(name="polite-loop")
    polite.start()
    polite.stop(timeout=30)
    assert polite.loop.is_closed() and polite.error is None
