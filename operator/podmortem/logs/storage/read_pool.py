"""Worker threads for serving stored logs, least-served request first.

Readers' file work (reading and CRC-checking chunks, rendering large lines, report pages) runs
here rather than in the loop's default executor, for two reasons measured in
``bench/hostile_workload.py``:

* **One thread.** CPython's threads share one interpreter lock: with the default executor's six
  busy workers the event loop waited for the lock after every socket call and stalled for
  seconds. One worker leaves the loop a core of its own (the writer's own work stays in the
  default executor, so writes never queue behind readers).
* **Least attained service first.** A queue in arrival order puts a one-line ``tail=10`` request
  behind hundreds of chunks of readers streaming 16 MiB lines. Here each request (its asyncio
  task) is charged the worker time it used, decayed with a half-life, and the waiting job of
  the request charged least runs next: a new or light request goes ahead; heavy ones share what
  is left, and none starves while the workers have spare time.

Every job runs to completion once started; a job whose caller was cancelled while it waited is
dropped unstarted. A job that hangs (a network volume that stops answering) does not hold up the
rest: when every worker has been on one job for over `STUCK_S` and jobs wait, another thread is
started, up to `MAX_THREADS` (checked when a job is queued and again a little after).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

#: Worker threads. One: it uses the core the event loop leaves, and it is the only thread that
#: competes with the loop for the interpreter lock. Measured with the hostile-workload bench on 2
#: cores, two threads doubled the loop's longest stalls and six made them seconds long.
THREADS = 1
#: A job running this long is waiting on a disk (a network volume that hangs), not computing
#: (no job reads more than a chunk or a piece): another thread is started for the jobs behind it.
STUCK_S = 0.25
#: Threads at most, the stuck ones included.
MAX_THREADS = 4
#: Seconds an extra thread waits idle before it ends.
IDLE_EXIT_S = 5.0
#: Seconds after which a request's charged worker time counts half.
HALF_LIFE_S = 10.0


@dataclass(slots=True)
class _Account:
    """Worker seconds charged to one request, decayed to ``at``."""

    served: float = 0.0
    at: float = field(default_factory=time.monotonic)

    def now(self, t: float) -> float:
        return self.served * math.exp2(-(t - self.at) / HALF_LIFE_S)

    def charge(self, seconds: float, t: float) -> None:
        self.served = self.now(t) + seconds
        self.at = t


@dataclass(order=True, slots=True)
class _Job:
    score: float
    seq: int
    run: Callable[[], Any] = field(compare=False)
    future: asyncio.Future[Any] = field(compare=False)
    account: _Account = field(compare=False)


class ReadPool:
    """A few daemon threads taking the waiting job of the least-charged request first."""

    def __init__(self, threads: int = THREADS, max_threads: int = MAX_THREADS) -> None:
        if threads < 1:
            raise ValueError("a read pool needs at least one thread")
        self._threads = threads
        self._max_threads = max(threads, max_threads)
        self._started = 0
        self._idle = 0
        #: When each busy worker started its job.
        self._busy_since: dict[int, float] = {}
        self._heap: list[_Job] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._accounts: weakref.WeakKeyDictionary[asyncio.Task[Any], _Account] = weakref.WeakKeyDictionary()

    def waiting(self) -> int:
        """Jobs waiting for a worker (for metrics and tests)."""
        with self._cond:
            return len(self._heap)

    async def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in a worker, charged to the calling task."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        account = self._accounts.get(task) if task is not None else None
        if account is None:
            account = _Account()
            if task is not None:
                self._accounts[task] = account
        future: asyncio.Future[T] = loop.create_future()
        with self._cond:
            job = _Job(account.now(time.monotonic()), next(self._seq),
                       lambda: fn(*args, **kwargs), future, account)
            heapq.heappush(self._heap, job)
            self._start_if_needed()
            self._cond.notify()
            queued = self._idle == 0
        if queued:  # behind busy workers: look again once they may count as stuck, even if no job follows
            loop.call_later(STUCK_S * 1.2, self._recheck)
        return await future

    def _start_if_needed(self) -> None:
        """Under the lock: a first thread, or another one when every worker is stuck."""
        if self._started < self._threads or (self._heap and self._all_stuck()):
            self._started += 1
            threading.Thread(target=self._work, name=f"podmortem-read-{self._started}", daemon=True).start()

    def _recheck(self) -> None:
        with self._cond:
            self._start_if_needed()

    def _all_stuck(self) -> bool:
        """Every worker is busy, each on one job for over `STUCK_S`, and another may start."""
        if self._idle or self._started >= self._max_threads:
            return False
        now = time.monotonic()
        return len(self._busy_since) == self._started and \
            all(now - since > STUCK_S for since in self._busy_since.values())

    def _work(self) -> None:
        me = threading.get_ident()
        while True:
            with self._cond:
                self._busy_since.pop(me, None)
                self._idle += 1
                while not self._heap:
                    if not self._cond.wait(IDLE_EXIT_S) and not self._heap and self._started > self._threads:
                        self._idle -= 1  # an extra thread, started for a hang, is not kept
                        self._started -= 1
                        return
                self._idle -= 1
                job = heapq.heappop(self._heap)
                started = time.monotonic()
                self._busy_since[me] = started
            if job.future.cancelled():
                continue
            try:
                result: Any = job.run()
            except BaseException as exc:  # handed to the awaiting task
                error: BaseException | None = exc
                result = None
            else:
                error = None
            ended = time.monotonic()
            with self._cond:
                job.account.charge(ended - started, ended)
            # A closed loop raises RuntimeError: nobody waits for this any more.
            with contextlib.suppress(RuntimeError):
                job.future.get_loop().call_soon_threadsafe(_settle, job.future, result, error)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


#: The process's pool: every store reader and report page shares it.
POOL = ReadPool()


async def run(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run ``fn`` in the shared read pool (see `ReadPool.run`)."""
    return await POOL.run(fn, *args, **kwargs)
