"""The pod watch backs off on every way a broken or hostile API server can fail it, and a relist is a diff.

Each test plays one failure shape from a scripted API server for ten minutes of fake time
(looptime: no real seconds) and counts the requests the server got against the back-off steps
the watch took. After the first failure every request waits a step, so the requests are at most
the steps plus the two that went out before anything failed (the first list and the first watch);
pages that continue a list are bounded on their own. Before this, these shapes made the watch send
600 to 5,000 requests a second; a server that floods past :data:`FLOOD` requests ends the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from podmortem.kube.config import ClusterAccess
from podmortem.kube.connection import Connection
from podmortem.operator.watching import pod_watch
from podmortem.operator.watching.list_page import decoded_estimate
from podmortem.operator.watching.pod_watch import PodWatch, PodWatchSettings

pytestmark = pytest.mark.looptime

#: More requests than this in one test is a flood: the test stops there (and fails).
FLOOD = 300
#: Fake seconds each shape is played for.
PLAYED_S = 600.0
#: 1 s doubling to 30 s with no jitter: ten minutes of failures are 24 steps (1+2+4+8+16, then 30 s each).
SETTINGS = PodWatchSettings(backoff_s=1.0, backoff_max_s=30.0, backoff_jitter=0.0, healthy_watch_s=30.0,
                            max_list_pages=5, max_list_s=60.0)
MOST_STEPS = 5 + int((PLAYED_S - 31) // 30) + 1


def _pod(uid: str, rv: str, *, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": f"pod-{uid}", "namespace": "ns", "resourceVersion": rv},
            "status": {"phase": phase}}


def _line(kind: str, obj: Mapping[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


Answer = Callable[[web.Request, dict[str, str], int], Awaitable[web.StreamResponse]]


class Scripted:
    """An API server whose lists and watches are answered by ``on_list`` and ``on_watch`` (with the
    request's query and how many of its kind came before); every request is kept with its fake time."""

    def __init__(self, *, on_list: Answer, on_watch: Answer) -> None:
        self.on_list = on_list
        self.on_watch = on_watch
        self.requests: list[tuple[float, dict[str, str]]] = []
        self.flooded = asyncio.Event()

    @property
    def watches(self) -> list[dict[str, str]]:
        return [q for _, q in self.requests if q.get("watch") == "true"]

    @property
    def list_starts(self) -> int:
        return sum(q.get("watch") != "true" and "continue" not in q for _, q in self.requests)

    async def pods(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        watch = query.get("watch") == "true"
        before = sum((q.get("watch") == "true") == watch for _, q in self.requests)
        self.requests.append((asyncio.get_running_loop().time(), query))
        if len(self.requests) > FLOOD:
            self.flooded.set()
        return await (self.on_watch if watch else self.on_list)(request, query, before)


def page(items: list[dict[str, Any]], *, rv: str = "100", cont: str = "") -> web.Response:
    meta = {"continue": cont} if cont else {"resourceVersion": rv}
    return web.json_response({"kind": "PodList", "metadata": meta, "items": items})


async def stream(request: web.Request, lines: list[bytes], *, hold_s: float = 0.0) -> web.StreamResponse:
    response = web.StreamResponse()
    await response.prepare(request)
    for line in lines:
        await response.write(line)
    if hold_s:
        await asyncio.sleep(hold_s)
    return response


async def one_pod(request: web.Request, query: dict[str, str], n: int) -> web.StreamResponse:
    return page([_pod("a", "5")])


async def open_watch(request: web.Request, query: dict[str, str], n: int) -> web.StreamResponse:
    return await stream(request, [], hold_s=3600)


class ServesPods(Protocol):
    """A scripted API server: its answer to every request for /api/v1/pods."""

    async def pods(self, request: web.Request) -> web.StreamResponse: ...


@contextlib.asynccontextmanager
async def serving(script: ServesPods) -> AsyncIterator[Connection]:
    app = web.Application()
    app.router.add_get("/api/v1/pods", script.pods)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield Connection(ClusterAccess(server=f"http://127.0.0.1:{runner.addresses[0][1]}"))
    finally:
        await runner.cleanup()


async def _ignore(body: Mapping[str, Any], deleted: bool) -> None:
    pass


async def play(script: Scripted, *, seconds: float = PLAYED_S, settings: PodWatchSettings = SETTINGS,
               handler: pod_watch.Handler = _ignore) -> PodWatch:
    """Run a watch against ``script`` for ``seconds`` of fake time, or until the server is flooded."""
    async with serving(script) as connection:
        watch = PodWatch(connection=connection, path="/api/v1/pods", handler=handler, accept=lambda pod: True,
                         settings=settings)
        task = asyncio.create_task(watch.run())
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(script.flooded.wait(), seconds)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    return watch


def assert_paced(script: Scripted, watch: PodWatch, *, first: int) -> None:
    """At most one request per back-off step after the ``first`` requests, which went out before any
    failure; at least a request per 60 s (still trying); the steps grew to the most and did not reset."""
    requests = [(t, q) for t, q in script.requests if "continue" not in q]
    assert len(script.requests) <= FLOOD, "flooded"
    assert len(requests) <= MOST_STEPS + first, f"{len(requests)} requests in {PLAYED_S} s"
    assert len(requests) - first <= watch.backoff.steps
    assert len(requests) >= PLAYED_S // 60
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(requests[first - 1:])]
    assert min(gaps) >= SETTINGS.backoff_s
    assert gaps[-1] >= SETTINGS.backoff_max_s  # never reset: no watch was healthy


async def test_410_on_every_watch_lists_again_after_each_step() -> None:
    async def gone(request: web.Request, query: dict[str, str], n: int) -> web.StreamResponse:
        return await stream(request, [_line("ERROR", {"kind": "Status", "code": 410, "reason": "Expired"})])

    script = Scripted(on_list=one_pod, on_watch=gone)
    watch = await play(script)
    assert_paced(script, watch, first=2)
    assert script.list_starts >= len(script.watches) - 1  # every 410 lists again


async def test_410_on_the_list_backs_off() -> None:
    async def gone(request: web.Request, query: dict[str, str], n: int) -> web.StreamResponse:
        return web.Response(status=410)

    script = Scripted(on_list=gone, on_watch=open_watch)
    watch = await play(script)
    assert_paced(script, watch, first=1)
    assert script.watches == [] and not watch.listed.is_set()


async def test_a_watch_that_sends_one_bookmark_and_ends_backs_off() -> None:
    async def bookmark(request: web.Request, query: dict[str, str], n: int) -> web.StreamResponse:
        mark = {"metadata": {"resourceVersion": query["resourceVersion"]}}
        return await stream(request, [_line("BOOKMARK", mark)])

    script = Scripted(on_list=one_pod, on_watch=bookmark)
    watch = await play(script)
    assert_paced(script, watch, first=2)
    assert script.list_starts == 1  # resumed, not listed again


async def test_watches_that_end_at_once_back_off_whether_empty_or_with_an_event() -> None:
    """An event does not make a watch healthy: only staying open does (a proxy may cut each after one)."""

    async def short(request: web.Request, query: dict[str, str], n: int) -> web.StreamResponse:
        rv = str(int(query["resourceVersion"]) + 1)
        return await stream(request, [_line("MODIFIED", _pod("a", rv))] if n % 2 else [])

    script = Scripted(on_list=one_pod, on_watch=short)
    watch = await play(script)
    assert_paced(script, watch, first=2)
    assert script.list_starts == 1


async def test_a_resource_version_that_goes_back_lists_again_after_a_step() -> None:
    handled: list[str] = []

    async def backwards(request: web.Request, query: dict[str, str], n: int) -> web.StreamResponse:
        return await stream(request, [_line("MODIFIED", _pod("a", str(int(query["resourceVersion"]) - 1)))])

    async def handler(body: Mapping[str, Any], deleted: bool) -> None:
        handled.append(body["metadata"]["resourceVersion"])

    script = Scripted(on_list=one_pod, on_watch=backwards)
    watch = await play(script, handler=handler)
    assert_paced(script, watch, first=2)
    assert {q.get("resourceVersion") for q in script.watches} == {"100"}  # never from 99
    assert len(script.watches) <= script.list_starts <= len(script.watches) + 1  # each went back: relisted
    assert "99" not in handled  # the stale event is not handed out


async def test_an_endless_continue_is_cut_at_its_page_bound_and_listed_again_after_a_step() -> None:
    async def endless(request: web.Request, query: dict[str, str], n: int) -> web.StreamResponse:
        return page([_pod(f"p{n}", "5")], cont=f"token-{n}")

    script = Scripted(on_list=endless, on_watch=open_watch)
    watch = await play(script)
    assert_paced(script, watch, first=1)
    assert len(script.requests) <= SETTINGS.max_list_pages * script.list_starts
    assert script.watches == [] and not watch.listed.is_set()


async def test_a_list_slower_than_its_time_bound_is_cut_and_listed_again_after_a_step() -> None:
    """A server that sends a page every 20 s with another continue: cut after 60 s, not after 5 pages."""

    async def slow(request: web.Request, query: dict[str, str], n: int) -> web.StreamResponse:
        await asyncio.sleep(20)
        return page([_pod(f"p{n}", "5")], cont=f"token-{n}")

    script = Scripted(on_list=slow, on_watch=open_watch)
    watch = await play(script)
    starts = [i for i, (_, q) in enumerate(script.requests) if "continue" not in q]
    pages_per_list = [b - a for a, b in itertools.pairwise([*starts, len(script.requests)])]
    assert len(starts) >= 3 and max(pages_per_list) <= 4  # 60 s of 20-s pages, then listed again
    assert len(starts) - 1 <= watch.backoff.steps
    assert not watch.listed.is_set()


async def test_a_healthy_watch_resets_the_back_off() -> None:
    """Three watches cut at once (steps of 1, 2, 4 s), one open for 40 s with nothing (a quiet
    namespace: healthy, so the next watch goes at once), then cut ones again from 1 s."""

    async def watches(request: web.Request, query: dict[str, str], n: int) -> web.StreamResponse:
        return await stream(request, [], hold_s=40 if n == 3 else 3600 if n == 6 else 0)

    script = Scripted(on_list=one_pod, on_watch=watches)
    await play(script, seconds=120)
    times = [t for t, q in script.requests if q.get("watch") == "true"]
    gaps = [round(b - a, 1) for a, b in itertools.pairwise(times)]
    assert gaps == [1.0, 2.0, 4.0, 40.0, 1.0, 2.0]


async def test_a_page_that_ignores_limit_is_handed_out_within_the_held_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """3,000 pods in one page, handlers that wait: the watch holds what fits in the budget, not the page."""
    monkeypatch.setattr(pod_watch, "MAX_HELD_BYTES", 200_000)
    most = 200_000 // decoded_estimate(json.dumps(_pod("p1000", "5"))) + 1  # 101 of these pods
    release = asyncio.Event()
    handled: list[str] = []

    async def big(request: web.Request, query: dict[str, str], n: int) -> web.StreamResponse:
        return page([_pod(f"p{i}", "5") for i in range(3000)])

    async def handler(body: Mapping[str, Any], deleted: bool) -> None:
        await release.wait()
        handled.append(body["metadata"]["uid"])

    script = Scripted(on_list=big, on_watch=open_watch)
    async with serving(script) as connection:
        watch = PodWatch(connection=connection, path="/api/v1/pods", handler=handler, accept=lambda pod: True,
                         settings=SETTINGS)
        task = asyncio.create_task(watch.run())
        try:
            await asyncio.sleep(5)
            assert watch.objects.busy <= most  # not 3,000
            assert watch.objects.held <= 200_000
            release.set()
            await asyncio.wait_for(watch.listed.wait(), 60)
            for _ in range(100):
                await asyncio.sleep(0.1)
                if len(handled) == 3000:
                    break
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert len(set(handled)) == 3000 and watch.objects.held == 0


async def test_a_page_that_ignores_limit_does_not_balloon_the_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An 11 MB page (10,000 pods of 1.1 KB): what the process allocates at its peak while it lists them
    stays below the page's text, let alone its decoded size (read whole, the page took 90 MB: its text
    twice and every pod decoded). What stays is what the watch keeps of each pod for the relist's diff."""
    monkeypatch.setattr(pod_watch, "MAX_HELD_BYTES", 1_000_000)
    pods = [{**_pod(f"p{i}", "5"), "spec": {"containers": [
        {"name": f"c{c}", "image": "trainer:1", "env": [{"name": f"E{e}", "value": str(e)} for e in range(8)]}
        for c in range(3)]}} for i in range(10_000)]
    body = json.dumps({"kind": "PodList", "metadata": {"resourceVersion": "100"}, "items": pods}).encode()
    del pods
    assert len(body) > 10_000_000

    async def big(request: web.Request, query: dict[str, str], n: int) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        view = memoryview(body)
        for at in range(0, len(body), 65536):
            await response.write(view[at:at + 65536])
        return response

    script = Scripted(on_list=big, on_watch=open_watch)
    async with serving(script) as connection:
        watch = PodWatch(connection=connection, path="/api/v1/pods", handler=_ignore, accept=lambda pod: True,
                         settings=SETTINGS)
        tracemalloc.start()
        task = asyncio.create_task(watch.run())
        try:
            await asyncio.wait_for(watch.listed.wait(), 120)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert peak < len(body), f"peak {peak} bytes while listing a page of {len(body)}"


