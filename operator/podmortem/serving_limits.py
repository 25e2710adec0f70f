"""What every HTTP server of podmortem bounds: how long a client may take, and how many connections it holds.

The admission webhook is open to every pod by design, the log server to every user of the
cluster, the agent to the node's network, and the probes to whoever reaches the pod. aiohttp on
its own waits for a request's header as long as its keep-alive timeout (an hour by default), for
a body as long as the client keeps sending, and accepts every connection: 1,000 connections that
send one byte every 5 s held +196 MB and +1,000 descriptors in the operator for as long as they
liked. Here each server gets, in one place:

* a header deadline: a request line and headers complete within ``header_timeout_s`` of the
  connection (or of the first byte after an idle pause), and a TLS handshake within the same;
* a body deadline: the whole body within ``body_timeout_s`` of the header;
* an idle deadline: a kept-alive connection that sends nothing for ``idle_timeout_s`` is closed;
* connection caps, per peer address and in total: beyond them a connection gets a 503 and is
  closed at once, so one client cannot take the room every other client needs;
* ``Cache-Control: no-store`` and ``X-Content-Type-Options: nosniff`` on every response the
  application makes, errors included (an error text must not be cached by a proxy, nor sniffed
  into HTML by a browser), and on those aiohttp makes itself for a request it cannot parse (a bad
  request line, a header too long, an invalid header: :class:`SafeErrorsHandler`), which no
  handler or response signal of the application ever sees.

A deadline that passes aborts the connection: a client that sends too slowly gets nothing more
(it would not read an answer at the same pace anyway). While a handler runs (a followed log for
hours), no deadline of this module applies; the handler bounds its own writes.

Use: :func:`install` on the application before it starts, then :func:`runner` and :func:`start`
instead of ``web.AppRunner`` and ``web.TCPSite``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from podmortem.background import Background
from podmortem.connection_limits import ServerLimits

__all__ = ["GUARD", "SAFE_HEADERS", "ConnectionGuard", "GuardedSite", "Phase", "ServerLimits", "install",
           "runner"]

logger = logging.getLogger(__name__)


#: Headers every response of a guarded application gets unless its handler set them.
SAFE_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}

#: What a connection beyond a cap gets before it is closed (no request is read).
REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n"
    b"Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\nContent-Length: 30\r\n\r\n"
    b"too many connections; retry.\r\n"
)


class Phase(enum.Enum):
    """Where a connection is in its request cycle, and so which deadline runs."""

    HEADER = "header"  # waiting for a complete request header
    BODY = "body"  # the header is in; the body is still arriving
    RUNNING = "running"  # a handler runs with the whole request: no deadline here
    IDLE = "idle"  # between requests, nothing received yet


@dataclass
class Tally:
    """Connections a guard refused or cut, by reason (for tests, benches and logs)."""

    refused_total: int = 0
    refused_peer: int = 0
    cut: dict[Phase, int] = field(default_factory=lambda: dict.fromkeys(Phase, 0))


class ConnectionGuard:
    """The connections of one server: counted per peer and in total, each with its deadline."""

    def __init__(self, limits: ServerLimits, *, name: str) -> None:
        self.limits = limits
        self.name = name
        #: The TLS handshakes in progress (each cancelled when its connection is lost).
        self.tasks = Background(name.replace(" ", "-"))
        self.open = 0
        self.by_peer: dict[str, int] = {}
        self.tally = Tally()
        self._watched: dict[Any, GuardedConnection] = {}

    def admit(self, peer: str) -> bool:
        """Count a new connection from ``peer``; False (not counted) beyond a cap."""
        if self.open >= self.limits.max_connections:
            self.tally.refused_total += 1
            return False
        mine = self.by_peer.get(peer, 0)
        if mine >= self.limits.max_connections_per_peer:
            self.tally.refused_peer += 1
            return False
        self.open += 1
        self.by_peer[peer] = mine + 1
        return True

    def release(self, peer: str) -> None:
        self.open -= 1
        left = self.by_peer[peer] - 1
        if left:
            self.by_peer[peer] = left
        else:
            del self.by_peer[peer]  # a peer that left takes no room in the map

    def watch(self, transport: Any, connection: GuardedConnection | None) -> None:
        if connection is None:
            self._watched.pop(transport, None)
        else:
            self._watched[transport] = connection

    def connection_of(self, transport: Any) -> GuardedConnection | None:
        return self._watched.get(transport)


def _peer_of(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple | list) and peer:
        return str(peer[0])
    return str(peer or "unknown")


class GuardedConnection(asyncio.Protocol):
    """One connection: aiohttp's handler inside, the caps and deadlines around it."""

    def __init__(self, guard: ConnectionGuard, inner: RequestHandler, *,
                 tls: ssl.SSLContext | None = None) -> None:
        self._guard = guard
        self._inner = inner
        #: Served over TLS: the handshake is made here, after the caps let the connection in, so a
        #: refused one costs no TLS state (~256 KiB each in asyncio) and a handshake counts as open.
        self._tls = tls
        self._handshake: asyncio.Task[None] | None = None
        self._transport: asyncio.Transport | None = None
        #: aiohttp's handler has the connection (after the handshake, over TLS).
        self._serving = False
        #: Bytes the TLS layer decrypted between the handshake's end and the handler taking over
        #: (the same turn of the loop: a request sent right after the handshake).
        self._early: list[bytes] = []
        self._peer = ""
        self._phase = Phase.HEADER
        self._timer: asyncio.TimerHandle | None = None
        self._payload: Any = None
        self._in_request = False

    @property
    def phase(self) -> Phase:
        return self._phase

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        peer = _peer_of(transport)
        if not self._guard.admit(peer):
            logger.debug("%s: refused a connection from %s (%d open, %d from it)", self._guard.name, peer,
                         self._guard.open, self._guard.by_peer.get(peer, 0))
            if self._tls is None:
                transport.write(REFUSED)
                transport.close()
            else:  # no handshake, no answer: nothing to spend on it
                transport.abort()
            return
        self._transport = transport
        self._peer = peer
        self._arm(Phase.HEADER, self._guard.limits.header_timeout_s)  # the handshake's deadline too
        if self._tls is None:
            self._serve(transport)
        else:
            transport.pause_reading()  # not a byte read before the TLS layer takes the connection
            self._handshake = self._guard.tasks.start(self._start_tls(transport, self._tls),
                                                      name="tls-handshake")

    def _serve(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._serving = True
        self._guard.watch(transport, self)
        self._inner.connection_made(transport)
        early, self._early = self._early, []
        for data in early:
            self.data_received(data)

    async def _start_tls(self, raw: asyncio.Transport, context: ssl.SSLContext) -> None:
        try:
            secured = await asyncio.get_running_loop().start_tls(
                raw, self, context, server_side=True,
                ssl_handshake_timeout=self._guard.limits.header_timeout_s)
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError) as exc:
            logger.debug("%s: TLS handshake with %s failed: %r", self._guard.name, self._peer, exc)
            raw.abort()  # connection_lost follows, and counts the connection out
            return
        finally:
            self._handshake = None
        if secured is None or self._transport is not raw:  # closed while the handshake ended
            return
        self._serve(secured)

    def data_received(self, data: bytes) -> None:
        if self._transport is None:
            return
        if not self._serving:
            self._early.append(data)
            return
        if self._phase is Phase.IDLE:
            self._arm(Phase.HEADER, self._guard.limits.header_timeout_s)
        self._inner.data_received(data)

    def eof_received(self) -> None:
        if self._serving and self._transport is not None:
            self._inner.eof_received()  # None: the transport closes its side, as aiohttp's own does

    def pause_writing(self) -> None:
        if self._serving and self._transport is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._serving and self._transport is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        transport = self._transport
        if transport is None:
            return
        self._transport = None
        self._cancel()
        self._guard.release(self._peer)
        if self._handshake is not None:
            self._handshake.cancel()
        if not self._serving:  # lost before or during the handshake: aiohttp never saw it
            return
        self._guard.watch(transport, None)
        self._inner.connection_lost(exc)

    # --- the request cycle, told by the middleware ------------------------------------------------

    def request_started(self, payload: Any) -> None:
        """The header is in: the body's deadline runs while it is still arriving."""
        self._in_request = True
        self._payload = payload
        if payload.is_eof():
            self._arm(Phase.RUNNING, None)
        else:
            self._arm(Phase.BODY, self._guard.limits.body_timeout_s)

    def request_finished(self) -> None:
        """The handler returned: wait for the next request, or for the rest of an unread body."""
        self._in_request = False
        if self._payload is None or self._payload.is_eof():
            self._payload = None
            self._arm(Phase.IDLE, self._guard.limits.idle_timeout_s)
        # else: aiohttp reads and drops the rest of the body; the body deadline still runs.

    # --- deadlines ---------------------------------------------------------------------------------

    def _arm(self, phase: Phase, seconds: float | None) -> None:
        self._cancel()
        self._phase = phase
        if seconds is not None and self._transport is not None:
            self._timer = asyncio.get_running_loop().call_later(seconds, self._expired)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if self._transport is None:
            return
        if self._phase is Phase.BODY and self._payload is not None and self._payload.is_eof():
            if self._in_request:  # the body came in time; the handler is still at work
                self._arm(Phase.RUNNING, None)
            else:
                self._payload = None
                self._arm(Phase.IDLE, self._guard.limits.idle_timeout_s)
            return
        if self._phase is Phase.RUNNING:
            return
        self._guard.tally.cut[self._phase] += 1
        logger.debug("%s: closed a connection from %s (%s deadline)", self._guard.name, self._peer,
                     self._phase.value)
        self._transport.abort()


