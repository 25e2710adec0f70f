"""The API server is reached through the kubeconfig's ``proxy-url``, else the environment's proxy.

Every request to the API server goes through an ``ApiSession``, which reads the proxy once
(``clients.proxy_for``), as client-go's ProxyFromEnvironment does,
instead of trusting the environment per request (which looked up ``~/.netrc`` and the proxy
variables in a worker thread for every call). A recording HTTP proxy stands in for a real one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from podmortem.kube import clients
from podmortem.kube.config import ClusterAccess
from podmortem.kube.session import ApiSession

SERVER = "http://apiserver.invalid:6443"


@pytest.fixture
async def proxy() -> AsyncIterator[tuple[str, list[str]]]:
    """A forward proxy that answers every request itself and records the absolute URL it was asked for."""
    seen: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(str(request.url))
        return web.json_response({"kind": "APIVersions", "versions": ["v1"]})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        await runner.cleanup()


def _clear_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy",
                 "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def test_the_kubeconfig_proxy_wins_then_the_environment_then_none(monkeypatch: pytest.MonkeyPatch) -> None:
    _clear_proxy_env(monkeypatch)
    assert clients.proxy_for(ClusterAccess(server=SERVER)) is None
    monkeypatch.setenv("HTTP_PROXY", "http://user:secret@envproxy.invalid:3128")
    assert clients.proxy_for(ClusterAccess(server=SERVER)) == "http://user:secret@envproxy.invalid:3128"
    assert clients.proxy_for(ClusterAccess(server=SERVER, proxy="http://kc.invalid:1")) == "http://kc.invalid:1"
    monkeypatch.setenv("NO_PROXY", "apiserver.invalid")
    assert clients.proxy_for(ClusterAccess(server=SERVER)) is None


async def test_api_calls_and_log_sessions_go_through_the_environment_proxy(
    proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = proxy
    _clear_proxy_env(monkeypatch)
    monkeypatch.setenv("HTTP_PROXY", url)
    access = ClusterAccess(server=SERVER, authorization="Bearer t")
    async with ApiSession(access) as api:
        await api.request("GET", "/api")
        async with api.response("GET", "/version") as got:
            assert got.status == 200
        assert api._session is not None and api._session.trust_env is False  # no per-request lookups
    assert seen == [SERVER + "/api", SERVER + "/version"]


async def test_a_kubeconfig_proxy_is_used_with_no_environment(
    proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = proxy
    _clear_proxy_env(monkeypatch)
    access = ClusterAccess(server=SERVER, proxy=url)
    async with ApiSession(access) as api:
        await api.request("GET", "/api")
        await api.request("GET", "/apis")
    assert seen == [SERVER + "/api", SERVER + "/apis"]
