"""The one way podmortem reaches the API server: credentials kept fresh, requests paced, answers bounded.

Each caller that spoke to the API server on its own had its own share of what every request needs:
the pod watch refreshed refused credentials but had no pace, the log followers had a pace but a
plugin's expired token waited for kubernetes_asyncio, the CLI read whole answers. An `ApiSession`
carries all of it, once:

* **credentials** from a :class:`~podmortem.kube.connection.Connection` (a token file re-read each
  time, a plugin's credentials reused for a while): a request answered ``401`` is sent once more
  with credentials made afresh, as client-go does after a token rotation;
* **a rate limit** (:class:`~podmortem.kube.rate_limit.TokenBucket`, client-go's QPS and burst),
  shared by every request of the session;
* **byte budgets**: a JSON answer over ``max_body_bytes`` is an error, never read whole, and an error
  answer is read for at most :data:`MAX_ERROR_BYTES` (enough to say what went wrong);
* one aiohttp session (one connector) with the kubeconfig's TLS, ``tls-server-name`` and proxy,
  made again only when a plugin's new credentials bring a new TLS context.

Streams (a watch, a log) take the response itself (`ApiSession.response`) and bound what they
read as they go.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self

from podmortem.kube import clients
from podmortem.kube.api import KubeError
from podmortem.kube.connection import Connection
from podmortem.kube.rate_limit import TokenBucket
from podmortem.kube.read_at_most import read_at_most

if TYPE_CHECKING:
    import aiohttp

    from podmortem.kube.config import ClusterAccess

#: Bytes of a JSON answer (`ApiSession.request`) by default: etcd's objects are at most 1.5 MiB,
#: and a list is asked for in pages.
MAX_BODY_BYTES = 16 * 1024 * 1024
#: Bytes of an error answer read: enough to say what went wrong, never a whole log or list.
MAX_ERROR_BYTES = 4096
#: Seconds for one JSON request by default.
TIMEOUT_S = 10.0

Query = Mapping[str, str] | Sequence[tuple[str, str]]


class ApiSession:
    """Requests to the API server that ``connection`` reaches; use as an async context manager.

    ``limit``: the requests' pace (None: none), shareable between sessions that share one budget.
    ``force_close``: no idle connection is kept, so each socket open is a request's (the log
    followers count theirs). ``max_connections``: connections open at once, idle ones included
    (0: no cap); a request beyond it waits for one. ``auto_decompress``: as aiohttp's (a log
    stream is read raw).
    """

    def __init__(self, connection: Connection | ClusterAccess, *, limit: TokenBucket | None = None,
                 max_body_bytes: int = MAX_BODY_BYTES, timeout_s: float = TIMEOUT_S,
                 force_close: bool = False, auto_decompress: bool = True, max_connections: int = 0) -> None:
        self.connection = connection if isinstance(connection, Connection) else Connection(connection)
        self.limit = limit
        self.max_body_bytes = max_body_bytes
        self.timeout_s = timeout_s
        self._force_close = force_close
        self._auto_decompress = auto_decompress
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        #: The connection settings the session was made for (`_reach`).
        self._made_for: tuple[object, ...] | None = None

    @property
    def server(self) -> str:
        return self.connection.access.server

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        session, self._session, self._made_for = self._session, None, None
        if session is not None:
            await session.close()

    async def _session_for(self, access: ClusterAccess) -> aiohttp.ClientSession:
        made_for = _reach(access)
        if self._session is None or self._made_for != made_for:
            # Another server or other TLS material (a plugin's new client certificate): the
            # streams on the old session are cut, and their owners resume them, as after any cut.
            await self.close()
            self._session = clients.aiohttp_session(access, headers=False, force_close=self._force_close,
                                                    auto_decompress=self._auto_decompress,
                                                    max_connections=self._max_connections)
            self._made_for = made_for
        return self._session

    async def _credentials(self, *, fresh: bool) -> ClusterAccess:
        access = self.connection.access
        if not access.plugin and not fresh:
            return access  # its headers() re-read a token file once it changed: no read per request
        return await self.connection.credentials(fresh=fresh)

    async def send(self, method: str, path: str, *, query: Query | None = None, body: bytes | None = None,
                   headers: Mapping[str, str] | None = None,
                   client_timeout: aiohttp.ClientTimeout | None = None) -> aiohttp.ClientResponse:
        """Send one request, paced, with current credentials (fresh ones, once, after a 401).

        The response is returned unread, whatever its status: the caller releases it (or use
        `response`). A request that got no answer raises aiohttp's error or ``TimeoutError``.
        """
        import aiohttp

        if self.limit is not None:
            await self.limit.acquire()
        params = list(query.items()) if isinstance(query, Mapping) else list(query or [])
        if client_timeout is None:
            client_timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        fresh = False
        while True:
            access = await self._credentials(fresh=fresh)
            session = await self._session_for(access)
            response = await session.request(
                method, access.server + path, params=params, data=body,
                headers={**access.headers(), **(headers or {})}, timeout=client_timeout,
            )
            if response.status != 401 or fresh:
                return response
            response.release()  # refused: credentials made now (a rotated token, a plugin run again)
            fresh = True

    async def websocket(self, path: str, *, query: Query | None = None, protocols: Sequence[str] = (),
                        max_msg_size: int = 4 * 1024 * 1024) -> aiohttp.ClientWebSocketResponse:
        """Open a WebSocket (a port-forward, an exec), paced, credentials as in `send`.

        A refused handshake raises aiohttp's ``WSServerHandshakeError`` (its status says why).
        """
        import aiohttp

        if self.limit is not None:
            await self.limit.acquire()
        params = list(query.items()) if isinstance(query, Mapping) else list(query or [])
        fresh = False
        while True:
            access = await self._credentials(fresh=fresh)
            session = await self._session_for(access)
            try:
                return await session.ws_connect(access.server + path, params=params, protocols=protocols,
                                                headers=access.headers(), autoping=True,
                                                max_msg_size=max_msg_size)
            except aiohttp.WSServerHandshakeError as exc:
                if exc.status != 401 or fresh:
                    raise
                fresh = True

    @contextlib.asynccontextmanager
    async def response(self, method: str, path: str, *, query: Query | None = None,
                       body: bytes | None = None, headers: Mapping[str, str] | None = None,
                       client_timeout: aiohttp.ClientTimeout | None = None,
                       ) -> AsyncIterator[aiohttp.ClientResponse]:
        """`send`, the response released when the block ends (its connection kept for the next
        request only if its body was read to the end, as aiohttp's own ``async with``)."""
        response = await self.send(method, path, query=query, body=body, headers=headers,
                                   client_timeout=client_timeout)
        try:
            yield response
        finally:
            response.release()

    async def request(self, method: str, path: str, *, query: Query | None = None, body: Any = None,
                      content_type: str = "application/json", timeout_s: float | None = None,
                      max_body_bytes: int | None = None) -> dict[str, Any]:
        """One JSON request: the answer as a dict (``{"value": ...}`` for a non-object, ``{}`` for none).

        An error status raises `KubeError` (its ``reason`` the Status's, its body cut at
        :data:`MAX_ERROR_BYTES`); so does an answer over ``max_body_bytes`` (default: the session's).
        """
        import aiohttp

        data = None if body is None else json.dumps(body).encode()
        timeout = aiohttp.ClientTimeout(total=timeout_s if timeout_s is not None else self.timeout_s)
        budget = max_body_bytes if max_body_bytes is not None else self.max_body_bytes
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        async with self.response(method, path, query=query, body=data, headers=headers,
                                 client_timeout=timeout) as response:
            if response.status >= 400:
                raise await error_of(response, f"{method} {path}")
            text = await read_at_most(response.content, budget + 1)
            if len(text) > budget:
                raise KubeError(response.status, f"{method} {path}",
                                f"the answer is over {budget} bytes; not read further")
        if not text:
            return {}
        parsed = json.loads(text)
        return parsed if isinstance(parsed, dict) else {"value": parsed}


def _reach(access: ClusterAccess) -> tuple[object, ...]:
    """What a session's connections depend on: equal for a plugin's fresh token alone, so that
    renewing a token (every few minutes) keeps the session and the streams open on it."""
    return (access.server, access.proxy, access.tls_server_name, access.insecure, access.ca_pem,
            access.ca_file, access.client_cert_pem, access.client_key_pem,
            None if access.ca_pem or access.client_cert_pem else access.ssl_context)


async def error_of(response: aiohttp.ClientResponse, what: str) -> KubeError:
    """A `KubeError` for an error answer, from at most :data:`MAX_ERROR_BYTES` of its body."""
    text = await read_at_most(response.content, MAX_ERROR_BYTES)
    reason = response.reason or what
    with contextlib.suppress(ValueError, AttributeError):
        reason = json.loads(text).get("reason") or reason
    return KubeError(response.status, str(reason), text.decode("utf-8", "replace"))
