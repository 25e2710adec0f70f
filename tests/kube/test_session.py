"""`ApiSession`: refused credentials made afresh once, every request paced, answers within budget."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from tests.kube.rotation import rotate_unnoticed

from podmortem.kube.api import KubeError
from podmortem.kube.config import ClusterAccess
from podmortem.kube.rate_limit import TokenBucket
from podmortem.kube.session import MAX_ERROR_BYTES, ApiSession


class Api:
    """A scripted API server that accepts one token and keeps every request's Authorization."""

    def __init__(self) -> None:
        self.token = "one"
        self.seen: list[str] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response({"kind": "Status", "reason": "Unauthorized"}, status=401)
        if request.path == "/big":
            return web.Response(body=b'{"x": "' + b"a" * 5000 + b'"}', content_type="application/json")
        if request.path == "/missing":
            return web.json_response({"kind": "Status", "reason": "NotFound"}, status=404)
        if request.path == "/broken":
            return web.Response(text="b" * 10_000, status=500)
        if request.method in ("POST", "PATCH"):
            return web.json_response({"got": await request.json(),
                                      "type": request.headers.get("Content-Type")})
        return web.json_response({"path": request.path, "query": dict(request.query)})


@pytest.fixture
async def api() -> AsyncIterator[tuple[Api, str]]:
    scripted = Api()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", scripted.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield scripted, f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_json_in_json_out(api: tuple[Api, str], tmp_path: Path) -> None:
    _, url = api
    (tmp_path / "token").write_text("one")
    async with ApiSession(ClusterAccess(server=url, token_file=tmp_path / "token")) as session:
        assert await session.request("GET", "/api/v1/pods", query={"limit": "1"}) == {
            "path": "/api/v1/pods", "query": {"limit": "1"}}
        answer = await session.request("PATCH", "/x", body={"a": 1},
                                       content_type="application/merge-patch+json")
        assert answer == {"got": {"a": 1}, "type": "application/merge-patch+json"}


async def test_a_refused_request_is_sent_once_more_with_the_token_read_afresh(
        api: tuple[Api, str], tmp_path: Path) -> None:
    scripted, url = api
    token = tmp_path / "token"
    token.write_text("one")
    async with ApiSession(ClusterAccess(server=url, token_file=token)) as session:
        await session.request("GET", "/a")
        scripted.token = "two"  # rotated: the file changes, the old token is refused from now
        token.write_text("two")
        os.utime(token, ns=(0, 0))  # whatever its stamp, the 401 makes it read again
        assert (await session.request("GET", "/b"))["path"] == "/b"
    assert scripted.seen[-2:] == ["Bearer one", "Bearer two"]


async def test_still_refused_after_fresh_credentials_is_an_error(api: tuple[Api, str]) -> None:
    scripted, url = api
    async with ApiSession(ClusterAccess(server=url, authorization="Bearer wrong")) as session:
        with pytest.raises(KubeError) as raised:
            await session.request("GET", "/a")
    assert raised.value.status == 401 and raised.value.reason == "Unauthorized"
    assert len(scripted.seen) == 2  # once, and once more: no loop


async def test_every_request_is_paced_by_the_sessions_limit(api: tuple[Api, str]) -> None:
    _, url = api
    taken: list[int] = []

    class Counting(TokenBucket):
        async def acquire(self) -> None:
            taken.append(1)
            await super().acquire()

    limit = Counting(qps=1000.0, burst=10)
    async with ApiSession(ClusterAccess(server=url, authorization="Bearer one"), limit=limit) as session:
        for _ in range(3):
            await session.request("GET", "/a")
        async with session.response("GET", "/a") as response:
            assert response.status == 200
    assert len(taken) == 4


async def test_an_answer_over_its_budget_is_an_error_and_an_error_body_is_cut(api: tuple[Api, str]) -> None:
    _, url = api
    access = ClusterAccess(server=url, authorization="Bearer one")
    async with ApiSession(access, max_body_bytes=4096) as session:
        with pytest.raises(KubeError, match="over 4096 bytes"):
            await session.request("GET", "/big")
        assert (await session.request("GET", "/big", max_body_bytes=10_000))["x"] == "a" * 5000
        with pytest.raises(KubeError) as missing:
            await session.request("GET", "/missing")
        with pytest.raises(KubeError) as broken:
            await session.request("GET", "/broken")
    assert missing.value.status == 404 and missing.value.reason == "NotFound"
    assert broken.value.status == 500 and broken.value.body == "b" * MAX_ERROR_BYTES


async def test_the_followers_transport_reads_a_rotated_token_afresh_at_the_401(
        api: tuple[Api, str], tmp_path: Path) -> None:
    """The log followers' transport is an ApiSession: a pod read after a token rotation succeeds."""
    import aiohttp

    from podmortem.logs.following import pod_log_api
    from podmortem.logs.settings import FollowSettings

    scripted, url = api
    token = tmp_path / "token"
    token.write_text("one")
    async with pod_log_api.SessionTransport(ClusterAccess(server=url, token_file=token)) as transport:
        logs = pod_log_api.PodLogApi(transport, settings=FollowSettings())
        assert (await logs.read_pod(namespace="ns", name="p"))["path"] == "/api/v1/namespaces/ns/pods/p"
        scripted.token = "two"
        rotate_unnoticed(token, "two")
        assert (await logs.read_pod(namespace="ns", name="q"))["path"] == "/api/v1/namespaces/ns/pods/q"
        response = await transport.get("/raw", query=[], client_timeout=aiohttp.ClientTimeout(total=5))
        response.release()
    assert scripted.seen[1:] == ["Bearer one", "Bearer two", "Bearer two"]