async def test_a_relist_hands_out_the_pods_deleted_while_the_watch_was_down() -> None:
    """client-go's DeletedFinalStateUnknown: the state of a pod deleted while the watch was down goes."""
    handled: list[tuple[str, bool, Mapping[str, Any]]] = []

    async def lists(request: web.Request, query: dict[str, str], n: int) -> web.StreamResponse:
        if n == 0:
            return page([_pod("a", "5"), _pod("b", "6", phase="Failed"), _pod("quiet", "7")], rv="10")
        return page([_pod("a", "5")], rv="20")

    async def watches(request: web.Request, query: dict[str, str], n: int) -> web.StreamResponse:
        if n == 0:
            return await stream(request, [_line("ERROR", {"kind": "Status", "code": 410})])
        return await stream(request, [], hold_s=3600)

    async def handler(body: Mapping[str, Any], deleted: bool) -> None:
        handled.append((body["metadata"]["uid"], deleted, body))

    script = Scripted(on_list=lists, on_watch=watches)
    async with serving(script) as connection:
        watch = PodWatch(connection=connection, path="/api/v1/pods", handler=handler,
                         accept=lambda pod: pod["metadata"]["uid"] != "quiet", settings=SETTINGS)
        task = asyncio.create_task(watch.run())
        try:
            await asyncio.sleep(30)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert script.list_starts == 2
    assert [(uid, deleted) for uid, deleted, _ in handled] == [
        ("a", False), ("b", False), ("a", False), ("b", True)]
    assert handled[-1][2] == {"metadata": {"uid": "b", "name": "pod-b", "namespace": "ns"},
                              "status": {"phase": "Failed"}}  # what is known: no containers, last phase


