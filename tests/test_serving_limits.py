"""The deadlines and connection caps every podmortem server has (``podmortem.serving_limits``).

Each test serves a small application the way the product does (``install``, ``runner``, ``start``)
on a loopback port, with deadlines short enough that the test needs no long wait: it asserts what
happened to the connection (closed by the server, refused with a 503), never how long it took.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web
from tests.malformed_requests import assert_parser_errors_say_no_store_and_nosniff

from podmortem import serving_limits
from podmortem.serving_limits import Phase, ServerLimits
from podmortem_demo.emulated.tls import make_pki

#: Far longer than any deadline of these tests: how long a test waits before calling a hang a failure.
PATIENCE_S = 20.0
SHORT = ServerLimits(header_timeout_s=0.3, body_timeout_s=0.3, idle_timeout_s=0.3,
                     max_connections=8, max_connections_per_peer=4)


async def hello(_: web.Request) -> web.Response:
    return web.Response(text="hello\n")


async def echo(request: web.Request) -> web.Response:
    return web.Response(body=await request.read())


async def broken(_: web.Request) -> web.Response:
    raise web.HTTPNotFound(text="no such thing\n")


@asynccontextmanager
async def served(limits: ServerLimits, tls: ssl.SSLContext | None = None,
                 ) -> AsyncIterator[tuple[int, serving_limits.ConnectionGuard]]:
    app = web.Application()
    guard = serving_limits.install(app, limits, name="test")
    app.router.add_get("/", hello)
    app.router.add_post("/echo", echo)
    app.router.add_get("/missing", broken)
    run = serving_limits.runner(app, shutdown_timeout=0.5)
    await run.setup()
    try:
        await serving_limits.start(run, host="127.0.0.1", port=0, ssl_context=tls)
        yield run.addresses[0][1], guard
    finally:
        await run.cleanup()


async def closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sent until it closed the connection (fails on a hang)."""
    chunks = []
    try:
        async with asyncio.timeout(PATIENCE_S):
            while chunk := await reader.read(65536):
                chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


@pytest.mark.parametrize("sent", [b"", b"G", b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: "])
async def test_a_request_header_that_does_not_complete_in_time_is_cut(sent: bytes) -> None:
    async with served(SHORT) as (port, guard):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(sent)
        await writer.drain()
        assert await closed_by_server(reader) == b""
        writer.close()
        assert guard.tally.cut[Phase.HEADER] == 1 and guard.open == 0


async def test_a_header_sent_a_byte_at_a_time_is_cut_although_bytes_keep_coming() -> None:
    async with served(SHORT) as (port, guard):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        with pytest.raises(ConnectionError):
            for byte in b"GET / HTTP/1.1\r\nHost: x\r\nX-Drip: " + b"a" * 10_000:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.01)  # a drip; the deadline counts from the first byte
        assert guard.tally.cut[Phase.HEADER] == 1
        writer.close()


async def test_a_body_that_does_not_complete_in_time_is_cut() -> None:
    async with served(SHORT) as (port, guard):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly part")
        await writer.drain()
        assert await closed_by_server(reader) == b""
        writer.close()
        assert guard.tally.cut[Phase.BODY] == 1


async def test_an_idle_kept_alive_connection_is_closed_after_its_answer() -> None:
    async with served(SHORT) as (port, guard):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        await writer.drain()
        got = await closed_by_server(reader)
        assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"\r\n\r\nhello")
        writer.close()
        assert guard.tally.cut[Phase.HEADER] == 0 and guard.tally.cut[Phase.BODY] == 0


async def test_a_complete_request_is_answered_and_the_connection_reused() -> None:
    limits = ServerLimits(header_timeout_s=PATIENCE_S, idle_timeout_s=PATIENCE_S)
    async with served(limits) as (port, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(3):
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200") and await reader.readexactly(6) == b"hello\n"
        writer.close()


async def test_connections_beyond_the_cap_per_peer_get_503_and_are_closed() -> None:
    limits = ServerLimits(header_timeout_s=PATIENCE_S, idle_timeout_s=PATIENCE_S,
                          max_connections=8, max_connections_per_peer=4)
    async with served(limits) as (port, guard):
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(4)]
        for _ in range(50):  # the server counts a connection when it accepts it
            if guard.open == 4:
                break
            await asyncio.sleep(0.02)
        assert guard.open == 4
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        refused = await closed_by_server(reader)
        assert refused.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in refused
        assert b"Cache-Control: no-store" in refused and b"X-Content-Type-Options: nosniff" in refused
        writer.close()
        assert guard.tally.refused_peer == 1 and guard.open == 4
        for _, w in held:
            w.close()
        for _ in range(50):
            if guard.open == 0:
                break
            await asyncio.sleep(0.02)
        assert guard.open == 0 and guard.by_peer == {}  # a peer that left takes no room


