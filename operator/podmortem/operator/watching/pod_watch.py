"""The operator's watch of pods: list, then watch from the list's resourceVersion, one handler per pod.

Pods are the one kind with thousands of objects. kopf spent about 1 ms of the event loop on every
pod event (its causes, kwargs, loggers and per-object worker), a quarter of the operator's start-up
over 10,000 pods; this watch hands each event to the handler directly. kopf still watches the
training jobs and the foreign kinds, and runs the login and cleanup.

What it keeps from kopf's contract:

* a handler call per event, one at a time per pod (by uid); events that arrive meanwhile are
  merged into the latest one, as kopf's batching does;
* events for other pods are handled concurrently;
* a cut stream resumes from the last resourceVersion seen;
* a handler's exception is logged and never stops the watch.

What it does as client-go's reflector does, and kopf does not:

* **A relist is a diff.** The watch remembers a little of each pod it handed out (uid, name,
  namespace, phase: about 300 bytes, within :data:`MAX_KNOWN_BYTES`); a pod that a complete list no
  longer has was deleted while the watch was down, and is handed out as deleted (its last known
  name and phase, no containers), so its state is dropped.
* **Back-off on every failure shape** (:mod:`.backoff`): an error, ``410 Gone`` on the watch or on
  the list (list again), a watch that ended before :attr:`PodWatchSettings.healthy_watch_s` (with no
  event, with one BOOKMARK, or with events), a resourceVersion that goes backwards (list again),
  a list with more pages or time than its bound (an endless ``continue``: list again). After any of
  them every request waits its step (1 s doubling to 30 s, plus up to as much again of jitter)
  until a watch has stayed open for ``healthy_watch_s``.

Lists are paged (``limit``, ``continue``) so a 10,000-pod list is never one 100 MB body. What the
API server sends is held within budgets: a list page's text (:data:`MAX_PAGE_BYTES`, for a server
that ignores ``limit``) is decoded item by item as it arrives (:mod:`.list_page`), never whole; each
watch event and each list item is at most :data:`MAX_EVENT_BYTES`; and the decoded pods handed to
handlers and not yet handled are at most :data:`MAX_HELD_BYTES` (estimated): the list and the watch
wait for room. A page or event over its budget is a failure (back off, resume).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from podmortem import startup_gc
from podmortem.background import Background
from podmortem.kube.connection import Connection, list_path
from podmortem.kube.read_at_most import read_at_most
from podmortem.kube.session import ApiSession
from podmortem.operator.watching import backoff, list_page

logger = logging.getLogger(__name__)

#: An event line (or a list item) longer than this is a failure (etcd's default object limit is 1.5 MiB).
MAX_EVENT_BYTES = 16 * 1024 * 1024
#: A list page longer than this is refused: 500 pods of 500 KiB each (pods average a few KiB). It is
#: the outer bound on what is read; what is held is bounded by :data:`MAX_HELD_BYTES` and one item.
MAX_PAGE_BYTES = 256 * 1024 * 1024
#: Pods handed to handlers and not yet handled, in estimated decoded bytes
#: (:func:`.list_page.decoded_estimate`, 2 to 4 times what they hold): the list and the watch wait for
#: room. 64 MiB is about 1,200 pods of 5 KiB of text (estimated at 11 times it; they decode to 3 or 4).
MAX_HELD_BYTES = 64 * 1024 * 1024
#: What the watch remembers of the pods it handed out, for the relist's diff: about 300 bytes a pod
#: (counted as its strings' lengths plus 200), so 64 MiB is over 200,000 pods (Kubernetes supports
#: 150,000 a cluster). Pods past it are not remembered: their deletion while the watch is down goes unseen.
MAX_KNOWN_BYTES = 64 * 1024 * 1024
_KNOWN_OVERHEAD = 200
#: A uid longer than this (a real one is 36 characters) or a name longer than Kubernetes allows is
#: not remembered.
_MAX_UID = 64
_MAX_NAME = 253
#: Pods handed to handlers in one event-loop iteration, at most: a list page of 500 pods arrives at
#: once, and each handler call starts in the next iteration (a pod's handling, its follower's start:
#: a fraction of a millisecond each), so the list yields to the loop between groups of this many.
HAND_OUTS_PER_TURN = 32

Handler = Callable[[Mapping[str, Any], bool], Awaitable[None]]
Filter = Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True)
class PodWatchSettings:
    """How the pods are listed and watched, and how failures back off."""

    #: Pods per list page.
    page_size: int = 500
    #: The server ends each watch after this long (``timeoutSeconds``); it is then resumed.
    watch_timeout_s: int = 600
    #: First back-off step after a failure; each next step doubles, up to ``backoff_max_s``.
    backoff_s: float = 1.0
    backoff_max_s: float = 30.0
    #: Each step is lengthened by up to this fraction of itself, at random, so that operators cut off
    #: together do not come back together (client-go's reflector uses 1.0).
    backoff_jitter: float = 1.0
    #: A watch that stayed open this long was healthy: the back-off is reset and the next watch starts
    #: at once. A shorter one is a failure, whatever it brought (nothing, a BOOKMARK, events): a server
    #: or proxy that ends every watch early must not be asked again at once. A quiet namespace's watch
    #: brings nothing for its whole ``watch_timeout_s`` and is healthy. 30 s is many times a watch's
    #: set-up, and a tenth of the least time a proxy's idle timeout is usually set to.
    healthy_watch_s: float = 30.0
    #: A list of more pages than this (an endless ``continue``) is a failure: back off and list again.
    #: 400 pages of 500 pods are 200,000 pods, over the 150,000 Kubernetes supports in a cluster.
    max_list_pages: int = 400
    #: A list that takes longer than this, waits for handlers included, is a failure: back off and list
    #: again. The API server's continue tokens expire after about 5 minutes (a 410) anyway.
    max_list_s: float = 600.0


class Gone(Exception):
    """The resourceVersion is too old (410): list again."""


class WentBack(Exception):
    """A watch event's resourceVersion is older than the one the watch had reached: list again."""


