"""`podmortem.kube.portforward` against a scripted API server speaking the kubelet's WebSocket
port-forward protocol (``v4.channel.k8s.io``): the port numbers each channel opens with are not data,
however the messages cut them; each local connection is a WebSocket of its own; the kubelet's error
text is kept; a refused upgrade is the API server's reason. Against the real API server and kwok:
tests/controlplane/test_logs_cli_real.py.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import WSMsgType, web

from podmortem.kube import portforward
from podmortem.kube.config import ClusterAccess


@dataclass
class Script:
    """What the scripted server saw, per WebSocket."""

    upgrades: list[dict[str, str]] = field(default_factory=list)


SCRIPT = web.AppKey("script", Script)


async def portforward_handler(request: web.Request) -> web.StreamResponse:
    script = request.app[SCRIPT]
    if request.match_info["pod"] == "forbidden":
        return web.json_response({"kind": "Status", "code": 403, "message":
                                  'pods "forbidden" is forbidden: User "u" cannot create resource '
                                  '"pods/portforward"'}, status=403)
    ws = web.WebSocketResponse(protocols=(portforward.PROTOCOL,))
    await ws.prepare(request)
    script.upgrades.append({"ports": request.query.get("ports", ""),
                            "authorization": request.headers.get("Authorization", ""),
                            "protocol": ws.ws_protocol or ""})
    port = struct.pack("<H", int(request.query["ports"]))
    # The port prefix cut across messages, and the second half together with data.
    await ws.send_bytes(b"\x00" + port[:1])
    await ws.send_bytes(b"\x01" + port)
    await ws.send_bytes(b"\x00" + port[1:] + b"ready:")
    async for msg in ws:
        if msg.type is not WSMsgType.BINARY:
            continue
        channel, data = msg.data[0], msg.data[1:]
        assert channel == 0
        if data == b"fail":
            await ws.send_bytes(b"\x01" + b"error forwarding port: connection refused")
            break
        await ws.send_bytes(b"\x00" + data.upper())
    await ws.close()
    return ws


@pytest.fixture
async def server() -> AsyncIterator[tuple[Script, str]]:
    app = web.Application()
    app[SCRIPT] = script = Script()
    app.router.add_get("/api/v1/namespaces/{ns}/pods/{pod}/portforward", portforward_handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield script, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def exchange(port: int, data: bytes, *, expect: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        got = b""
        while len(got) < expect:
            piece = await asyncio.wait_for(reader.read(1024), 5)
            if not piece:
                break
            got += piece
        return got
    finally:
        writer.close()
        await writer.wait_closed()


async def test_each_connection_is_a_websocket_and_port_prefixes_are_not_data(
    server: tuple[Script, str],
) -> None:
    script, url = server
    access = ClusterAccess(server=url, authorization="Bearer user-token")
    async with portforward.local_port(access, namespace="ns", pod="p", port=8080) as forward:
        assert await exchange(forward.port, b"hello", expect=11) == b"ready:HELLO"
        assert await exchange(forward.port, b"again", expect=11) == b"ready:AGAIN"
        assert forward.errors == []
    assert script.upgrades == [{"ports": "8080", "authorization": "Bearer user-token",
                                "protocol": portforward.PROTOCOL}] * 2


async def test_the_kubelets_error_text_is_kept(server: tuple[Script, str]) -> None:
    _, url = server
    async with portforward.local_port(ClusterAccess(server=url), namespace="ns", pod="p", port=80) as forward:
        assert await exchange(forward.port, b"fail", expect=7) == b"ready:"  # then closed
        await asyncio.sleep(0.05)
        assert forward.error_text() == "error forwarding port: connection refused"


async def test_a_refused_upgrade_is_the_api_servers_reason(server: tuple[Script, str]) -> None:
    _, url = server
    with pytest.raises(portforward.PortForwardError) as caught:
        async with portforward.local_port(ClusterAccess(server=url), namespace="ns", pod="forbidden",
                                          port=80):
            pass
    assert caught.value.status == 403
    assert str(caught.value) == ('port-forward to pod ns/forbidden port 80: HTTP 403: pods "forbidden" is '
                                 'forbidden: User "u" cannot create resource "pods/portforward"')