def test_the_total_cap_refuses_whoever_comes_next() -> None:
    guard = serving_limits.ConnectionGuard(ServerLimits(max_connections=3, max_connections_per_peer=2),
                                           name="t")
    assert [guard.admit(p) for p in ("a", "a", "a", "b", "c")] == [True, True, False, True, False]
    assert (guard.tally.refused_peer, guard.tally.refused_total) == (1, 1)
    guard.release("a")
    assert guard.admit("c") and guard.by_peer == {"a": 1, "b": 1, "c": 1}


async def test_every_response_says_no_store_and_nosniff_errors_included() -> None:
    limits = ServerLimits(header_timeout_s=PATIENCE_S, idle_timeout_s=PATIENCE_S)
    async with served(limits) as (port, _):
        for request in (b"GET / HTTP/1.1\r\n", b"GET /missing HTTP/1.1\r\n", b"GET /nowhere HTTP/1.1\r\n",
                        b"DELETE / HTTP/1.1\r\n"):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request + b"Host: x\r\nConnection: close\r\n\r\n")
            answer = await closed_by_server(reader)
            writer.close()
            assert b"\r\nCache-Control: no-store\r\n" in answer, answer
            assert b"\r\nX-Content-Type-Options: nosniff\r\n" in answer, answer


async def test_what_aiohttp_cannot_parse_is_answered_400_with_no_store_and_nosniff() -> None:
    limits = ServerLimits(header_timeout_s=PATIENCE_S, idle_timeout_s=PATIENCE_S)
    async with served(limits) as (port, _):
        await assert_parser_errors_say_no_store_and_nosniff(port)


async def test_what_aiohttp_cannot_parse_over_tls_gets_the_safe_headers_too(tmp_path: Path) -> None:
    pki = make_pki(server_names=("127.0.0.1",))
    (tmp_path / "tls.crt").write_bytes(pki.server_pem)
    (tmp_path / "tls.key").write_bytes(pki.server_key)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_tls = ssl.create_default_context(cadata=pki.ca_pem.decode())
    limits = ServerLimits(header_timeout_s=PATIENCE_S, idle_timeout_s=PATIENCE_S)
    async with served(limits, server_tls) as (port, _):
        await assert_parser_errors_say_no_store_and_nosniff(port, client_tls)


async def test_a_tls_handshake_that_does_not_complete_in_time_is_cut(tmp_path: Path) -> None:
    pki = make_pki(server_names=("127.0.0.1",))
    (tmp_path / "tls.crt").write_bytes(pki.server_pem)
    (tmp_path / "tls.key").write_bytes(pki.server_key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    async with served(SHORT, tls=context) as (port, guard):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"\x16\x03\x01")  # the start of a ClientHello, and no more
        await writer.drain()
        assert await closed_by_server(reader) == b""
        writer.close()
        # A handshake that completes, then a header that never does: cut by the header deadline.
        client = ssl.create_default_context(cadata=pki.ca_pem.decode())
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
        writer.write(b"GET / HTTP/1.1\r\n")
        await writer.drain()
        assert await closed_by_server(reader) == b""
        assert guard.tally.cut[Phase.HEADER] == 2  # the handshake, then the header: one deadline
        writer.close()


async def test_over_tls_a_connection_beyond_the_cap_is_dropped_before_its_handshake(tmp_path: Path) -> None:
    pki = make_pki(server_names=("127.0.0.1",))
    (tmp_path / "tls.crt").write_bytes(pki.server_pem)
    (tmp_path / "tls.key").write_bytes(pki.server_key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    limits = ServerLimits(header_timeout_s=PATIENCE_S, max_connections=8, max_connections_per_peer=2)
    async with served(limits, tls=context) as (port, guard):
        # Handshakes not even begun are counted: the cap holds before any TLS state exists.
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        for _ in range(50):
            if guard.open == 2:
                break
            await asyncio.sleep(0.02)
        client = ssl.create_default_context(cadata=pki.ca_pem.decode())
        with pytest.raises((ConnectionError, ssl.SSLError)):
            await asyncio.open_connection("127.0.0.1", port, ssl=client)
        assert guard.tally.refused_peer == 1
        for _, w in held:
            w.close()


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="header_timeout_s"):
        ServerLimits(header_timeout_s=0)
    with pytest.raises(ValueError, match="per-peer cap"):
        ServerLimits(max_connections=4, max_connections_per_peer=5)


async def test_a_tls_handshake_that_fails_unexpectedly_is_logged_with_its_servers_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    pki = make_pki(server_names=("127.0.0.1",))
    (tmp_path / "tls.crt").write_bytes(pki.server_pem)
    (tmp_path / "tls.key").write_bytes(pki.server_key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    loop = asyncio.get_running_loop()

    async def start_tls(*_: object, **__: object) -> None:
        raise RuntimeError("the TLS layer broke")

    async with served(SHORT, tls=context) as (port, _):
        monkeypatch.setattr(loop, "start_tls", start_tls)
        with caplog.at_level(logging.ERROR, logger="podmortem.background"):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            assert await closed_by_server(reader) == b""  # the header deadline ends it
            writer.close()
    assert "podmortem-test-tls-handshake failed: RuntimeError: the TLS layer broke" in caplog.text
