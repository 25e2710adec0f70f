"""The operator's own pod watch: paged list, resumed watch, 410 relist, one handler call at a time per pod.

Against a scripted API server (aiohttp) that records every request, so the resourceVersion each
watch resumes from is checked, not assumed. Time is fake (looptime): the back-off's steps take no
real seconds. How each failure shape backs off: test_pod_watch_backoff.py.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st
from tests.kube.rotation import access_with_rotated_token

from podmortem.kube.config import ClusterAccess
from podmortem.kube.connection import Connection
from podmortem.operator.watching import pod_watch
from podmortem.operator.watching.pod_watch import (
    PerObject,
    PodWatches,
    PodWatchSettings,
    event_lines,
)

pytestmark = pytest.mark.looptime


def _pod(uid: str, rv: str, *, phase: str = "Running", followed: bool = True) -> dict[str, Any]:
    annotations = {"podmortem.io/watch": "true"} if followed else {}
    return {"metadata": {"uid": uid, "name": f"pod-{uid}", "namespace": "ns", "resourceVersion": rv,
                         "annotations": annotations},
            "status": {"phase": phase}}


def _line(kind: str, obj: Mapping[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


class Script:
    """A list in two pages, then watch streams played in turn; every request's query is kept."""

    def __init__(self, watches: list[list[bytes]]) -> None:
        self.watches = watches
        self.requests: list[dict[str, str]] = []
        self.lists = 0

    async def pods(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.requests.append(query)
        if query.get("watch") != "true":
            if query.get("continue") != "page2":
                self.lists += 1  # a list starts
                return web.json_response({"metadata": {"continue": "page2"},
                                          "items": [_pod("a", "5"), _pod("quiet", "6", followed=False)]})
            return web.json_response({"metadata": {"resourceVersion": "10"}, "items": [_pod("b", "7")]})
        response = web.StreamResponse()
        await response.prepare(request)
        lines = self.watches.pop(0) if self.watches else []
        for line in lines:
            await response.write(line)
        if not self.watches and not lines:
            await asyncio.sleep(3600)  # the last watch stays open
        return response


@pytest.fixture
async def served() -> AsyncIterator[tuple[Script, Connection]]:
    script = Script([])
    app = web.Application()
    app.router.add_get("/api/v1/pods", script.pods)
    runner = web.AppRunner(app, shutdown_timeout=0.1)  # the open watch is cut at once
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield script, Connection(ClusterAccess(server=f"http://127.0.0.1:{port}"))
    finally:
        await runner.cleanup()


async def _until(check: Any, what: str) -> None:
    for _ in range(6000):  # a minute of fake time
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def test_lists_in_pages_resumes_each_watch_where_the_last_ended_and_lists_again_on_410(
    served: tuple[Script, Connection],
) -> None:
    script, connection = served
    script.watches = [
        [_line("MODIFIED", _pod("a", "11", phase="Failed")),
         _line("BOOKMARK", {"metadata": {"resourceVersion": "12"}})],
        [_line("ADDED", _pod("c", "13")), _line("DELETED", _pod("b", "14"))],
        [_line("ERROR", {"kind": "Status", "code": 410, "reason": "Expired"})],
        [],
    ]
    seen: list[tuple[str, str | None, bool]] = []

    async def handler(body: Mapping[str, Any], deleted: bool) -> None:
        seen.append((body["metadata"]["uid"], body["metadata"].get("resourceVersion"), deleted))

    watches = PodWatches(connection=connection, namespaces=(), handler=handler,
                         accept=lambda pod: "podmortem.io/watch" in pod["metadata"]["annotations"],
                         settings=PodWatchSettings(page_size=2))
    watches.start()
    try:
        await _until(lambda: script.lists == 2 and len(script.requests) >= 8, "a second list after the 410")
        await _until(lambda: len(seen) == 8, "every event handled")
        assert watches.listed
    finally:
        await watches.stop()
    assert [(r.get("limit"), r.get("continue")) for r in script.requests[:2]] == [("2", None), ("2", "page2")]
    resumed = [r.get("resourceVersion") for r in script.requests if r.get("watch") == "true"]
    assert resumed[:3] == ["10", "12", "14"]  # the list's version, then the bookmark's, then the last event's
    assert [r.get("watch") for r in script.requests[5:7]] == [None, None]  # the 410 lists again, paged
    assert seen[:5] == [("a", "5", False), ("b", "7", False), ("a", "11", False), ("c", "13", False),
                        ("b", "14", True)]
    # The relist hands out what it has ("quiet" never), then c as deleted: it was added while
    # watching and the relist does not have it (a tombstone: no resourceVersion, no containers).
    assert sorted(seen[5:7]) == [("a", "5", False), ("b", "7", False)]
    assert seen[7] == ("c", None, True)


async def test_one_call_at_a_time_per_pod_and_the_latest_event_next() -> None:
    release = asyncio.Event()
    calls: list[tuple[str, int]] = []
    running = 0
    most = 0

    async def handler(body: Mapping[str, Any], deleted: bool) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        calls.append((body["uid"], body["n"]))
        if body["uid"] == "a" and body["n"] == 0:
            await release.wait()
        running -= 1

    objects = PerObject(handler)
    objects.submit("a", {"uid": "a", "n": 0}, False)
    await asyncio.sleep(0)
    for n in (1, 2, 3):
        objects.submit("a", {"uid": "a", "n": n}, False)  # merged: only n=3 is handled next
    objects.submit("b", {"uid": "b", "n": 0}, False)  # another pod does not wait for "a"
    await _until(lambda: ("b", 0) in calls, "pod b handled while a's first call runs")
    assert calls == [("a", 0), ("b", 0)] and most == 2
    release.set()
    await _until(lambda: objects.busy == 0, "both pods done")
    assert calls == [("a", 0), ("b", 0), ("a", 3)]


async def test_a_failing_handler_is_logged_and_the_next_event_still_handled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[int] = []

    async def handler(body: Mapping[str, Any], deleted: bool) -> None:
        calls.append(body["n"])
        if body["n"] == 0:
            raise RuntimeError("boom")

    objects = PerObject(handler)
    objects.submit("a", {"n": 0, "metadata": {"namespace": "ns", "name": "p"}}, False)
    await _until(lambda: objects.busy == 0, "the failed call ended")
    objects.submit("a", {"n": 1}, False)
    await _until(lambda: calls == [0, 1], "the next event handled")
    assert "handling the event of pod ns/p failed" in caplog.text and "boom" in caplog.text


async def test_a_watch_failure_backs_off_and_resumes(served: tuple[Script, Connection]) -> None:
    script, connection = served
    script.watches = [[b"{not json\n"], []]
    seen: list[str] = []

    async def handler(body: Mapping[str, Any], deleted: bool) -> None:
        seen.append(body["metadata"]["uid"])

    watches = PodWatches(connection=connection, namespaces=(), handler=handler, accept=lambda pod: True,
                         settings=PodWatchSettings(backoff_s=0.05))
    watches.start()
    try:
        await _until(lambda: sum(r.get("watch") == "true" for r in script.requests) == 2, "a second watch")
    finally:
        await watches.stop()
    assert script.lists == 1  # resumed from its version, not listed again
    assert [r.get("resourceVersion") for r in script.requests if r.get("watch")] == ["10", "10"]


async def _chunks(parts: list[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


@given(lines=st.lists(st.binary(min_size=1, max_size=40).map(lambda b: b.replace(b"\n", b"x")), max_size=12),
       cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=10))
async def test_event_lines_are_the_same_however_the_stream_is_cut(
    lines: list[bytes], cuts: list[int]
) -> None:
    data = b"".join(line + b"\n" for line in lines)
    bounds = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    parts = [data[a:b] for a, b in itertools.pairwise(bounds)]
    got = [line async for line in event_lines(_chunks(parts))]
    assert got == [line for line in lines if line]


async def test_an_event_line_over_the_bound_ends_the_stream() -> None:
    with pytest.raises(ValueError, match="over 100 bytes"):
        async for _ in event_lines(_chunks([b"x" * 60, b"y" * 60]), limit=100):
            pass


async def test_an_object_the_filter_cannot_read_is_skipped_and_the_watch_goes_on(
    served: tuple[Script, Connection], caplog: pytest.LogCaptureFixture
) -> None:
    script, connection = served
    script.watches = [[_line("ADDED", _pod("odd", "11")), _line("ADDED", _pod("c", "12"))], []]
    seen: list[str] = []

    async def handler(body: Mapping[str, Any], deleted: bool) -> None:
        seen.append(body["metadata"]["uid"])

    def accept(pod: Mapping[str, Any]) -> bool:
        if pod["metadata"]["uid"] == "odd":
            raise TypeError("cannot read this one")
        return True

    watches = PodWatches(connection=connection, namespaces=(), handler=handler, accept=accept)
    watches.start()
    try:
        await _until(lambda: "c" in seen and sum(r.get("watch") == "true" for r in script.requests) == 2,
                     "the pod after the odd one handled, and the watch resumed after it")
    finally:
        await watches.stop()
    assert "odd" not in seen and "skipped the event of pod uid odd" in caplog.text
    assert [r.get("resourceVersion") for r in script.requests if r.get("watch")] == ["10", "12"]


async def test_watches_that_end_at_once_back_off_doubling_with_or_without_events(
    served: tuple[Script, Connection], caplog: pytest.LogCaptureFixture
) -> None:
    """A proxy that cuts every watch at once must not make the operator spin on the API server, and a
    watch cut at once after an event is no healthier: only staying open resets the back-off."""
    script, connection = served
    script.watches = [[], [], [], [_line("ADDED", _pod("c", "12"))], []]
    caplog.set_level(logging.INFO, logger="podmortem.operator.watching.pod_watch")

    async def handler(body: Mapping[str, Any], deleted: bool) -> None:
        pass

    watches = PodWatches(connection=connection, namespaces=(), handler=handler, accept=lambda pod: True,
                         settings=PodWatchSettings(backoff_s=0.01, backoff_max_s=0.02, backoff_jitter=0.0))
    watches.start()
    try:
        await _until(lambda: sum(r.get("watch") == "true" for r in script.requests) == 5, "five watches")
    finally:
        await watches.stop()
    waits = [r.getMessage().split("next request in ")[1].split(" ")[0] for r in caplog.records
             if "next request in" in r.getMessage()]
    assert waits == ["0.01", "0.02", "0.02", "0.02"]  # doubling to the most; the event did not reset it
    assert "the watch ended after 0.0 s with 1 events" in caplog.text


async def test_a_list_page_over_its_byte_budget_is_refused_and_retried(
    served: tuple[Script, Connection], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that ignores ``limit`` must not make the operator hold any size of list."""
    script, connection = served
    monkeypatch.setattr(pod_watch, "MAX_PAGE_BYTES", 100)  # the first page is about 400 bytes
    seen: list[str] = []

    async def handler(body: Mapping[str, Any], deleted: bool) -> None:
        seen.append(body["metadata"]["uid"])

    watches = PodWatches(connection=connection, namespaces=(), handler=handler, accept=lambda pod: True,
                         settings=PodWatchSettings(backoff_s=0.01, backoff_max_s=0.01))
    watches.start()
    try:
        await _until(lambda: script.lists >= 2, "the list tried again after the refusal")
    finally:
        await watches.stop()
    assert seen == [] and not watches.listed
    assert "a pod list page is over 100 bytes" in caplog.text


async def test_a_watch_that_fails_or_returns_is_logged_at_once_and_the_others_go_on(
    served: tuple[Script, Connection], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """Each namespace's watch is a task of its own: one that ends (it never should) is an error in
    the log as it happens, not a result held for `stop` to drop, and the other namespaces go on."""
    _, connection = served

    async def handler(body: Mapping[str, Any], deleted: bool) -> None:
        pass

    watches = PodWatches(connection=connection, namespaces=("a", "b", "c"), handler=handler,
                         accept=lambda pod: True)
    failing, returning, going_on = watches.watches
    still_running = asyncio.Event()
    stopped = asyncio.Event()

    async def fail() -> None:
        raise RuntimeError("the watch broke")

    async def give_up() -> None:
        return

    async def run() -> None:
        still_running.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    monkeypatch.setattr(failing, "run", fail)
    monkeypatch.setattr(returning, "run", give_up)
    monkeypatch.setattr(going_on, "run", run)
    with caplog.at_level(logging.ERROR, logger="podmortem.background"):
        watches.start()
        await still_running.wait()
        await _until(lambda: len(caplog.records) == 2, "both ends logged")
        assert not stopped.is_set()
        await watches.stop()
    assert stopped.is_set()
    text = caplog.text
    assert "podmortem-pod-watch-/api/v1/namespaces/a/pods failed: RuntimeError: the watch broke" in text
    assert "podmortem-pod-watch-/api/v1/namespaces/b/pods returned" in text


async def test_whatever_escapes_a_pods_task_is_logged_with_its_name(caplog: pytest.LogCaptureFixture) -> None:
    async def handler(body: Mapping[str, Any], deleted: bool) -> None:
        raise RuntimeError("boom")

    objects = PerObject(handler)
    with caplog.at_level(logging.ERROR, logger="podmortem.background"):
        # Its failure's log line reads metadata that is not a mapping: that raises past the handler's guard.
        objects.submit("uid-a", {"metadata": ["not", "a", "mapping"]}, False)
        await _until(lambda: objects.busy == 0, "the task ended")
        await asyncio.sleep(0)
    assert "podmortem-pod-event-uid-a failed: AttributeError" in caplog.text
    assert objects.held == 0


async def test_a_token_rotated_under_the_watch_is_read_afresh_at_the_401_with_no_back_off(
    tmp_path: Path,
) -> None:
    """The kubelet swapped the projected token and the API server already refuses the old one."""
    access = access_with_rotated_token(tmp_path)
    seen: list[str] = []

    async def pods(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") != "Bearer new":
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        if request.query.get("watch") == "true":
            await asyncio.Event().wait()  # a quiet watch, held open
        return web.json_response({"metadata": {"resourceVersion": "1"}, "items": [_pod("a", "1")]})

    app = web.Application()
    app.router.add_get("/api/v1/pods", pods)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    access.server = f"http://127.0.0.1:{runner.addresses[0][1]}"
    handled: list[str] = []

    async def handler(body: Mapping[str, Any], deleted: bool) -> None:
        handled.append(body["metadata"]["uid"])

    watches = PodWatches(connection=Connection(access), namespaces=(), handler=handler,
                         accept=lambda pod: True)
    [watch] = watches.watches
    watches.start()
    try:
        await _until(lambda: handled == ["a"] and len(seen) == 3, "listed, then watching")
    finally:
        await watches.stop()
        await runner.cleanup()
    assert seen == ["Bearer old", "Bearer new", "Bearer new"]
    assert watch.backoff.steps == 0  # a refused token made afresh is no failure to back off from
