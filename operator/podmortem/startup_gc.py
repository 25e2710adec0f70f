"""Objects made at start-up, moved out of the garbage collector's full passes.

A full collection walks every tracked object, and the operator imports kopf, kubernetes_asyncio,
aiohttp and pydantic: about 90,000 objects that live as long as the process. Under the hostile
workload of ``bench/hostile_workload.py`` each full pass over them takes 55-80 ms on the event
loop, the longest single stalls; with them frozen after start-up, 8 ms. Cyclic garbage made later
is still collected; what is frozen is never freed, which is right for modules and classes.

The heap then grows with the pods followed (about 210 tracked objects each), and every time it has
grown by a quarter CPython walks all of it once more: starting over 10,000 pods that is 15 full
passes, 6.8 s of a 40 s start-up (`bench/operator_scale.py` prints the pauses). `set_thresholds`
considers a full pass five times less often; young cycles are collected as often as ever.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable


def freeze() -> int:
    """Collect once, then freeze what is left (call after the imports): how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


#: gen0 at 2,000 net allocations (CPython 3.13's default), gen1 every 10 gen0 passes, and a full pass
#: considered only every 50 gen1 passes (1,000,000 net allocations; CPython's default is 10).
THRESHOLDS = (2_000, 10, 50)


def set_thresholds() -> tuple[int, int, int]:
    """Use `THRESHOLDS` from now on: returns the thresholds that were in force."""
    before = gc.get_threshold()
    gc.set_threshold(*THRESHOLDS)
    return before


# -- after start-up: what lives as long as the pods -------------------------------------------------
#
# Each followed pod adds about 210 tracked objects that live as long as it does (its follower, its
# stream, its store entry). Left tracked, the oldest generation holds all of them, and one pass over
# 10,000 pods' worth stopped the loop for 1.57 s (issue 40). `Freezer` moves them to the permanent
# generation after each completed list and after each wave of new pods, so a full pass walks only
# what came since. CPython's `gc.freeze` splices the generations' lists onto the permanent one: it
# costs the same however many objects there are. A young collection first frees the short-lived
# cycles; what is frozen is still freed by reference counting when the pod goes, only a cycle of a
# frozen pod's is never collected (a few objects of a deleted pod, against a pause per wave).

#: New pods handed out between two freezes: a soak wave of 1,000 new pods gets five.
WAVE_PODS = 200
#: Seconds from a completed list or a wave's last pod to its freeze: by then the handlers have started
#: the pods' followers and opened their streams, which are then frozen with the pods.
SETTLE_S = 5.0


def freeze_young() -> None:
    """Collect the young generations, then freeze every tracked object.

    It does not count what is frozen: ``gc.get_freeze_count`` walks the whole permanent generation,
    38 ms at 10,000 pods' 2 million objects, a stall of its own on the loop.
    """
    gc.collect(1)
    gc.freeze()


class Freezer:
    """Freezes `SETTLE_S` after each completed list and after each `WAVE_PODS` new pods (on the running loop).

    A freeze already due takes in the list or wave that comes before it: at most one is pending.
    """

    def __init__(self, *, wave: int = WAVE_PODS, settle_s: float = SETTLE_S,
                 freeze: Callable[[], object] = freeze_young) -> None:
        self._wave = wave
        self._settle_s = settle_s
        self._freeze = freeze
        self._new = 0
        self._timer: asyncio.TimerHandle | None = None
        #: Freezes done so far (for the benches' and tests' account).
        self.freezes = 0

    def listed(self) -> None:
        """A list is complete: every pod it holds is handed out."""
        self._due()

    def added(self, count: int = 1) -> None:
        """``count`` pods not seen before were handed out."""
        self._new += count
        if self._new >= self._wave:
            self._due()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _due(self) -> None:
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._settle_s, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._new = 0
        self.freezes += 1
        self._freeze()


def pod_freezer() -> Freezer | None:
    """A `Freezer` where this process froze its start-up (`freeze`: the operator's CLI, the benches), or None.

    A process that left its collector alone (a test run, a library user) is not frozen behind its back.
    """
    return Freezer() if gc.get_freeze_count() else None
