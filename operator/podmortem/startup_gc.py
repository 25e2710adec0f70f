"""Objects made at start-up, moved out of the garbage collector's full passes.

A full collection walks every tracked object, and the operator imports kopf, kubernetes_asyncio,
aiohttp and pydantic: about 90,000 objects that live as long as the process. Under the hostile
workload of ``bench/hostile_workload.py`` each full pass took 55-80 ms on the event loop, the
longest single stalls left; with them frozen after start-up, 8 ms. Cyclic garbage made later is
collected as before; what is frozen is never freed, which is right for modules and classes.
"""

from __future__ import annotations

import gc


def freeze() -> int:
    """Collect once, then freeze what is left (call after the imports): how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
