"""Connection credentials: a token file is re-read at each check; a plugin is not re-run each time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from podmortem.kube import clients, connection
from podmortem.kube.config import ClusterAccess


async def test_a_plugin_runs_again_only_when_its_credentials_are_old_or_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[int] = []

    async def resolve(access: ClusterAccess) -> ClusterAccess:
        runs.append(1)
        return ClusterAccess(server=access.server, authorization=f"Bearer token-{len(runs)}")

    monkeypatch.setattr(clients, "resolve_plugin", resolve)
    link = connection.Connection(ClusterAccess(server="https://api", plugin=True))
    first = await link.credentials()
    assert (await link.credentials()) is first and len(runs) == 1  # a check every 15 s reuses them
    assert (await link.credentials(fresh=True)).authorization == "Bearer token-2"
    link.authenticated = False
    link._set("the API server refused our credentials")  # a 401: the plugin must run again
    await link.credentials()
    assert len(runs) == 3
    monkeypatch.setattr(clients, "PLUGIN_CREDENTIALS_S", 0.0)
    await link.credentials()
    assert len(runs) == 4  # and when they are old


async def test_a_token_file_is_read_at_each_check(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one")
    link = connection.Connection(ClusterAccess(server="https://api", token_file=token))
    assert (await link.credentials()).headers()["Authorization"] == "Bearer one"
    before = token.stat()
    token.write_text("two")  # rewritten in place, its stamp put back: only the check's forced re-read sees it
    os.utime(token, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (await link.credentials()).headers()["Authorization"] == "Bearer two"


async def test_checking_logs_a_checker_that_fails_and_stops_it_with_the_block(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A checker that ended unseen would leave /readyz answering its last check for ever."""
    import asyncio
    import logging

    link = connection.Connection(ClusterAccess(server="https://api"))
    checks: list[int] = []
    broke = asyncio.Event()

    async def check() -> str | None:
        checks.append(1)
        if len(checks) == 2:
            broke.set()
            raise RuntimeError("the check itself broke")
        return None

    monkeypatch.setattr(link, "check", check)
    monkeypatch.setattr(connection, "CHECK_INTERVAL_S", 0.0)
    with caplog.at_level(logging.ERROR, logger="podmortem.background"):
        async with link.checking():
            async with asyncio.timeout(5):
                await broke.wait()
            for _ in range(3):  # the task ends, then its done callbacks run
                await asyncio.sleep(0)
            assert "podmortem-api-connection-check failed" in caplog.text  # while the block still runs
    assert "podmortem-api-connection-check failed: RuntimeError: the check itself broke" in caplog.text


async def test_checking_runs_the_checks_until_the_block_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    link = connection.Connection(ClusterAccess(server="https://api"))
    checks: list[int] = []
    three = asyncio.Event()

    async def check() -> str | None:
        checks.append(1)
        if len(checks) == 3:
            three.set()
        return None

    monkeypatch.setattr(link, "check", check)
    monkeypatch.setattr(connection, "CHECK_INTERVAL_S", 0.0)
    async with link.checking():
        async with asyncio.timeout(5):
            await three.wait()
    ended = len(checks)
    await asyncio.sleep(0.05)
    assert len(checks) == ended  # stopped with the block


async def test_a_check_says_what_the_api_server_refused() -> None:
    from aiohttp import web

    tokens = {"Bearer good"}

    async def handle(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") not in tokens:
            return web.json_response({"kind": "Status", "message": "Unauthorized"}, status=401)
        if request.path == "/api":
            return web.json_response({"kind": "APIVersions"})
        assert request.query.get("limit") == "1"
        if request.path == "/apis/podmortem.io/v1alpha1/trainingjobs":
            return web.json_response({"kind": "Status", "message": "forbidden"}, status=403)
        return web.json_response({"items": []})

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    listables = [connection.Listable(what="pods", path="/api/v1/pods"),
                 connection.Listable(what="trainingjobs", path="/apis/podmortem.io/v1alpha1/trainingjobs")]
    try:
        refused = connection.Connection(ClusterAccess(server=url, authorization="Bearer bad"),
                                        listables=listables)
        assert "refused our credentials" in (await refused.check() or "") and not refused.authenticated
        link = connection.Connection(ClusterAccess(server=url, authorization="Bearer good"),
                                     listables=listables)
        problem = await link.check()
        assert link.authenticated and problem is not None
        assert "may not list trainingjobs" in problem and "pods" not in problem
    finally:
        await runner.cleanup()
