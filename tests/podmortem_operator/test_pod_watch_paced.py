"""The pod watch hands a list page's pods to the handler a few per loop iteration.

A page of 500 pods arrives at once; all its handler calls (and the followers they start) in one
iteration stopped the operator's loop for hundreds of milliseconds (issue 40).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from tests.loop_iterations import Iterations

from podmortem.operator.watching.pod_watch import HAND_OUTS_PER_TURN, PodWatches, PodWatchSettings

from .test_pod_watch_backoff import serving
from .test_pod_watch_freeze import Script


async def test_a_page_of_pods_is_handed_out_a_few_per_iteration() -> None:
    pods = 10 * HAND_OUTS_PER_TURN
    script = Script(pods, [])
    iterations = Iterations()
    handled: list[str] = []
    all_handled = asyncio.Event()

    async def handler(body: Mapping[str, Any], deleted: bool) -> None:
        iterations.mark()
        handled.append(body["metadata"]["uid"])
        if len(handled) == pods:
            all_handled.set()

    async with serving(script) as connection:
        watches = PodWatches(connection=connection, namespaces=(), handler=handler, accept=lambda pod: True,
                             settings=PodWatchSettings(page_size=pods))
        iterations.start()
        watches.start()
        try:
            async with asyncio.timeout(30):  # real time: the iteration counter keeps a fake clock still
                await all_handled.wait()
        finally:
            await watches.stop()
            iterations.stop()
    assert script.pages == 1  # one page of them all
    assert sorted(handled) == sorted(f"l{i}" for i in range(pods))
    assert iterations.most_in_one <= HAND_OUTS_PER_TURN
