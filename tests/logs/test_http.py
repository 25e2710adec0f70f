"""HTTP access to stored logs: params, errors, live follow, the log after the pod is gone, auth."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import kmock
import pytest
from aiohttp import test_utils
from tests.kube.rotation import access_with_rotated_token

from podmortem.kube.config import ClusterAccess
from podmortem.kube.session import ApiSession
from podmortem.logs import timestamps
from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import EndReason, GapMarker, GapReason, LogEnd, LogLine
from podmortem.logs.serving import auth, http
from podmortem.logs.storage.store import LogStore, PodLogSink, StoreSettings

BASE = 1_714_564_800 * 10**9
TOKENS = "POST /apis/authentication.k8s.io/v1/tokenreviews"
SARS = "POST /apis/authorization.k8s.io/v1/subjectaccessreviews"


@pytest.fixture
async def log_store(tmp_path: Path) -> AsyncIterator[LogStore]:
    async with LogStore(tmp_path, settings=StoreSettings(fsync_interval_s=None)) as st:
        yield st


async def write(
    sink: PodLogSink, container: str, texts: list[bytes], cursor: LogCursor, start: int = 0
) -> None:
    batch = []
    for i, text in enumerate(texts, start):
        cursor.accept(BASE + i * 10**9)
        batch.append(LogLine(container, BASE + i * 10**9, text))
    await sink.write(container, batch, cursor)


@pytest.fixture
async def api() -> AsyncIterator[kmock.RawHandler]:
    async with kmock.RawHandler() as handler, kmock.Server(handler):
        yield handler


@pytest.fixture
async def api_session(api: kmock.RawHandler) -> AsyncIterator[ApiSession]:
    async with ApiSession(ClusterAccess(server=str(api.url).rstrip("/"))) as session:
        yield session


ClientFactory = Callable[[auth.Reviewer], Any]


@pytest.fixture
async def make_client(log_store: LogStore) -> AsyncIterator[Callable[..., Any]]:
    made: list[test_utils.TestClient[Any, Any]] = []

    async def make(reviewer: auth.Reviewer | None = None) -> test_utils.TestClient[Any, Any]:
        reviewer = reviewer or auth.Reviewer(api=None, settings=auth.AuthSettings(authenticate=False,
                                                                                  authorize=False))
        app = http.make_app(log_store=log_store, reviewer=reviewer)
        client = test_utils.TestClient(test_utils.TestServer(app))
        await client.start_server()
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


async def test_complete_log_after_the_pod_is_gone(log_store: LogStore, make_client: Any) -> None:
    sink = log_store.sink(namespace="ns", pod="trainer-0", job="train")
    cursor = LogCursor(container_id="cid-1")
    await write(sink, "main", [b"epoch 1", b"\xffbad utf8\r50%", b"epoch 2"], cursor)
    await sink.gap(GapMarker("main", GapReason.ROTATION, BASE + 2 * 10**9, BASE + 9 * 10**9))
    await write(sink, "main", [b"epoch 9"], cursor, start=9)
    await sink.end(LogEnd("main", "cid-1", EndReason.POD_DELETED))
    client = await make_client()

    resp = await client.get("/logs/ns/trainer-0")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/plain")
    body = await resp.read()
    assert body.split(b"\n") == [
        b"epoch 1",
        b"\xffbad utf8\r50%",
        b"epoch 2",
        b"--- podmortem: lines may be missing here (rotation) between "
        + timestamps.format_ns(BASE + 2 * 10**9).encode() + b" and "
        + timestamps.format_ns(BASE + 9 * 10**9).encode() + b" ---",
        b"epoch 9",
        b"--- podmortem: end of log (pod-deleted) ---",
        b"",
    ]

    # A gap right before the first line served is shown: lines may be missing just before it.
    resp = await client.get("/logs/ns/trainer-0", params={"tail": "1", "timestamps": "true"})
    lines = (await resp.read()).split(b"\n")
    assert lines[0].startswith(b"--- podmortem: lines may be missing here")
    assert lines[1] == timestamps.format_ns(BASE + 9 * 10**9).encode() + b" epoch 9"

    resp = await client.get("/logs/ns/trainer-0", params={"format": "jsonl"})
    records = [json.loads(line) for line in (await resp.text()).splitlines()]
    assert [r["type"] for r in records] == ["line", "line", "line", "gap", "line", "end"]
    assert records[1]["text"].encode("utf-8", "surrogateescape") == b"\xffbad utf8\r50%"
    assert records[-1] == {"type": "end", "reason": "pod-deleted", "container_id": "cid-1"}

    since = timestamps.format_ns(BASE + 2 * 10**9)
    resp = await client.get("/logs/ns/trainer-0", params={"since": since})
    assert (await resp.read()).startswith(b"epoch 2\n")


async def test_follow_streams_live_and_ends_with_the_log(log_store: LogStore, make_client: Any) -> None:
    sink = log_store.sink(namespace="ns", pod="trainer-0")
    cursor = LogCursor(container_id="cid-1")
    await write(sink, "main", [b"first"], cursor)
    client = await make_client()
    resp = await client.get("/logs/ns/trainer-0", params={"follow": "true"})
    assert resp.status == 200
    assert await resp.content.readline() == b"first\n"
    await write(sink, "main", [b"second"], cursor, start=1)
    assert await asyncio.wait_for(resp.content.readline(), 10) == b"second\n"
    await sink.end(LogEnd("main", "cid-1", EndReason.TERMINATED))
    rest = await asyncio.wait_for(resp.read(), 10)
    assert rest == b"--- podmortem: end of log (terminated) ---\n"


@pytest.mark.parametrize(("query", "message"), [
    ({"tail": "x"}, "tail must be"),
    ({"tail": "-5"}, "tail must be"),
    ({"since": "yesterday"}, "since must be"),
    ({"follow": "maybe"}, "follow must be true or false"),
    ({"format": "xml"}, "format must be"),
    ({"tailLines": "5"}, "unknown parameter(s): tailLines"),
    ({"container": "Bad_Name"}, "not a valid Kubernetes name"),
])
async def test_bad_params_are_400_with_a_reason(
    log_store: LogStore, make_client: Any, query: dict[str, str], message: str
) -> None:
    await write(log_store.sink(namespace="ns", pod="p"), "main", [b"x"], LogCursor(container_id="c"))
    client = await make_client()
    resp = await client.get("/logs/ns/p", params=query)
    assert resp.status == 400
    assert message in await resp.text()


async def test_unknown_pod_or_container_is_404_and_ambiguous_container_is_400(
    log_store: LogStore, make_client: Any
) -> None:
    sink = log_store.sink(namespace="ns", pod="p")
    await write(sink, "a", [b"x"], LogCursor(container_id="ca"))
    await write(sink, "b", [b"y"], LogCursor(container_id="cb"))
    client = await make_client()
    assert (await client.get("/logs/ns/nope")).status == 404
    assert (await client.get("/logs/other/p")).status == 404
    assert (await client.get("/logs/ns/p", params={"container": "c"})).status == 404
    resp = await client.get("/logs/ns/p")
    assert resp.status == 400 and "choose one of: a, b" in await resp.text()
    assert await (await client.get("/logs/ns/p", params={"container": "b"})).read() == b"y\n"


def token_review(authenticated: bool) -> Callable[[kmock.Request], dict[str, Any]]:
    def respond(req: kmock.Request) -> dict[str, Any]:
        assert req.data["spec"]["token"] == "good-token" or not authenticated
        status: dict[str, Any] = {"authenticated": authenticated}
        if authenticated:
            status["user"] = {"username": "alice", "uid": "u-1", "groups": ["devs"]}
        return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status}
    return respond


def access_review(allowed: bool) -> Callable[[kmock.Request], dict[str, Any]]:
    def respond(req: kmock.Request) -> dict[str, Any]:
        spec = req.data["spec"]
        assert spec["user"] == "alice" and spec["groups"] == ["devs"] and spec["uid"] == "u-1"
        assert spec["resourceAttributes"] == {
            "namespace": "ns", "verb": "get", "group": "", "resource": "pods", "subresource": "log",
        }
        return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "status": {"allowed": allowed, "reason": "" if allowed else "no RoleBinding"}}
    return respond


@pytest.mark.parametrize(("authenticated", "allowed", "status"), [
    (True, True, 200),
    (False, True, 401),
    (True, False, 403),
])
async def test_token_and_access_reviews(
    log_store: LogStore, make_client: Any, api: kmock.RawHandler, api_session: ApiSession,
    authenticated: bool, allowed: bool, status: int,
) -> None:
    await write(log_store.sink(namespace="ns", pod="p"), "main", [b"secret"], LogCursor(container_id="c"))
    api[TOKENS] << token_review(authenticated)
    api[SARS] << access_review(allowed)
    reviewer = auth.Reviewer(api=api_session)
    client = await make_client(reviewer)
    resp = await client.get("/logs/ns/p", headers={"Authorization": "Bearer good-token"})
    assert resp.status == status
    body = await resp.text()
    assert (body == "secret\n") == (status == 200)
    if status == 403:
        assert 'user "alice" cannot get resource "pods/log" in namespace "ns": no RoleBinding' in body
    if status == 401:
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")


async def test_missing_token_is_401_without_asking_the_api(
    log_store: LogStore, make_client: Any, api_session: ApiSession
) -> None:
    reviewer = auth.Reviewer(api=api_session)
    client = await make_client(reviewer)
    for headers in ({}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer "}):
        assert (await client.get("/logs/ns/p", headers=headers)).status == 401
    assert reviewer.reviews_sent == 0


async def test_positive_reviews_are_cached_negative_ones_not(
    log_store: LogStore, make_client: Any, api: kmock.RawHandler, api_session: ApiSession
) -> None:
    await write(log_store.sink(namespace="ns", pod="p"), "main", [b"x"], LogCursor(container_id="c"))
    api[TOKENS] << token_review(True)
    api[SARS] << access_review(True)
    reviewer = auth.Reviewer(api=api_session, settings=auth.AuthSettings(cache_ttl_s=300))
    client = await make_client(reviewer)
    for _ in range(3):
        resp = await client.get("/logs/ns/p", headers={"Authorization": "Bearer good-token"})
        assert resp.status == 200
    assert reviewer.reviews_sent == 2  # one TokenReview + one SubjectAccessReview, then the cache
    for _ in range(2):
        resp = await client.get("/logs/ns/p", headers={"Authorization": "Bearer other-token"})
    assert reviewer.reviews_sent == 4  # a different token is reviewed anew


@pytest.mark.parametrize("failure", [503, 500, 403])
async def test_api_failure_is_503_never_access(
    log_store: LogStore, make_client: Any, api: kmock.RawHandler, api_session: ApiSession, failure: int
) -> None:
    await write(log_store.sink(namespace="ns", pod="p"), "main", [b"secret"], LogCursor(container_id="c"))
    api[TOKENS] << failure
    client = await make_client(auth.Reviewer(api=api_session))
    resp = await client.get("/logs/ns/p", headers={"Authorization": "Bearer good-token"})
    assert resp.status == 503
    assert "cannot check access" in await resp.text()


async def test_unreachable_api_is_503(log_store: LogStore, make_client: Any) -> None:
    # Nothing listens on the discard port.
    async with ApiSession(ClusterAccess(server="http://127.0.0.1:9")) as session:
        reviewer = auth.Reviewer(api=session, settings=auth.AuthSettings(request_timeout_s=5))
        client = await make_client(reviewer)
        resp = await client.get("/logs/ns/p", headers={"Authorization": "Bearer t"})
        assert resp.status == 503


async def test_a_review_refused_for_the_servers_own_rotated_token_goes_again_with_it_read_afresh(
    log_store: LogStore, make_client: Any, tmp_path: Path,
) -> None:
    """The log server's service-account token rotated: its review is not a 503 for the user."""
    from aiohttp import web

    access = access_with_rotated_token(tmp_path)

    async def review(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != "Bearer new":
            return web.json_response({"kind": "Status", "reason": "Unauthorized"}, status=401)
        kind = (await request.json())["kind"]
        status: dict[str, Any] = ({"authenticated": True, "user": {"username": "alice"}}
                                  if kind == "TokenReview" else {"allowed": True})
        return web.json_response({"kind": kind, "status": status})

    app = web.Application()
    app.router.add_post("/apis/{group}/v1/{reviews}", review)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    access.server = f"http://127.0.0.1:{runner.addresses[0][1]}"
    await write(log_store.sink(namespace="ns", pod="p"), "main", [b"secret"], LogCursor(container_id="c"))
    try:
        async with ApiSession(access) as session:
            client = await make_client(auth.Reviewer(api=session))
            resp = await client.get("/logs/ns/p", headers={"Authorization": "Bearer user-token"})
            assert resp.status == 200 and await resp.text() == "secret\n"
    finally:
        await runner.cleanup()


def test_auth_settings_are_validated() -> None:
    with pytest.raises(ValueError):
        auth.AuthSettings(authenticate=False, authorize=True)
    with pytest.raises(ValueError):
        auth.Reviewer(api=None)


def test_since_accepts_durations_and_times() -> None:
    assert http.parse_since("1h30m", now_ns=10**13) == 10**13 - 5400 * 10**9
    assert http.parse_since("2024-05-01T12:00:00Z") == 1_714_564_800 * 10**9
    with pytest.raises(http.BadParams):
        http.parse_since("10 minutes")


async def test_a_long_line_goes_out_in_writes_of_at_most_flush_bytes(
    log_store: LogStore, make_client: Any
) -> None:
    # One write of a whole 16 MiB line is one copy and one send(2) of it in the event loop: every
    # other reader waits that long. Each HTTP chunk is one write, so chunk sizes show the writes.
    long = b"x" * (4 * http.FLUSH_BYTES + 123)
    sink = log_store.sink(namespace="ns", pod="p", job="j")
    await write(sink, "main", [b"before", long, b"after"], LogCursor(container_id="cid-1"))
    client = await make_client()
    resp = await client.get("/logs/ns/p")
    assert resp.status == 200
    chunks: list[int] = []
    body = bytearray()
    current = 0
    async for data, end_of_chunk in resp.content.iter_chunks():
        body += data
        current += len(data)
        if end_of_chunk:
            chunks.append(current)
            current = 0
    assert bytes(body).split(b"\n")[:3] == [b"before", long, b"after"]
    assert max(chunks) <= http.FLUSH_BYTES and len(chunks) >= 5, chunks
