"""Requests aiohttp's parser refuses, and the check that each server answers them with the safe headers.

aiohttp answers these 400 itself, before any application, middleware or response signal sees them
(`podmortem.serving_limits.SafeErrorsHandler`). The 400's text quotes the request's bytes: sniffed
into HTML by a browser it would be a page of the sender's making.
"""

from __future__ import annotations

import asyncio
import ssl

#: Far longer than any answer takes: how long the check waits before calling a hang a failure.
PATIENCE_S = 20.0

MALFORMED = {
    "bad request line": b"GET / HTTP/1.1 junk\r\n\r\n",
    "header too long": b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n",
    "invalid header": b"GET / HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n",
}


async def _answer(port: int, request: bytes, tls: ssl.SSLContext | None) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
    writer.write(request)
    chunks = []
    try:
        async with asyncio.timeout(PATIENCE_S):
            while chunk := await reader.read(65536):
                chunks.append(chunk)
    except (ConnectionResetError, ssl.SSLError):  # closed at once after the answer
        pass
    writer.close()
    return b"".join(chunks)


async def assert_parser_errors_say_no_store_and_nosniff(port: int, tls: ssl.SSLContext | None = None) -> None:
    """Each of `MALFORMED`, sent raw to ``port`` (over ``tls`` if given), is answered 400 with both
    ``Cache-Control: no-store`` and ``X-Content-Type-Options: nosniff``."""
    for what, request in MALFORMED.items():
        answer = await _answer(port, request, tls)
        head = answer.partition(b"\r\n\r\n")[0] + b"\r\n"
        assert head.split(b" ", 2)[1:2] == [b"400"], (what, answer[:300])
        assert b"\r\nCache-Control: no-store\r\n" in head, (what, head)
        assert b"\r\nX-Content-Type-Options: nosniff\r\n" in head, (what, head)
