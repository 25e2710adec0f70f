"""The pod watch freezes what lives as long as the pods: after each complete list and each wave of new pods.

Against a scripted API server in fake time (looptime); the freeze itself is counted, not done, so the
test process's collector is left alone. Why it freezes: `podmortem.startup_gc` (issue 40).
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from aiohttp import web

from podmortem import startup_gc
from podmortem.kube.connection import Connection
from podmortem.operator.watching.pod_watch import PodWatches, PodWatchSettings

from .test_pod_watch_backoff import serving

pytestmark = pytest.mark.looptime


def _pod(uid: str, rv: int = 1) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": f"pod-{uid}", "namespace": "ns", "resourceVersion": str(rv)},
            "status": {"phase": "Running"}}


class Script:
    """One list of ``listed`` pods in pages of two, then one watch that adds ``added`` pods and stays open."""

    def __init__(self, listed: int, added: list[str]) -> None:
        self.listed = listed
        self.added = added
        self.pages = 0
        self.watching = False

    async def pods(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") != "true":
            start = int(request.query.get("continue") or 0)
            self.pages += 1
            end = min(start + int(request.query.get("limit") or 2), self.listed)
            meta = {"continue": str(end)} if end < self.listed else {"resourceVersion": "10"}
            return web.json_response({"metadata": meta, "items": [_pod(f"l{i}") for i in range(start, end)]})
        self.watching = True
        response = web.StreamResponse()
        await response.prepare(request)
        for i, uid in enumerate(self.added):
            await response.write(json.dumps({"type": "ADDED", "object": _pod(uid, 11 + i)}).encode() + b"\n")
            await asyncio.sleep(10.0 if i == 2 else 0.1)  # a wave of three, then the rest 10 s later
        await asyncio.sleep(3600)
        return response


@pytest.fixture
async def served() -> AsyncIterator[tuple[Script, Connection]]:
    script = Script(0, [])
    async with serving(script) as connection:
        yield script, connection


async def _nothing(body: Mapping[str, Any], deleted: bool) -> None:
    pass


async def _watched(connection: Connection, freezer: startup_gc.Freezer, seconds: float) -> None:
    watches = PodWatches(connection=connection, namespaces=(), handler=_nothing, accept=lambda pod: True,
                         settings=PodWatchSettings(page_size=2), freezer=freezer)
    watches.start()
    try:
        await asyncio.sleep(seconds)
    finally:
        await watches.stop()


async def test_a_complete_list_is_frozen_once_its_pods_have_settled(
    served: tuple[Script, Connection],
) -> None:
    script, connection = served
    script.listed = 5  # three pages: the freeze waits for the last
    frozen: list[float] = []
    loop = asyncio.get_running_loop()
    freezer = startup_gc.Freezer(wave=1_000, settle_s=5.0, freeze=lambda: frozen.append(loop.time()) or 0)
    started = loop.time()
    await _watched(connection, freezer, 30.0)
    assert script.pages == 3 and script.watching
    assert len(frozen) == 1 and freezer.freezes == 1  # one list: one freeze, not one per page
    assert 5.0 <= frozen[0] - started < 6.0  # SETTLE_S after the list, not at once


async def test_each_wave_of_new_pods_from_the_watch_is_frozen(served: tuple[Script, Connection]) -> None:
    script, connection = served
    script.listed = 1
    script.added = [f"new{i}" for i in range(7)]
    loop = asyncio.get_running_loop()
    frozen: list[float] = []
    freezer = startup_gc.Freezer(wave=3, settle_s=5.0, freeze=lambda: frozen.append(loop.time()) or 0)
    started = loop.time()
    await _watched(connection, freezer, 60.0)
    assert script.pages == 1  # no relist: every freeze below is the list's or a wave's
    # The list is frozen 5 s after it ends, and the first three new pods (within 0.3 s) with it; the
    # other four come 10 s later: a wave of their own, frozen 5 s after its third pod.
    assert [round(t - started) for t in frozen] == [5, 15]


def test_only_a_process_that_froze_its_start_up_gets_a_pod_freezer() -> None:
    assert startup_gc.pod_freezer() is None  # a test run leaves its collector alone
    try:
        startup_gc.freeze_young()
        assert gc.get_freeze_count() > 1_000
        assert isinstance(startup_gc.pod_freezer(), startup_gc.Freezer)
    finally:
        gc.unfreeze()


def test_a_freeze_does_not_count_the_frozen_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counting walks the whole permanent generation (every pod's objects): a stall per freeze."""
    def counted() -> int:
        raise AssertionError("gc.get_freeze_count walks every frozen object")

    try:
        monkeypatch.setattr(gc, "get_freeze_count", counted)
        startup_gc.freeze_young()
    finally:
        monkeypatch.undo()
        assert gc.get_freeze_count() > 1_000
        gc.unfreeze()