class EndlessList(Exception):
    """A list went on past its bound on pages or time (a ``continue`` that never ends): list again."""


class ShortWatch(Exception):
    """A watch ended before it had been healthy (open for ``healthy_watch_s``): back off, resume."""


class PerObject:
    """Runs ``handler`` for each object's events, one at a time per uid, latest event first.

    It counts the bytes it holds (as each :meth:`submit` states them): the bodies being handled and
    the ones waiting; :meth:`room` waits until more fit.
    """

    def __init__(self, handler: Handler, *, what: str = "pod") -> None:
        self._handler = handler
        self._what = what
        #: One task per uid, keyed by it: ``podmortem-<what>-event-<uid>``.
        self._tasks = Background(what)
        self._pending: dict[str, tuple[Mapping[str, Any], bool, int]] = {}
        self._sizes: dict[str, int] = {}  # the size of the body each running call handles
        self._freed = asyncio.Event()
        #: Bytes of the bodies being handled and waiting, as submitted.
        self.held = 0

    def submit(self, uid: str, body: Mapping[str, Any], deleted: bool, *, size: int = 0) -> None:
        if self._tasks.keyed(uid) is not None:
            replaced = self._pending.get(uid)
            self.held += size - (replaced[2] if replaced is not None else 0)
            self._pending[uid] = (body, deleted, size)  # the handler sees the latest state next
            return
        self._sizes[uid] = size
        self.held += size
        self._tasks.start(self._run(uid, body, deleted), name=f"event-{uid}", key=uid)

    @property
    def busy(self) -> int:
        return len(self._tasks)

    async def room(self, size: int, limit: int) -> None:
        """Wait until ``size`` more bytes fit within ``limit`` (or nothing is held: one body over it goes)."""
        while self.held and self.held + size > limit:
            self._freed.clear()
            await self._freed.wait()

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
                self.held -= self._sizes.get(uid, 0)
                body, deleted, self._sizes[uid] = nxt
                self._freed.set()
        finally:
            self.held -= self._sizes.pop(uid, 0)
            self._freed.set()

    async def close(self) -> None:
        """Cancel every handler call in progress and wait for them to end."""
        self.held -= sum(size for _, _, size in self._pending.values())
        self._pending.clear()
        await self._tasks.close()


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
                 settings: PodWatchSettings | None = None, freezer: startup_gc.Freezer | None = None) -> None:
        self.connection = connection
        self.path = path
        #: Freezes what lives as long as the pods after each list and wave of new pods (issue 40); the
        #: operator passes one (`run_operator`), a watch without one leaves the collector alone.
        self.freezer = freezer
        self.accept = accept
        self.settings = settings or PodWatchSettings()
        self.objects = PerObject(handler)
        s = self.settings
        self.backoff = backoff.Backoff(first_s=s.backoff_s, max_s=s.backoff_max_s, jitter=s.backoff_jitter)
        #: Set once the first list has been handed out (readiness).
        self.listed = asyncio.Event()
        self._version: str | None = None
        #: uid -> (name, namespace, phase) of each pod handed out and not deleted: the relist's diff.
        self._known: dict[str, tuple[str, str, str]] = {}
        self._known_bytes = 0
        self._known_full_logged = False
        self._why = ""
        #: Hand-outs since the watch last yielded to the loop (`_paced`).
        self._unpaced = 0

    async def run(self) -> None:
        """List and watch until cancelled; every failure backs off (:mod:`.backoff`) and resumes."""
        try:
            # Refused credentials are made afresh by the session itself (once more after a 401).
            async with ApiSession(self.connection) as api:
                while True:
                    await self._once(api)
        finally:
            if self.freezer is not None:
                self.freezer.cancel()
            await self.objects.close()

    async def _once(self, api: ApiSession) -> None:
        """List if no version is known, then watch; a failure is logged and backed off, never raised."""
        try:
            if self._version is None:
                await self._step()
                self._version = await self._list(api)
                self.listed.set()
            await self._step()
            await self._watch(api)
        except (Gone, WentBack) as exc:
            why = str(exc) or (f"resourceVersion {self._version} is gone (410)" if self._version
                               else "the list was answered 410 Gone")
            self._failed(f"{why}; listing again", level=logging.INFO)
            self._version = None
        except (ShortWatch, EndlessList) as exc:
            self._failed(str(exc), level=logging.INFO)
        except Exception as exc:  # whatever it was, the watch goes on: pods must not go unseen
            expected = isinstance(exc, (aiohttp.ClientError, TimeoutError, OSError, ValueError))
            self._failed(f"watch failed ({type(exc).__name__}: {exc})", level=logging.WARNING,
                         exc=None if expected else exc)

    def _failed(self, why: str, *, level: int, exc: BaseException | None = None) -> None:
        self.backoff.failed()
        self._why = why
        if exc is not None:
            logger.warning("pods at %s: %s", self.path, why, exc_info=exc)
        else:
            logger.log(level, "pods at %s: %s", self.path, why)

    async def _step(self) -> None:
        """Wait the back-off's next step before a request if anything failed since the last healthy watch."""
        delay = self.backoff.take()
        if delay:
            logger.info("pods at %s: next request in %.2f s (back-off step %d, after: %s)", self.path, delay,
                        self.backoff.steps, self._why)
            await asyncio.sleep(delay)

    async def _hand_out(self, obj: Any, deleted: bool, size: int, listed: set[str] | None = None) -> None:
        """Hand ``obj`` to the handler if accepted, once there is room; remember it for the relist's diff."""
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
        if not accepted or deleted:
            self._forget(uid)
        else:
            if self.freezer is not None and uid not in self._known:
                self.freezer.added()
            self._remember(uid, obj)
        if not accepted:
            return
        if listed is not None:
            listed.add(uid)
        await self.objects.room(size, MAX_HELD_BYTES)
        self.objects.submit(uid, obj, deleted, size=size)
        await self._paced()

    async def _paced(self) -> None:
        """Yield to the loop after every `HAND_OUTS_PER_TURN` hand-outs: their handlers run in the next
        iteration, that many at a time, with whatever else is ready."""
        self._unpaced += 1
        if self._unpaced >= HAND_OUTS_PER_TURN:
            self._unpaced = 0
            await asyncio.sleep(0)

    def _remember(self, uid: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        status = obj.get("status")
        name, namespace = meta.get("name"), meta.get("namespace")
        phase = status.get("phase") if isinstance(status, dict) else None
        self._forget(uid)
        if not (isinstance(name, str) and isinstance(namespace, str) and len(uid) <= _MAX_UID
                and len(name) <= _MAX_NAME and len(namespace) <= _MAX_NAME):
            return
        phase = phase if isinstance(phase, str) and len(phase) <= _MAX_NAME else ""
        cost = len(uid) + len(name) + len(namespace) + _KNOWN_OVERHEAD
        if self._known_bytes + cost > MAX_KNOWN_BYTES:
            if not self._known_full_logged:
                self._known_full_logged = True
                logger.warning("pods at %s: over %d pods known (%d bytes); the deletion of pods past them "
                               "while the watch is down will go unseen", self.path, len(self._known),
                               MAX_KNOWN_BYTES)
            return
        self._known[uid] = (name, sys.intern(namespace), sys.intern(phase))
        self._known_bytes += cost

    def _forget(self, uid: str) -> None:
        known = self._known.pop(uid, None)
        if known is not None:
            self._known_bytes -= len(uid) + len(known[0]) + len(known[1]) + _KNOWN_OVERHEAD

    async def _hand_out_unlisted(self, listed: set[str]) -> None:
        """Hand out as deleted each pod known before a complete list that the list does not have."""
        gone = [uid for uid in self._known if uid not in listed]
        if gone:
            logger.info("pods at %s: %d pods were deleted while the watch was down", self.path, len(gone))
        for uid in gone:
            name, namespace, phase = self._known[uid]
            self._forget(uid)
            # What is known of it, as client-go's DeletedFinalStateUnknown: no containers (their end is
            # not known, so nothing is reported of them), the last phase seen (a status that mirrors
            # it is not rewritten).
            body: dict[str, Any] = {"metadata": {"uid": uid, "name": name, "namespace": namespace}}
            if phase:
                body["status"] = {"phase": phase}
            await self.objects.room(_KNOWN_OVERHEAD, MAX_HELD_BYTES)
            self.objects.submit(uid, body, True, size=_KNOWN_OVERHEAD)
            await self._paced()

    async def _list(self, api: ApiSession) -> str:
        """Hand out every pod, page by page, then the pods gone since: the list's resourceVersion."""
        s = self.settings
        loop = asyncio.get_running_loop()
        started = loop.time()
        token = ""
        listed: set[str] = set()
        for _ in range(s.max_list_pages):
            left = s.max_list_s - (loop.time() - started)
            if left <= 0:
                raise EndlessList(f"the list took over {s.max_list_s:.0f} s; listing again")
            params = {"limit": str(s.page_size)}
            if token:
                params["continue"] = token
            async with api.response("GET", self.path, query=params, headers={"Accept": "application/json"},
                                    client_timeout=aiohttp.ClientTimeout(total=left, sock_read=120)
                                    ) as response:
                await _raise_for(response)
                page = list_page.ListPage(limit=MAX_PAGE_BYTES, item_limit=MAX_EVENT_BYTES)
                async for item, size in page.items(response.content.iter_any()):
                    await self._hand_out(item, False, size, listed)
            token = page.metadata.get("continue") or ""
            if not isinstance(token, str):
                raise ValueError(f"a pod list page's continue is not a string: {token!r:.100}")
            if not token:
                await self._hand_out_unlisted(listed)
                if self.freezer is not None:
                    self.freezer.listed()
                return str(page.metadata.get("resourceVersion") or "")
        raise EndlessList(f"the list went on past {s.max_list_pages} pages; listing again")

    async def _watch(self, api: ApiSession) -> None:
        """One watch from the last version, until the server ends it; ShortWatch if it was not healthy."""
        timeout_s = self.settings.watch_timeout_s
        params = {"watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_s)}
        if self._version:
            params["resourceVersion"] = self._version
        loop = asyncio.get_running_loop()
        started = loop.time()
        events = 0
        try:
            async with api.response("GET", self.path, query=params, headers={"Accept": "application/json"},
                                    client_timeout=aiohttp.ClientTimeout(sock_read=timeout_s + 60)
                                    ) as response:
                await _raise_for(response)
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
                    if isinstance(version, str) and _older(version, self._version):
                        raise WentBack(f"the resourceVersion went back from {self._version} to {version:.40}")
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        await self._hand_out(obj, kind == "DELETED", list_page.decoded_estimate(line))
                    if isinstance(version, str) and version:
                        self._version = version  # BOOKMARK events carry only this
        finally:
            lasted = loop.time() - started
            if lasted >= self.settings.healthy_watch_s:
                self.backoff.healthy()
        if lasted < self.settings.healthy_watch_s:
            raise ShortWatch(f"the watch ended after {lasted:.1f} s with {events} events")


def _older(version: str, than: str | None) -> bool:
    """Whether ``version`` is before ``than``; resourceVersions are compared only where both are integers
    (etcd's revisions; the API calls them opaque, so others are never judged)."""
    if not than or not (version.isascii() and version.isdecimal() and than.isascii() and than.isdecimal()):
        return False
    if len(version) > 32 or len(than) > 32:
        return False
    return int(version) < int(than)


class PodWatches:
    """One `PodWatch` per watched namespace (or one cluster-wide), started and stopped together."""

    def __init__(self, *, connection: Connection, namespaces: Sequence[str], handler: Handler,
                 accept: Filter, settings: PodWatchSettings | None = None,
                 freezer: startup_gc.Freezer | None = None) -> None:
        # One freezer for every namespace's watch: the process has one heap.
        self.watches = [
            PodWatch(connection=connection, path=list_path("", "v1", "pods", namespace or None),
                     handler=handler, accept=accept, settings=settings, freezer=freezer)
            for namespace in (namespaces or ("",))
        ]
        #: One eternal task per watch, ``podmortem-pod-watch-<its path>``: a watch that
        #: fails or returns is logged at once, while the others go on.
        self._tasks = Background("pod-watch")
        self._started = False

    @property
    def listed(self) -> bool:
        """Every watch has handed out its first list."""
        return all(w.listed.is_set() for w in self.watches)

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        for watch in self.watches:
            self._tasks.start(watch.run(), name=watch.path, eternal=True)

    async def stop(self) -> None:
        """Stop watching, and cancel (and wait for) the handler calls in progress. Idempotent."""
        self._started = False
        await self._tasks.close()


async def _raise_for(response: aiohttp.ClientResponse) -> None:
    if response.status == 410:
        raise Gone()
    if response.status >= 400:
        text = (await read_at_most(response.content, 4096)).decode("utf-8", "replace")
        raise aiohttp.ClientResponseError(response.request_info, (), status=response.status,
                                          message=text[:300])