async def test_kube_reads_through_its_session(api: tuple[Api, str], tmp_path: Path) -> None:
    """`Kube`'s calls get the session's fresh credentials and its bound on error texts."""
    from podmortem.kube.api import Kube

    scripted, url = api
    token = tmp_path / "token"
    token.write_text("one")
    async with ApiSession(ClusterAccess(server=url, token_file=token)) as session:
        kube = Kube(api=session)
        assert await kube.get("/missing") is None
        before = token.stat()
        scripted.token = "two"
        token.write_text("two")
        os.utime(token, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert (await kube.get_json("/api/v1/pods", query=[("limit", "1")]))["query"] == {"limit": "1"}
        with pytest.raises(KubeError) as broken:
            await kube.get("/broken")
    assert broken.value.status == 500 and len(broken.value.body) == MAX_ERROR_BYTES


async def test_a_plugins_fresh_token_keeps_the_session_and_its_streams(
        api: tuple[Api, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin's credentials are made anew (a new TLS context each time, from the same CA): the
    session stays, so the log streams open on it are not cut at every renewal."""
    import ssl

    from podmortem.kube import clients

    scripted, url = api
    runs: list[int] = []

    async def resolve(access: ClusterAccess) -> ClusterAccess:
        runs.append(1)
        token = "one" if len(runs) == 1 else "two"
        return ClusterAccess(server=url, authorization=f"Bearer {token}", ca_pem=b"the same CA",
                             ssl_context=ssl.create_default_context())

    monkeypatch.setattr(clients, "resolve_plugin", resolve)
    session = ApiSession(ClusterAccess(server=url, plugin=True))
    async with session, session.response("GET", "/open-stream") as stream:
        assert stream.status == 200
        first = session._session
        scripted.token = "two"
        await session.request("GET", "/a")  # refused, the plugin runs again, sent once more
        assert session._session is first
        assert (await stream.json())["path"] == "/open-stream"
    assert len(runs) == 2 and scripted.seen[-2:] == ["Bearer one", "Bearer two"]


async def test_a_websocket_refused_for_a_rotated_token_is_opened_with_it_read_afresh(tmp_path: Path) -> None:
    seen: list[str] = []

    async def socket(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") != "Bearer new":
            return web.Response(status=401)
        ws = web.WebSocketResponse(protocols=("v4.channel.k8s.io",))
        await ws.prepare(request)
        await ws.send_bytes(b"hello")
        await ws.close()
        return ws

    app = web.Application()
    app.router.add_get("/ws", socket)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    token = tmp_path / "token"
    token.write_text("old")
    access = ClusterAccess(server=f"http://127.0.0.1:{runner.addresses[0][1]}", token_file=token)
    access.headers()
    before = token.stat()
    token.write_text("new")
    os.utime(token, ns=(before.st_atime_ns, before.st_mtime_ns))
    try:
        async with ApiSession(access) as session:
            ws = await session.websocket("/ws", protocols=("v4.channel.k8s.io",))
            assert (await ws.receive_bytes()) == b"hello"
            await ws.close()
    finally:
        await runner.cleanup()
    assert seen == ["Bearer old", "Bearer new"]


async def test_the_followers_requests_are_paced_by_their_transports_bucket(api: tuple[Api, str]) -> None:
    """The followers' pace is their session's: every pod read and log request takes a token."""
    from podmortem.logs.following import pod_log_api
    from podmortem.logs.settings import FollowSettings

    _, url = api
    assert pod_log_api.follow_limit(FollowSettings(api_qps=None)) is None
    limit = pod_log_api.follow_limit(FollowSettings(api_qps=1.0, api_burst=2))
    assert limit is not None
    now = [0.0]
    limit = TokenBucket(qps=limit.qps, burst=limit.burst, clock=lambda: now[0])
    access = ClusterAccess(server=url, authorization="Bearer one")
    async with pod_log_api.SessionTransport(access, limit=limit) as transport:
        logs = pod_log_api.PodLogApi(transport, settings=FollowSettings())
        await logs.read_pod(namespace="ns", name="a")
        await logs.read_pod(namespace="ns", name="b")
    assert limit.delay() == pytest.approx(1.0)  # the burst of two is spent: a third waits a second


async def test_a_capped_session_holds_no_more_connections_than_its_cap() -> None:
    """A burst of requests waits for a connection instead of opening (and then keeping) one each."""
    import asyncio

    peers: set[int] = set()
    busy = 0
    most = 0

    async def slow(request: web.Request) -> web.Response:
        nonlocal busy, most
        assert request.transport is not None
        peers.add(request.transport.get_extra_info("peername")[1])
        busy += 1
        most = max(most, busy)
        await asyncio.sleep(0.05)
        busy -= 1
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/slow", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        server = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with ApiSession(ClusterAccess(server=server), max_connections=2) as capped:
            answers = await asyncio.gather(*(capped.request("GET", "/slow") for _ in range(8)))
        assert answers == [{"ok": True}] * 8
        assert most == 2 and len(peers) == 2, (most, peers)
        peers.clear()
        most = 0
        async with ApiSession(ClusterAccess(server=server)) as uncapped:  # the default: no cap
            await asyncio.gather(*(uncapped.request("GET", "/slow") for _ in range(8)))
        assert most == 8 and len(peers) == 8
    finally:
        await runner.cleanup()
