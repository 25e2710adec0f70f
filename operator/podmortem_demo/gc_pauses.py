"""The garbage collector's pauses in this process, for the benches: how many, how long, the longest.

A full pass walks every tracked object and stops the event loop meanwhile, so its length grows
with the heap: the benches print it next to start-up times and report latencies.
"""

from __future__ import annotations

import gc
import time


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