LIST_SHAPES: dict[str, Callable[[int], web.Response]] = {
    "ok": lambda n: page([_pod("a", "5"), _pod(f"n{n}", "6")]),
    "410": lambda n: web.Response(status=410),
    "500": lambda n: web.Response(status=500, text="etcd is sad"),
    "endless": lambda n: page([_pod(f"e{n}", "5")], cont=f"t{n}"),
    "not json": lambda n: web.Response(text="{items: ["),
}
WATCH_SHAPES: dict[str, Callable[[web.Request, dict[str, str]], Awaitable[web.StreamResponse]]] = {
    "410": lambda request, query: stream(request, [_line("ERROR", {"kind": "Status", "code": 410})]),
    "empty": lambda request, query: stream(request, []),
    "bookmark": lambda request, query: stream(
        request, [_line("BOOKMARK", {"metadata": {"resourceVersion": query.get("resourceVersion", "1")}})]),
    "event": lambda request, query: stream(request, [_line("MODIFIED", _pod("a", "101"))]),
    "backwards": lambda request, query: stream(request, [_line("MODIFIED", _pod("a", "3"))]),
    "garbage": lambda request, query: stream(request, [b"{not json\n"]),
    "500": lambda request, query: stream(request, [_line("ERROR", {"kind": "Status", "code": 500})]),
}


