"""The two API calls a follower needs: read a pod, open its log stream.

kubernetes_asyncio's ``read_namespaced_pod_log`` has no ``since_time`` and
sends booleans as ``True``/``False``, so log requests carry our own query
parameters, and the status is checked here and turned into the follower's
error classes. Pods are parsed as plain JSON, which skips the slow model classes.

The requests go through :class:`SessionTransport`, the followers'
:class:`~podmortem.kube.session.ApiSession` (one aiohttp session built from a
:class:`~podmortem.kube.config.ClusterAccess`; a refused token read afresh, an
``exec`` or ``auth-provider`` plugin run again, once): the CLI's path (which never
imports kubernetes_asyncio, half a second of start-up) and the operator's, and the
lightest one per stream (one shared connector, no per-request configuration objects).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

import aiohttp

from podmortem.kube.rate_limit import TokenBucket
from podmortem.kube.read_at_most import read_at_most
from podmortem.kube.session import ApiSession
from podmortem.logs import errors
from podmortem.logs.following.connection_slots import ConnectionSlots
from podmortem.logs.settings import FollowSettings
from podmortem.loop_pacer import LoopPacer

if TYPE_CHECKING:
    from podmortem.kube.config import ClusterAccess

_LOG_PATH = "/api/v1/namespaces/{namespace}/pods/{name}/log"
_POD_PATH = "/api/v1/namespaces/{namespace}/pods/{name}"
#: Enough of an error body to say what went wrong, never a whole log.
_ERROR_BODY_LIMIT = 4096
#: Streams that go on to their first read in one event-loop iteration once their answer came, at most:
#: a stream's first read stores its lines (the pod's first write makes its directories), about a
#: millisecond, and answers to many requests can come in the same iteration.
OPENS_PER_TURN = 16


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: rare from the apiserver; the back-off covers it


def _message(body: bytes, status: int) -> str:
    try:
        status_obj = json.loads(body)
        if isinstance(status_obj, dict) and status_obj.get("message"):
            return f"HTTP {status}: {status_obj['message']}"
    except ValueError:
        pass
    text = body.decode("utf-8", "replace").strip().splitlines()
    return f"HTTP {status}: {text[0][:200]}" if text else f"HTTP {status}"


def error_for(status: int, headers: Mapping[str, str], body: bytes, *, what: str) -> errors.LogApiError:
    """Classify a non-2xx answer by what the follower should do about it."""
    message = f"{what}: {_message(body, status)}"
    if status == 404:
        return errors.PodGone(message, status=status)
    if status == 429 or status >= 500:
        return errors.ApiUnavailable(message, status=status, retry_after_s=_retry_after(headers))
    if status == 400:
        return errors.LogNotReady(message, status=status)
    return errors.ApiFatal(message, status=status)


class Transport(Protocol):
    """Sends one GET to the API server and returns the response unread, whatever its status."""

    async def get(self, path: str, *, query: list[tuple[str, str]],
                  client_timeout: aiohttp.ClientTimeout) -> aiohttp.ClientResponse: ...


class SessionTransport(ApiSession):
    """The followers' `ApiSession`: a kubeconfig's server, TLS and credentials (a refused token read
    afresh once), one connector for every stream (no connection limit: each followed container
    holds one connection), no idle keep-alive connection (each socket is a request's, within the
    connection slots) and log bodies read as sent. Use as an async context manager.
    """

    def __init__(self, access: ClusterAccess, *, limit: TokenBucket | None = None) -> None:
        super().__init__(access, limit=limit, force_close=True, auto_decompress=False)

    @property
    def access(self) -> ClusterAccess:
        return self.connection.access

    async def get(self, path: str, *, query: list[tuple[str, str]],
                  client_timeout: aiohttp.ClientTimeout) -> aiohttp.ClientResponse:
        return await self.send("GET", path, query=query, client_timeout=client_timeout)


def follow_limit(settings: FollowSettings) -> TokenBucket | None:
    """The followers' pace (``api_qps``, ``api_burst``) for their `SessionTransport`: one bucket for
    every follower of the process (one API, one budget; `podmortem.kube.rate_limit`)."""
    if settings.api_qps is None:
        return None
    return TokenBucket(qps=settings.api_qps, burst=settings.api_burst)


class PodLogApi:
    """Reads pods and opens log streams through a transport (`SessionTransport`, which paces them)."""

    def __init__(self, api: Transport, *, settings: FollowSettings) -> None:
        self._transport = api
        self._settings = settings
        #: Shared by every follower of this process: at most ``max_connections`` requests open at
        #: once (None: no limit).
        self.slots = (ConnectionSlots(settings.max_connections)
                      if settings.max_connections is not None else None)
        #: Requests between their connection's opening and their answer's headers (a stream: its first
        #: read's turn), at most ``max_setups`` at once (None: no limit): they complete a few per loop
        #: iteration, not all in one.
        self._setups = asyncio.Semaphore(settings.max_setups) if settings.max_setups is not None else None
        #: Lets answered streams on to their first read `OPENS_PER_TURN` per loop iteration.
        self._opened = LoopPacer(OPENS_PER_TURN)

    def _slot(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self.slots.held() if self.slots is not None else contextlib.nullcontext()

    def _setup(self) -> contextlib.AbstractAsyncContextManager[Any]:
        return self._setups if self._setups is not None else contextlib.nullcontext()

    async def _call(
        self, path: str, *, namespace: str, name: str,
        query: list[tuple[str, str]], client_timeout: aiohttp.ClientTimeout, what: str,
    ) -> aiohttp.ClientResponse:
        path = path.format(namespace=quote(namespace, safe=""), name=quote(name, safe=""))
        try:
            response = await self._transport.get(path, query=query, client_timeout=client_timeout)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise errors.ApiUnavailable(f"{what}: {type(exc).__name__}: {exc}".rstrip(": ")) from exc
        if response.status != 200:
            try:
                body = await read_at_most(response.content, _ERROR_BODY_LIMIT)
            except (TimeoutError, aiohttp.ClientError, OSError):
                body = b""
            finally:
                response.release()
            raise error_for(response.status, response.headers, body, what=what)
        return response

    async def read_pod(self, *, namespace: str, name: str) -> dict[str, Any]:
        """The pod as a plain dict; raises :class:`errors.PodGone` on 404."""
        s = self._settings
        timeout = aiohttp.ClientTimeout(total=s.pod_read_timeout_s)
        what = f"reading pod {namespace}/{name}"
        async with self._slot():
            async with self._setup():
                response = await self._call(_POD_PATH, namespace=namespace, name=name, query=[],
                                            client_timeout=timeout, what=what)
            try:
                body = await response.read()
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                raise errors.ApiUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc
            finally:
                response.release()
        try:
            pod = json.loads(body)
        except ValueError as exc:
            raise errors.ApiUnavailable(f"{what}: the API sent invalid JSON") from exc
        if not isinstance(pod, dict):
            raise errors.ApiUnavailable(f"{what}: the API sent no object")
        return pod

    @contextlib.asynccontextmanager
    async def open_log(
        self, *, namespace: str, name: str, container: str,
        follow: bool, previous: bool = False, since_time: str | None = None,
        limit_bytes: int | None = None, tail_lines: int | None = None,
    ) -> AsyncIterator[aiohttp.StreamReader]:
        """Open one log request with ``timestamps=true``; yields the body to read in chunks."""
        s = self._settings
        query = [("container", container), ("timestamps", "true")]
        if follow:
            query.append(("follow", "true"))
        if previous:
            query.append(("previous", "true"))
        if since_time is not None:
            query.append(("sinceTime", since_time))
        if limit_bytes is not None:
            query.append(("limitBytes", str(limit_bytes)))
        if tail_lines is not None:
            query.append(("tailLines", str(tail_lines)))
        timeout = aiohttp.ClientTimeout(
            total=None, connect=s.connect_timeout_s, sock_connect=s.connect_timeout_s,
            sock_read=s.read_timeout_s,
        )
        what = f"log of {namespace}/{name}/{container}"
        async with self._slot():
            async with self._setup():
                response = await self._call(_LOG_PATH, namespace=namespace, name=name, query=query,
                                            client_timeout=timeout, what=what)
                try:
                    # Its set-up slot is held until its turn: answered streams waiting to be read
                    # must not let ever more requests go.
                    await self._opened.turn()
                except BaseException:
                    response.close()
                    raise
            try:
                yield response.content
            finally:
                # A follow stream never ends by itself: close the connection rather than drain it.
                response.close()
