"""The operator and an emulated cluster in one process, each on a thread and event loop of its own.

kopf must not share a loop with kmock: it treats every task on its loop as its
own and waits for kmock's server tasks at exit. So the cluster (kmock, and
whatever plays kubelet and node agent) runs on one background loop, the real
operator (``podmortem operator``'s own ``run_operator``) on another, and the
caller's thread drives both through thread-safe calls. ``podmortem demo``, the
end-to-end tests and the benchmarks all run this way; this module is the one
copy of it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from podmortem.errors import PodmortemError
from podmortem.kube.config import ClusterAccess
from podmortem.logs.settings import FollowSettings
from podmortem.operator.settings import OperatorSettings

if TYPE_CHECKING:
    from podmortem.operator.watching import run as runtime

T = TypeVar("T")


class StartFailed(PodmortemError, RuntimeError):
    """The cluster or the operator did not come up; ``str(exc)`` says which and why."""


class StopFailed(PodmortemError, TimeoutError):
    """A loop thread was still running when its stop timed out: something in it did not end."""


def wait_for(probe: Callable[[], T | None], *, what: str, timeout: float, poll_s: float = 0.02) -> T:
    """Poll ``probe`` from a plain thread until it returns something truthy; TimeoutError names ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(poll_s)


class LoopThread:
    """A background thread whose loop runs :meth:`serve` until :meth:`stop`; subclasses fill ``serve``.

    ``serve`` sets things up, calls :meth:`ready`, awaits :meth:`stopped`, and tears down.
    """

    def __init__(self, *, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    async def serve(self) -> None:
        raise NotImplementedError

    def ready(self) -> None:
        self._ready.set()

    async def stopped(self) -> None:
        assert self._stop is not None
        await self._stop.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def body() -> None:
            self._stop = asyncio.Event()
            await self.serve()

        try:
            self.loop.run_until_complete(body())
        except BaseException as exc:
            self.error = exc
            self._ready.set()
        finally:
            # As asyncio.Runner closes its loop: generators finalised, executor threads joined.
            try:
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
                self.loop.run_until_complete(self.loop.shutdown_default_executor())
            finally:
                self.loop.close()

    def start(self, *, timeout: float = 30.0) -> None:
        self._thread.start()
        if not self._ready.wait(timeout) or self.error is not None:
            raise StartFailed(f"the emulated cluster did not start: {self.error!r}")

    def stop(self, *, timeout: float = 60.0) -> None:
        """Ask ``serve`` to end and wait for the thread; `StopFailed` if it outlives ``timeout``."""
        if self._stop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        if self._thread.is_alive():
            name = self._thread.name
            raise StopFailed(f"{name} was still running {timeout:g} s after it was asked to stop")

    def call(self, coro: Coroutine[Any, Any, T], *, timeout: float = 30.0) -> T:
        """Run a coroutine on this loop and wait for its result (cancelled if it takes too long)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def sync(self, fn: Callable[[], T]) -> T:
        """A plain function on this loop (kmock's state is not thread-safe)."""

        async def wrap() -> T:
            return fn()

        return self.call(wrap())


class OperatorThread:
    """The real operator on a thread and loop of its own, against the API at ``url``.

    ``access`` is how it logs in where that is not anonymous (a real API server: a token, a CA);
    by default plain ``url``, as an emulated API takes it.
    """

    def __init__(
        self,
        *,
        url: str,
        settings: OperatorSettings,
        follow: FollowSettings | None = None,
        name: str = "operator",
        access: ClusterAccess | None = None,
    ) -> None:
        self.url = url
        self.access = access or ClusterAccess(server=url, source="the emulated API")
        self.settings = settings
        self.follow = follow or FollowSettings(read_timeout_s=5.0, backoff_min_s=0.05, backoff_max_s=0.5)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.running: list[runtime.Running] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def _main(self) -> None:
        from podmortem.operator.watching import run as runtime

        try:
            with asyncio.Runner() as runner:
                self.loop = runner.get_loop()
                runner.run(
                    runtime.run_operator(
                        settings=self.settings,
                        access=self.access,
                        stop_flag=self._stop,
                        running=self.running,
                        follow_settings=self.follow,
                    )
                )
        except BaseException as exc:  # the caller sees it in `error` (and `start` raises it)
            self.error = exc

    def start(self, *, timeout: float = 30.0) -> runtime.Running:
        """Start, and return the operator's handles once it runs."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.running:
            if self.error is not None or not self._thread.is_alive():
                raise StartFailed(f"the operator did not start: {self.error!r}")
            if time.monotonic() > deadline:
                raise StartFailed(f"the operator did not start within {timeout:g} s")
            time.sleep(0.02)
        return self.running[0]

    def stop(self, *, timeout: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def call(self, coro: Coroutine[Any, Any, T], *, timeout: float = 30.0) -> T:
        """Run a coroutine on the operator's loop (e.g. to read its log store)."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)