@settings(max_examples=25)
@given(lists=st.lists(st.sampled_from(sorted(LIST_SHAPES)), min_size=1, max_size=6),
       watches=st.lists(st.sampled_from(sorted(WATCH_SHAPES)), min_size=1, max_size=6))
async def test_any_mix_of_failure_shapes_sends_at_most_a_request_per_step(
    lists: list[str], watches: list[str]
) -> None:
    async def on_list(request: web.Request, query: dict[str, str], n: int) -> web.StreamResponse:
        if "continue" in query:  # an endless list goes on being endless
            return page([_pod(f"c{n}", "5")], cont=f"t{n}")
        return LIST_SHAPES[lists[n % len(lists)]](n)

    async def on_watch(request: web.Request, query: dict[str, str], n: int) -> web.StreamResponse:
        return await WATCH_SHAPES[watches[n % len(watches)]](request, query)

    script = Scripted(on_list=on_list, on_watch=on_watch)
    watch = await play(script, settings=PodWatchSettings(backoff_s=1.0, backoff_max_s=30.0, max_list_pages=5,
                                                         healthy_watch_s=30.0))
    requests = [q for _, q in script.requests if "continue" not in q]
    assert len(script.requests) <= FLOOD
    assert len(requests) <= watch.backoff.steps + 2  # the first list and watch, then one a step
    assert len(script.requests) <= 5 * script.list_starts + len(script.watches)
