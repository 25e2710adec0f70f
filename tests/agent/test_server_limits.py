"""The agent's server under hostile input: any Authorization bytes are a 401, never a 500, every
answer says ``no-store`` and ``nosniff``, any ``since`` is answered, and the agent's ports have the
deadlines of ``podmortem.serving_limits``.

Requests go through a raw socket, so the bytes sent are the ones the test means.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import quote

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.malformed_requests import assert_parser_errors_say_no_store_and_nosniff

from podmortem import serving_limits
from podmortem.agent import server
from podmortem.serving_limits import ServerLimits

from . import trees
from .test_node_and_server import _agent

SHORT = ServerLimits(header_timeout_s=0.3, body_timeout_s=0.3, idle_timeout_s=0.3)


@asynccontextmanager
async def served(tmp_path: Path, limits: ServerLimits | None = None) -> AsyncIterator[int]:
    agent = _agent(tmp_path, {trees.POD_UID: trees.cgroupfs_pod()})
    await agent.sample_once()
    (tmp_path / "token").write_text("abc\n")
    run = serving_limits.runner(server.make_app(agent, token_path=tmp_path / "token", limits=limits))
    await run.setup()
    try:
        await serving_limits.start(run, host="127.0.0.1", port=0)
        yield run.addresses[0][1]
    finally:
        await run.cleanup()


async def ask(port: int, path: str, authorization: bytes) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n".encode() + b"Authorization: " + authorization
                 + b"\r\nConnection: close\r\n\r\n")
    async with asyncio.timeout(20):
        answer = await reader.read()
    writer.close()
    head = answer.partition(b"\r\n\r\n")[0]
    return int(head.split(b" ", 2)[1]), head


async def test_a_non_ascii_token_is_401_with_safe_headers(tmp_path: Path) -> None:
    async with served(tmp_path) as port:
        path = f"/v1/pods/{trees.POD_UID}/evidence"
        for value in (b"Bearer \xff", b"Bearer ab\xc3\xa9", b"\xff", b"Bearer abc\xff"):
            status, head = await ask(port, path, value)
            assert status == 401, head
            assert b"\r\nCache-Control: no-store" in head and b"\r\nX-Content-Type-Options: nosniff" in head
        status, head = await ask(port, path, b"Bearer abc")
        assert status == 200 and b"\r\nCache-Control: no-store" in head


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.binary(max_size=100).filter(lambda b: b"\r" not in b and b"\n" not in b),
       since=st.text(max_size=40) | st.datetimes().map(lambda d: d.isoformat() + "+14:00"))
def test_any_header_and_since_are_answered_without_a_500(tmp_path: Path, value: bytes, since: str) -> None:
    async def check() -> None:
        async with served(tmp_path) as port:
            path = f"/v1/pods/{trees.POD_UID}/evidence?since={quote(since, safe='')}"
            status, head = await ask(port, path, b"Bearer " + value)
            assert 400 <= status < 500, head
            status, head = await ask(port, path, b"Bearer abc")
            assert status < 500, head

    asyncio.run(check())


async def test_a_connection_that_sends_no_request_is_closed(tmp_path: Path) -> None:
    async with served(tmp_path, SHORT) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\n")
        await writer.drain()
        async with asyncio.timeout(20):
            assert await reader.read() == b""
        writer.close()


async def test_what_aiohttp_cannot_parse_is_400_with_safe_headers_on_both_agent_ports(tmp_path: Path) -> None:
    async with served(tmp_path) as port:
        await assert_parser_errors_say_no_store_and_nosniff(port)
    agent = _agent(tmp_path, {trees.POD_UID: trees.cgroupfs_pod()})
    run = serving_limits.runner(server.make_metrics_app(agent))
    await run.setup()
    try:
        await serving_limits.start(run, host="127.0.0.1", port=0)
        await assert_parser_errors_say_no_store_and_nosniff(run.addresses[0][1])
    finally:
        await run.cleanup()
