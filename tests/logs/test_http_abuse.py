"""The log server under abuse and bad luck: poisoning, huge parameters, token spraying, reader floods,
stalled readers, silent connections, shutdown with readers open, and TLS.

Each test serves with the real ``http.serve`` (the operator's runner settings), on a free port.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import pytest
from tests.logs import test_http as base
from tests.logs.test_http import SARS, TOKENS, access_review, token_review, write
from tests.malformed_requests import assert_parser_errors_say_no_store_and_nosniff

from podmortem.kube.session import ApiSession
from podmortem.logs.cursor import LogCursor
from podmortem.logs.serving import auth, http
from podmortem.logs.settings import HttpSettings
from podmortem.logs.storage.store import LogStore, StoreSettings
from podmortem.serving_limits import ServerLimits
from podmortem_demo.emulated.tls import make_pki

api = base.api  # the bare emulated API of the access-review tests
api_session = base.api_session

OPEN = auth.Reviewer(api=None, settings=auth.AuthSettings(authenticate=False, authorize=False))


@pytest.fixture
async def log_store(tmp_path: Path) -> AsyncIterator[LogStore]:
    async with LogStore(tmp_path / "store", settings=StoreSettings(fsync_interval_s=None)) as st:
        yield st


@asynccontextmanager
async def served(log_store: LogStore, reviewer: auth.Reviewer = OPEN, **settings: Any) -> AsyncIterator[str]:
    conf = HttpSettings(host="127.0.0.1", port=0, **settings)
    async with http.serve(log_store=log_store, reviewer=reviewer, settings=conf) as runner:
        port = runner.addresses[0][1]
        yield f"{conf.scheme}://127.0.0.1:{port}"


async def test_asking_for_an_unknown_container_changes_nothing_for_the_next_request(
    log_store: LogStore,
) -> None:
    await write(log_store.sink(namespace="ns", pod="p"), "main", [b"hello"], LogCursor(container_id="c"))
    async with served(log_store) as url, aiohttp.ClientSession() as s:
        for i in range(2000):
            async with s.get(f"{url}/logs/ns/p", params={"container": f"zzz{i}"}) as r:
                assert r.status == 404
        async with s.get(f"{url}/logs/ns/p") as r:
            assert r.status == 200, await r.text()
            assert await r.read() == b"hello\n"
    assert list(log_store._pods.get("ns", "p").instances) == ["main"]


@pytest.mark.parametrize(("query", "message"), [
    ({"since": "9" * 400 + "h"}, "since must be"),
    ({"since": "1" + "0" * 40 + "s"}, None),  # valid but before 1970: everything (200)
    ({"tail": "9" * 4400}, "tail must be"),
    ({"tail": "²"}, "tail must be"),
    ({"x" * 5000: "1"}, "unknown parameter(s)"),
])
async def test_huge_or_odd_parameters_are_400_not_500(
    log_store: LogStore, query: dict[str, str], message: str | None
) -> None:
    await write(log_store.sink(namespace="ns", pod="p"), "main", [b"x"], LogCursor(container_id="c"))
    async with served(log_store) as url, aiohttp.ClientSession() as s, \
            s.get(f"{url}/logs/ns/p", params=query) as r:
        body = await r.text()
        if message is None:
            assert r.status == 200 and body == "x\n"
        else:
            assert r.status == 400 and message in body and len(body) < 1000


@pytest.mark.parametrize("path", ["/logs/ns/p%0A", "/logs/ns%0A/p", "/logs/a.b/p", "/logs/%2E%2E/p"])
async def test_bad_names_are_400_before_any_review(
    log_store: LogStore, path: str, api: kmock.RawHandler, api_session: ApiSession
) -> None:
    api[TOKENS] << token_review(True)
    api[SARS] << access_review(True)
    reviewer = auth.Reviewer(api=api_session)
    async with served(log_store, reviewer) as url, aiohttp.ClientSession() as s, \
            s.get(yarl_url(url + path), headers={"Authorization": "Bearer good-token"}) as r:
        assert r.status == 400, await r.text()
    assert reviewer.reviews_sent == 0


def yarl_url(raw: str) -> Any:
    import yarl
    return yarl.URL(raw, encoded=True)


async def test_a_rejected_token_is_reviewed_once_and_a_sprayer_is_paced(
    log_store: LogStore, api: kmock.RawHandler, api_session: ApiSession
) -> None:
    api[TOKENS] << token_review(False)
    reviewer = auth.Reviewer(api=api_session)
    async with served(log_store, reviewer, auth_failures_per_minute=20) as url, aiohttp.ClientSession() as s:
        paced: list[float] = []
        limits = _APPS[-1][http.FAILURES]
        now = [1000.0 * 60]  # the start of a minute: no minute turns during the test
        limits.clock = lambda: now[0]

        async def sleep(seconds: float) -> None:  # the pace's waits, on a clock of the test's own
            paced.append(seconds)
            now[0] += seconds

        limits.sleep = sleep
        for _ in range(15):
            async with s.get(f"{url}/logs/ns/p", headers={"Authorization": "Bearer same-bad"}) as r:
                assert r.status == 401
        assert reviewer.reviews_sent == 1
        statuses = []
        for i in range(25):
            async with s.get(f"{url}/logs/ns/p", headers={"Authorization": f"Bearer bad-{i}"}) as r:
                statuses.append(r.status)
    assert statuses == [401] * 25  # no 429: a valid token among them would have been served
    assert reviewer.reviews_sent == 26
    # The address's 20 failures a minute were spent by "same-bad" (15, reviewed once) and bad-0..4; the
    # other 20 went at the address's pace, 3 s apart (the first at once).
    assert paced == [3.0] * 19


async def test_reader_caps_answer_429_and_free_their_slot(log_store: LogStore) -> None:
    sink = log_store.sink(namespace="ns", pod="p")
    await write(sink, "main", [b"x"], LogCursor(container_id="c"))
    async with served(log_store, max_readers_per_caller=2, max_readers=3) as url, \
            aiohttp.ClientSession() as s:
        follows = [await s.get(f"{url}/logs/ns/p", params={"follow": "true"}) for _ in range(2)]
        assert [r.status for r in follows] == [200, 200]
        async with s.get(f"{url}/logs/ns/p") as r:
            assert r.status == 429 and r.headers["Retry-After"] == "5"
            assert "limit per caller" in await r.text()
        follows[0].close()
        for _ in range(100):  # the server notices the closed reader at its next wait
            async with s.get(f"{url}/logs/ns/p") as r:
                if r.status == 200:
                    break
            await asyncio.sleep(0.05)
        assert r.status == 200
        follows[1].close()


async def test_a_reader_that_reads_nothing_is_dropped_at_the_write_deadline(log_store: LogStore) -> None:
    sink = log_store.sink(namespace="ns", pod="p")
    cursor = LogCursor(container_id="c")
    for i in range(40):  # 40 MB: far more than the socket buffers hold
        await write(sink, "main", [b"y" * 100_000] * 10, cursor, start=i * 10)
    async with served(log_store, write_deadline_s=0.5) as url:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /logs/ns/p HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        await reader.read(1000)  # the response started; now read nothing
        slots = _slots(log_store)
        for _ in range(200):  # the deadline is 0.5 s; allow a slow machine 20 s
            if slots() == 0:
                break
            await asyncio.sleep(0.1)  # polling another task's counter
        assert slots() == 0
        writer.close()


_APPS: list[Any] = []


def _slots(log_store: LogStore) -> Callable[[], int]:
    return lambda: sum(app[http.SLOTS].active for app in _APPS)


@pytest.fixture(autouse=True)
def _track_apps(monkeypatch: pytest.MonkeyPatch) -> None:
    real = http.make_app
    _APPS.clear()

    def tracking(**kwargs: Any) -> Any:
        app = real(**kwargs)
        _APPS.append(app)
        return app

    monkeypatch.setattr(http, "make_app", tracking)


@pytest.mark.parametrize("sent", [b"", b"GET /logs/ns/p HTTP/1.1\r\nHo"])
async def test_a_connection_that_sends_no_complete_request_is_closed(
    log_store: LogStore, sent: bytes
) -> None:
    async with served(log_store, connections=ServerLimits(header_timeout_s=0.5)) as url:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(sent)
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed by the server
        writer.close()


async def test_shutdown_tells_following_readers_and_does_not_wait_for_them(log_store: LogStore) -> None:
    sink = log_store.sink(namespace="ns", pod="p")
    await write(sink, "main", [b"line"], LogCursor(container_id="c"))
    session = aiohttp.ClientSession()
    try:
        async with served(log_store) as url:
            follow = await session.get(f"{url}/logs/ns/p", params={"follow": "true"})
            assert await follow.content.readline() == b"line\n"
            started = time.monotonic()
        stopped = time.monotonic() - started
        assert await asyncio.wait_for(follow.read(), 5) == http.STOPPING_MARKER
        assert stopped < 5  # aiohttp's own default waits 60 s for open requests
    finally:
        await session.close()


async def test_tls_when_a_certificate_is_given(log_store: LogStore, tmp_path: Path) -> None:
    pki = make_pki(server_names=("localhost", "127.0.0.1"))
    (tmp_path / "tls.crt").write_bytes(pki.server_pem)
    (tmp_path / "tls.key").write_bytes(pki.server_key)
    await write(log_store.sink(namespace="ns", pod="p"), "main", [b"over tls"], LogCursor(container_id="c"))
    trusted = ssl.create_default_context(cadata=pki.ca_pem.decode())
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    async with served(log_store, tls_cert_file=cert, tls_key_file=key) as url:
        assert url.startswith("https://")
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{url}/logs/ns/p", ssl=trusted) as r:
                assert await r.read() == b"over tls\n"
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await s.get(f"{url}/logs/ns/p")  # not trusted without the CA


async def test_the_token_audience_is_asked_for(
    log_store: LogStore, api: kmock.RawHandler, api_session: ApiSession
) -> None:
    seen: list[Any] = []

    def review(req: kmock.Request) -> dict[str, Any]:
        seen.append(req.data["spec"].get("audiences"))
        return token_review(False)(req)

    api[TOKENS] << review
    reviewer = auth.Reviewer(api=api_session, settings=auth.AuthSettings(audiences=("podmortem",)))
    async with served(log_store, reviewer) as url, aiohttp.ClientSession() as s, \
            s.get(f"{url}/logs/ns/p", headers={"Authorization": "Bearer t"}) as r:
        assert r.status == 401
    assert seen == [["podmortem"]]


def test_settings_refuse_half_a_tls_pair() -> None:
    with pytest.raises(ValueError, match="both"):
        HttpSettings(tls_cert_file=Path("a.crt"))


async def test_what_aiohttp_cannot_parse_is_400_with_safe_headers(log_store: LogStore) -> None:
    async with served(log_store) as url:
        await assert_parser_errors_say_no_store_and_nosniff(int(url.rsplit(":", 1)[1]))
