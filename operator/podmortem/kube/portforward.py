"""A port of a pod reached through the API server, as ``kubectl port-forward`` reaches it.

The API server's ``pods/{name}/portforward`` subresource, upgraded to a WebSocket with the
``v4.channel.k8s.io`` subprotocol (the kubelet's own WebSocket port-forward, which the API server
passes through to it): one WebSocket carries one TCP connection to one port. Every binary message
starts with its channel's byte: channel 0 is the data, channel 1 the kubelet's error text; the first
two bytes the kubelet sends on each channel are the port (little-endian), not data.

:func:`local_port` listens on 127.0.0.1 and opens one WebSocket for each connection accepted there,
so any HTTP client reaches the pod's port as if it were local. The caller's own credentials open
each WebSocket: the API server decides (``create`` and ``get`` on ``pods/portforward`` in the pod's
namespace), nothing is set up by hand. The first WebSocket is opened before the listener is handed
out, so a refusal or a missing pod is a :class:`PortForwardError` with the API server's reason, not
a connection the HTTP client sees reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from podmortem.background import Background
from podmortem.errors import PodmortemError
from podmortem.kube.read_at_most import read_at_most

if TYPE_CHECKING:
    import aiohttp

    from podmortem.kube.config import ClusterAccess
    from podmortem.kube.session import ApiSession

#: The kubelet's WebSocket port-forward protocol, binary framing.
PROTOCOL = "v4.channel.k8s.io"
DATA_CHANNEL = 0
ERROR_CHANNEL = 1
#: Bytes read from the local connection per WebSocket message (bounded by bytes, not by lines).
READ_BYTES = 64 * 1024
#: The largest WebSocket message taken from the API server (the kubelet sends each read of the pod's
#: socket as a message of its own, far smaller; this bounds a misbehaving peer).
MESSAGE_MAX = 4 * 1024 * 1024
#: Error text kept per forward (what the kubelet said went wrong), for the message of a failed read.
ERROR_TEXT_MAX = 4096


class PortForwardError(PodmortemError):
    """The API server refused the port-forward or the pod's port could not be reached: the reason."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Forward:
    """The open forward: where it listens locally, and what the kubelet reported as errors."""

    port: int
    errors: list[str] = field(default_factory=list)

    def error_text(self) -> str:
        return "; ".join(self.errors)


def _reason(status: int, body: str) -> str:
    """The API server's ``Status.message`` of a refused upgrade, else its body's first line."""
    try:
        message = json.loads(body).get("message")
    except (ValueError, AttributeError):
        message = None
    text = message or (body.strip().splitlines() or [""])[0]
    return f"HTTP {status}: {text[:500]}" if text else f"HTTP {status}"


async def _open(api: ApiSession, *, namespace: str, pod: str, port: int) -> aiohttp.ClientWebSocketResponse:
    import aiohttp

    path = f"/api/v1/namespaces/{namespace}/pods/{pod}/portforward"
    try:
        return await api.websocket(path, query={"ports": str(port)}, protocols=(PROTOCOL,),
                                   max_msg_size=MESSAGE_MAX)
    except aiohttp.WSServerHandshakeError as exc:
        # The handshake's answer body is not kept by aiohttp: ask again plainly for the reason.
        status = exc.status
        body = ""
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with api.response("GET", path, query={"ports": str(port)},
                                    client_timeout=aiohttp.ClientTimeout(total=10)) as resp:
                status = resp.status
                body = (await read_at_most(resp.content, 8192)).decode("utf-8", "replace")
        raise PortForwardError(f"port-forward to pod {namespace}/{pod} port {port}: "
                               f"{_reason(status, body)}", status=exc.status) from None


async def _pump(ws: aiohttp.ClientWebSocketResponse, reader: asyncio.StreamReader,
                writer: asyncio.StreamWriter, forward: Forward) -> None:
    """Bytes both ways between one local connection and one WebSocket, until either side closes."""
    import aiohttp

    async def upstream() -> None:
        with contextlib.suppress(ConnectionError, OSError, aiohttp.ClientError):
            while data := await reader.read(READ_BYTES):
                await ws.send_bytes(bytes([DATA_CHANNEL]) + data)

    async def downstream() -> None:
        with contextlib.suppress(ConnectionError, OSError, aiohttp.ClientError):
            await _downstream()

    async def _downstream() -> None:
        skip = {DATA_CHANNEL: 2, ERROR_CHANNEL: 2}  # each channel opens with the port number
        async for msg in ws:
            if msg.type is not aiohttp.WSMsgType.BINARY or not msg.data:
                continue
            channel, data = msg.data[0], msg.data[1:]
            if skip.get(channel, 0):
                cut = min(skip[channel], len(data))
                skip[channel] -= cut
                data = data[cut:]
            if not data:
                continue
            if channel == DATA_CHANNEL:
                writer.write(data)
                await writer.drain()
            elif channel == ERROR_CHANNEL and sum(map(len, forward.errors)) < ERROR_TEXT_MAX:
                forward.errors.append(data.decode("utf-8", "replace")[:ERROR_TEXT_MAX])

    tasks = Background("portforward")
    both = (tasks.start(upstream(), name="up"), tasks.start(downstream(), name="down"))
    try:
        await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await tasks.close()
        await ws.close()
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()


@contextlib.asynccontextmanager
async def local_port(access: ClusterAccess, *, namespace: str, pod: str, port: int
                     ) -> AsyncIterator[Forward]:
    """Listen on 127.0.0.1 (a free port) and forward each connection to ``pod``'s ``port``.

    Raises :class:`PortForwardError` at once when the API server refuses the first WebSocket.
    """
    from podmortem.kube.session import ApiSession

    api = ApiSession(access)
    pumps: set[asyncio.Task[Any]] = set()
    try:
        first: list[aiohttp.ClientWebSocketResponse] = [
            await _open(api, namespace=namespace, pod=pod, port=port)]
        forward = Forward(port=0)

        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            try:
                ws = first.pop() if first else await _open(api, namespace=namespace, pod=pod, port=port)
            except PortForwardError as exc:
                forward.errors.append(str(exc))
                writer.close()
                return
            pumps.add(task)
            try:
                await _pump(ws, reader, writer, forward)
            except asyncio.CancelledError:
                return  # the listener is closing (this task is asyncio's, for one accepted connection)
            finally:
                pumps.discard(task)

        server = await asyncio.start_server(accepted, "127.0.0.1", 0)
        try:
            forward.port = int(server.sockets[0].getsockname()[1])
            yield forward
        finally:
            server.close()
            for task in list(pumps):
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            await server.wait_closed()
            for ws in first:
                await ws.close()
    finally:
        await api.close()
