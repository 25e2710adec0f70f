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

import gc


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
