"""The operator's watch of pods: list, then watch from the list's resourceVersion, one handler per pod.

Pods are the one kind with thousands of objects. kopf spent about 1 ms of the event loop on every
pod event (its causes, kwargs, loggers and per-object worker), a quarter of the operator's start-up
over 10,000 pods; this watch hands each event to the handler directly. kopf still watches the
training jobs and the foreign kinds, and runs the login and cleanup.

What it keeps from kopf's contract:

* a handler call per event, one at a time per pod (by uid); events that arrive meanwhile are
  merged into the latest one, as kopf's batching does;
* events for other pods are handled concurrently;
* a cut stream resumes from the last resourceVersion seen; ``410 Gone`` (the version is too old)
  lists again; other failures back off (1 s doubling to 30 s) and resume;
* a handler's exception is logged and never stops the watch.

Lists are paged (``limit``, ``continue``) so a 10,000-pod list is never one 100 MB body. What the
API server sends is held within a byte budget: a list page (:data:`MAX_PAGE_BYTES`, for a server
that ignores ``limit``) and each watch event (:data:`MAX_EVENT_BYTES`); a longer one is a failure
(back off, resume). As with kopf, a pod deleted while the watch was down is not reported as deleted.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from podmortem.kube import clients
from podmortem.kube.connection import Connection, list_path

logger = logging.getLogger(__name__)

#: An event line longer than this ends the stream (etcd's default object limit is 1.5 MiB).
MAX_EVENT_BYTES = 16 * 1024 * 1024
#: A list page longer than this is refused: 500 pods of 500 KiB each (pods average a few KiB).
MAX_PAGE_BYTES = 256 * 1024 * 1024

Handler = Callable[[Mapping[str, Any], bool], Awaitable[None]]
Filter = Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True)
class PodWatchSettings:
    """How the pods are listed and watched."""

    #: Pods per list page.
    page_size: int = 500
    #: The server ends each watch after this long (``timeoutSeconds``); it is then resumed.
    watch_timeout_s: int = 600
    #: First wait after a failure; it doubles up to ``backoff_max_s``.
    backoff_s: float = 1.0
    backoff_max_s: float = 30.0


class Gone(Exception):
    """The resourceVersion is too old (410): list again."""


class PerObject:
    """Runs ``handler`` for each object's events, one at a time per uid, latest event first."""

    def __init__(self, handler: Handler, *, what: str = "pod") -> None:
        self._handler = handler
        self._what = what
        self._running: dict[str, asyncio.Task[None]] = {}
        self._pending: dict[str, tuple[Mapping[str, Any], bool]] = {}

    def submit(self, uid: str, body: Mapping[str, Any], deleted: bool) -> None:
        if uid in self._running:
            self._pending[uid] = (body, deleted)  # the handler sees the latest state next
            return
        self._running[uid] = asyncio.get_running_loop().create_task(
            self._run(uid, body, deleted), name=f"podmortem-{self._what}-event-{uid}"
        )

    @property
    def busy(self) -> int:
        return len(self._running)

    async def _run(self, uid: str, body: Mapping[str, Any], deleted: bool) -> None:
        try:
            while True:
                try:
                    await self._handler(body, deleted)
                except Exception:
                    meta = body.get("metadata") or {}
                    logger.exception("handling the event of %s %s/%s failed", self._what,
                                     meta.get("namespace"), meta.get("name"))
                nxt = self._pending.pop(uid, None)
                if nxt is None:
                    return
                body, deleted = nxt
        finally:
            self._running.pop(uid, None)

    async def close(self) -> None:
        """Cancel every handler call in progress and wait for them to end."""
        self._pending.clear()
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


async def event_lines(chunks: AsyncIterator[bytes], *, limit: int = MAX_EVENT_BYTES) -> AsyncIterator[bytes]:
    """The newline-separated lines of a watch stream; a line over ``limit`` bytes raises ValueError.

    Only the new chunk is searched for a newline (the bytes held before it hold none), so a long
    event in many small chunks costs time linear in its length, not in its length times its chunks.
    """
    buffer = bytearray()
    async for chunk in chunks:
        searched = len(buffer)
        buffer += chunk
        start = 0
        while (end := buffer.find(b"\n", max(start, searched))) >= 0:
            if end > start:
                yield bytes(buffer[start:end])
            start = end + 1
        del buffer[:start]
        if len(buffer) > limit:
            raise ValueError(f"a watch event is over {limit} bytes")
    if buffer.strip():
        yield bytes(buffer)