GUARD = web.AppKey("podmortem_connection_guard", ConnectionGuard)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _request_cycle(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Tells the request's connection that its header is in, and when its handler is done."""
    connection = request.app[GUARD].connection_of(request.transport)
    if connection is None:  # served without `start` (aiohttp's test client): no deadlines to tell
        return await handler(request)
    connection.request_started(request.content)
    try:
        return await handler(request)
    finally:
        connection.request_finished()


async def _safe_headers(_: web.Request, response: web.StreamResponse) -> None:
    for name, value in SAFE_HEADERS.items():
        response.headers.setdefault(name, value)


def install(app: web.Application, limits: ServerLimits, *, name: str) -> ConnectionGuard:
    """Guard ``app`` (before it starts): the deadlines' middleware, the safe headers, and its guard.

    The middleware goes first, so that it sees each request before the application's own.
    """
    guard = ConnectionGuard(limits, name=name)
    app[GUARD] = guard
    app.middlewares.insert(0, _request_cycle)
    app.on_response_prepare.append(_safe_headers)
    return guard


def runner(app: web.Application, **kwargs: Any) -> web.AppRunner:
    """``web.AppRunner`` for a guarded app: aiohttp's own keep-alive cut set to the idle deadline, and
    an unread body of a finished request drained for at most the body deadline."""
    limits = app[GUARD].limits
    return web.AppRunner(app, access_log=None, keepalive_timeout=limits.idle_timeout_s,
                         lingering_time=limits.body_timeout_s, **kwargs)


class SafeErrorsHandler(RequestHandler):
    """aiohttp's handler of one connection, its own error answers carrying :data:`SAFE_HEADERS`.

    A request aiohttp cannot parse (a bad request line, a header over its limit, an invalid
    header) is answered 400 by `handle_error` before any application sees it: no middleware runs
    and ``on_response_prepare`` is not sent (the request was never routed), so only here can these
    answers get the headers every other answer has.
    """

    __slots__ = ()

    def handle_error(self, request: BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        response = super().handle_error(request, status, exc, message)
        for name, value in SAFE_HEADERS.items():
            response.headers.setdefault(name, value)
        return response


def _handler(server: web.Server) -> SafeErrorsHandler:
    """What ``server()`` makes for a connection (``web.Server.__call__``), as a `SafeErrorsHandler`."""
    return SafeErrorsHandler(server, loop=asyncio.get_running_loop(), **server._kwargs)


class GuardedSite(web.BaseSite):
    """``web.TCPSite`` whose connections go through the app's :class:`ConnectionGuard`: counted when
    accepted, before any TLS handshake, which is then bounded by the header deadline."""

    def __init__(self, run: web.AppRunner, host: str, port: int, *,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        super().__init__(run, ssl_context=ssl_context)
        self._guard = run.app[GUARD]
        self._host = host
        self._port = port

    @property
    def name(self) -> str:
        return f"{'https' if self._ssl_context else 'http'}://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        guard = self._guard

        tls = self._ssl_context

        def connection() -> GuardedConnection:
            return GuardedConnection(guard, _handler(server), tls=tls)

        # Plain TCP: each connection makes its own TLS handshake once the caps let it in.
        self._server = await asyncio.get_running_loop().create_server(
            connection, self._host, self._port, backlog=self._backlog)


async def start(run: web.AppRunner, *, host: str, port: int,
                ssl_context: ssl.SSLContext | None = None) -> GuardedSite:
    """Listen on ``host:port`` (0: a free port, see ``run.addresses``) with the app's guard."""
    site = GuardedSite(run, host, port, ssl_context=ssl_context)
    await site.start()
    return site
