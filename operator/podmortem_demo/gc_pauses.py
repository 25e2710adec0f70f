"""The garbage collector's pauses in this process, for the benches: how many, how long, the longest.

A full pass walks every tracked object and stops the event loop meanwhile, so its length grows
with the heap: the benches print it next to start-up times and report latencies. `LoopLag` measures
the stall itself, whatever caused it (a collection, a long callback): issue 40 asks for none over
`GOAL_S` at 10,000 pods.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import time

#: The longest event-loop pause the benches accept (issue 40: 100 ms at 10,000 pods).
GOAL_S = 0.100


class GcPauses:
    """Counts pauses per generation while `on` (any thread's: the operator's allocates the most)."""

    def __init__(self) -> None:
        self.on = False
        self.seconds = [0.0, 0.0, 0.0]
        self.counts = [0, 0, 0]
        self.longest = [0.0, 0.0, 0.0]
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def reset(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.counts = [0, 0, 0]
        self.longest = [0.0, 0.0, 0.0]

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if not self.on:
            return
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        generation = info["generation"]
        self.seconds[generation] += took
        self.counts[generation] += 1
        self.longest[generation] = max(self.longest[generation], took)

    def summary(self) -> str:
        return ", ".join(
            f"gen{g}: {self.counts[g]} in {self.seconds[g]:.2f} s (longest {self.longest[g]:.3f} s)"
            for g in range(3)
        )


class LoopLag:
    """The longest stall of an event loop: a task on it sleeps `TICK_S` and records how late it woke.

    Lateness is what a callback ready at that moment would have waited: a collection, a long
    callback, or the loop's thread waiting for the GIL, all count.
    """

    TICK_S = 0.010

    def __init__(self) -> None:
        #: Off while the bench itself holds the GIL on purpose (its own ``gc.collect()`` before
        #: reading RSS): a stall that began or ended then is not the operator's.
        self.on = True
        self.longest = 0.0
        #: When the longest stall ended, in seconds from `start`.
        self.longest_at = 0.0
        #: CPU seconds the loop's thread used over the longest stall: the rest of it the thread did not
        #: run (waiting for a core on a loaded machine, or for the GIL another thread held).
        self.longest_cpu = 0.0
        self._future: concurrent.futures.Future[None] | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start probing ``loop`` (running on another thread)."""
        self._future = asyncio.run_coroutine_threadsafe(self._probe(), loop)

    def stop(self) -> None:
        if self._future is not None:
            self._future.cancel()
            self._future = None

    async def _probe(self) -> None:
        started = time.perf_counter()
        while True:
            before, cpu_before, counted = time.perf_counter(), time.thread_time(), self.on
            await asyncio.sleep(self.TICK_S)
            now = time.perf_counter()
            if counted and self.on and now - before - self.TICK_S > self.longest:
                self.longest, self.longest_at = now - before - self.TICK_S, now - started
                self.longest_cpu = time.thread_time() - cpu_before