class PodWatch:
    """Lists and watches pods at ``path`` (cluster-wide or one namespace) for as long as it runs."""

    def __init__(self, *, connection: Connection, path: str, handler: Handler, accept: Filter,
                 settings: PodWatchSettings | None = None) -> None:
        self.connection = connection
        self.path = path
        self.accept = accept
        self.settings = settings or PodWatchSettings()
        self.objects = PerObject(handler)
        #: Set once the first list has been handed out (readiness).
        self.listed = asyncio.Event()
        self._version: str | None = None

    async def run(self) -> None:
        """List and watch until cancelled; a failure backs off and resumes."""
        delay = self.settings.backoff_s
        refused = False
        try:
            while True:
                try:
                    access = await self.connection.credentials(fresh=refused)
                    refused = False
                    async with clients.aiohttp_session(access) as session:
                        if self._version is None:
                            self._version = await self._list(session, access.server)
                            self.listed.set()
                        events = await self._watch(session, access.server)
                    if events:
                        delay = self.settings.backoff_s
                    else:  # a stream cut at once, again and again, must not spin: back off
                        logger.info("pods at %s: the watch ended with no event; again in %.2f s", self.path,
                                    delay)
                        await asyncio.sleep(delay)
                        delay = min(delay * 2, self.settings.backoff_max_s)
                except Gone:
                    logger.info("pods at %s: resourceVersion %s is gone; listing again", self.path,
                                self._version)
                    self._version = None
                except Exception as exc:  # whatever it was, the watch goes on: pods must not go unseen
                    refused = isinstance(exc, aiohttp.ClientResponseError) and exc.status == 401
                    expected = isinstance(exc, (aiohttp.ClientError, TimeoutError, OSError, ValueError))
                    logger.warning("pods at %s: watch failed (%s: %s); again in %.0f s", self.path,
                                   type(exc).__name__, exc, delay, exc_info=None if expected else exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, self.settings.backoff_max_s)
        finally:
            await self.objects.close()

    def _dispatch(self, obj: Any, deleted: bool) -> None:
        if not isinstance(obj, dict):
            return
        meta = obj.get("metadata")
        uid = meta.get("uid") if isinstance(meta, dict) else None
        if not isinstance(uid, str) or not uid:
            return
        try:
            accepted = self.accept(obj)
        except Exception:  # one odd object must not stop the watch (it would resume at the same event)
            logger.exception("pods at %s: skipped the event of pod uid %s", self.path, uid[:64])
            return
        if accepted:
            self.objects.submit(uid, obj, deleted)

    async def _list(self, session: aiohttp.ClientSession, server: str) -> str:
        """Hand out every pod, page by page: the list's resourceVersion."""
        token = ""
        while True:
            params = {"limit": str(self.settings.page_size)}
            if token:
                params["continue"] = token
            async with session.get(server + self.path, params=params,
                                   headers={"Accept": "application/json"},
                                   timeout=aiohttp.ClientTimeout(total=120)) as response:
                await _raise_for(response)
                page = json.loads(await _read_bounded(response, MAX_PAGE_BYTES, what="a pod list page"))
            for item in page.get("items") or ():
                self._dispatch(item, False)
            meta = page.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                return str(meta.get("resourceVersion") or "")

    async def _watch(self, session: aiohttp.ClientSession, server: str) -> int:
        """One watch from the last version, until the server ends it: the events it brought."""
        timeout_s = self.settings.watch_timeout_s
        params = {"watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_s)}
        if self._version:
            params["resourceVersion"] = self._version
        async with session.get(server + self.path, params=params, headers={"Accept": "application/json"},
                               timeout=aiohttp.ClientTimeout(sock_read=timeout_s + 60)) as response:
            await _raise_for(response)
            events = 0
            async for line in event_lines(response.content.iter_any()):
                events += 1
                event = json.loads(line)
                kind = event.get("type")
                obj = event.get("object")
                if kind == "ERROR":
                    code = obj.get("code") if isinstance(obj, dict) else None
                    if code == 410:
                        raise Gone()
                    raise ValueError(f"watch error: {json.dumps(obj)[:300]}")
                meta = obj.get("metadata") if isinstance(obj, dict) else None
                version = meta.get("resourceVersion") if isinstance(meta, dict) else None
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._dispatch(obj, kind == "DELETED")
                if isinstance(version, str) and version:
                    self._version = version  # BOOKMARK events carry only this
        return events


class PodWatches:
    """One `PodWatch` per watched namespace (or one cluster-wide), started and stopped together."""

    def __init__(self, *, connection: Connection, namespaces: Sequence[str], handler: Handler,
                 accept: Filter, settings: PodWatchSettings | None = None) -> None:
        self.watches = [
            PodWatch(connection=connection, path=list_path("", "v1", "pods", namespace or None),
                     handler=handler, accept=accept, settings=settings)
            for namespace in (namespaces or ("",))
        ]
        self._task: asyncio.Task[Any] | None = None

    @property
    def listed(self) -> bool:
        """Every watch has handed out its first list."""
        return all(w.listed.is_set() for w in self.watches)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="podmortem-pod-watch")

    async def _run(self) -> None:
        await asyncio.gather(*(w.run() for w in self.watches))

    async def stop(self) -> None:
        """Stop watching, and cancel (and wait for) the handler calls in progress. Idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def _read_bounded(response: aiohttp.ClientResponse, limit: int, *, what: str) -> bytes:
    """The whole body, or ValueError as soon as it is over ``limit`` bytes."""
    body = bytearray()
    async for chunk in response.content.iter_any():
        body += chunk
        if len(body) > limit:
            raise ValueError(f"{what} is over {limit} bytes; lower the page size")
    return bytes(body)


async def _raise_for(response: aiohttp.ClientResponse) -> None:
    if response.status == 410:
        raise Gone()
    if response.status >= 400:
        text = (await response.content.read(4096)).decode("utf-8", "replace")
        raise aiohttp.ClientResponseError(response.request_info, (), status=response.status,
                                          message=text[:300])
