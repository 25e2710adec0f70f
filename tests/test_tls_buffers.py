"""`tls_buffers.shrink`: a TLS connection made after it reads into a 16 KiB buffer, not asyncio's
256 KiB one, and what it carries arrives whole."""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from podmortem import tls_buffers
from podmortem_demo.emulated.tls import make_pki


@pytest.fixture
def restored() -> Iterator[None]:
    before = asyncio.sslproto.SSLProtocol.max_size
    yield
    asyncio.sslproto.SSLProtocol.max_size = before


def test_shrink_sets_the_read_size_and_says_what_it_was(restored: None) -> None:
    assert tls_buffers.shrink() == 256 * 1024  # CPython's own
    assert asyncio.sslproto.SSLProtocol.max_size == tls_buffers.READ_BUFFER_BYTES == 16 * 1024


async def test_a_tls_connection_made_after_holds_the_small_buffer_and_reads_everything(
        restored: None, tmp_path: Path) -> None:
    pki = make_pki()
    payload = bytes(range(256)) * 4096 * 2  # 2 MiB: many records, many reads

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(payload)
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    tls_buffers.shrink()
    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=pki.server_context(tmp_path / "server"))
    port = server.sockets[0].getsockname()[1]
    context = ssl.create_default_context(cadata=pki.ca_pem.decode())
    async with server:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                       server_hostname="localhost")
        buffer = len(writer.transport._ssl_protocol._ssl_buffer)  # type: ignore[attr-defined]
        got = await reader.read(-1)
        writer.close()
        await writer.wait_closed()
    assert buffer == 16 * 1024
    assert got == payload
