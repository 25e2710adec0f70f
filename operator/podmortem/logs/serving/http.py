"""HTTP access to stored pod logs: ``GET /logs/{namespace}/{pod}``, live or after the pod is gone.

Serves from the log store, not from the kubelet, so it works when the pod,
and even the node, no longer exists. Query parameters follow ``kubectl logs``:

* ``container``: required when the pod had several containers (400 lists them);
* ``tail=N``: only the last N lines; ``since=``: RFC3339 time or a duration (``10m``, ``1h30m``);
* ``follow=true``: stream new lines as they are stored, until the container's log ends;
* ``previous=true``: the container instance before the latest (after a restart);
* ``timestamps=true``: prefix each line with its RFC3339 nanosecond timestamp;
* ``format=text`` (default) or ``format=jsonl``.

In text, possible losses are rendered as lines of their own, so they show up
where they happened::

    --- podmortem: lines may be missing here (rotation) between <ts> and <ts> ---
    --- podmortem: 1200 earlier lines were deleted by retention ---
    --- podmortem: 4096 bytes unreadable here (corrupt) ---
    --- podmortem: end of log (pod-deleted) ---

Damaged bytes of the store (a flipped bit, a torn write at a crash) are never
served as lines: they are set aside, and the reader gets the damage marker and
then every intact batch after them.

In jsonl every record is an object with a ``type`` of ``line``, ``gap``,
``retention-cut``, ``damage``, ``end`` or ``server-stopping``; a line's ``text`` is its bytes decoded as UTF-8
with invalid bytes as lone surrogates (``\\udcXX``), so it round-trips exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from podmortem import serving_limits
from podmortem.background import Background
from podmortem.errors import PodmortemError
from podmortem.logs import timestamps, wakeup
from podmortem.logs.events import GapMarker
from podmortem.logs.serving import auth, login_limits
from podmortem.logs.settings import HttpSettings
from podmortem.logs.storage import reading, store
from podmortem.logs.wakeup import Wakeup

logger = logging.getLogger(__name__)

STORE = web.AppKey("podmortem_log_store", store.LogStore)
REVIEWER = web.AppKey("podmortem_log_reviewer", auth.Reviewer)

_ALLOWED = frozenset({"container", "tail", "since", "follow", "previous", "timestamps", "format"})
_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no", ""}
# ASCII digits only: ``\d`` would take ``٣h`` (an Arabic-Indic 3) as 3 h, which kubectl refuses.
_DURATION = re.compile(r"^(?:[0-9]+(?:\.[0-9]+)?(?:h|m|s|ms|us|µs|ns))+$")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(h|ms|m|s|us|µs|ns)")
#: What ``since`` may be padded with; ``str.strip()`` alone would also take a no-break space.
_ASCII_SPACE = " \t\r\n\v\f"
_UNIT_NS = {"h": 3600e9, "m": 60e9, "s": 1e9, "ms": 1e6, "us": 1e3, "µs": 1e3, "ns": 1.0}


class BadParams(PodmortemError, ValueError):
    """A query parameter of the request is malformed."""


@dataclass(frozen=True, slots=True)
class LogQuery:
    container: str | None = None
    tail: int | None = None
    since_ns: int | None = None
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    jsonl: bool = False


def _bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise BadParams(f"{name} must be true or false, not {_clip(value)!r}")


def parse_since(value: str, *, now_ns: int | None = None) -> int:
    """``since``: an RFC3339 time, or a duration back from now (Go syntax: ``90s``, ``1h30m``)."""
    value = value.strip(_ASCII_SPACE)
    bad = BadParams(
        "since must be an RFC3339 time (2024-05-01T12:00:00Z) or a duration (10m, 1h30m), "
        f"not {_clip(value)!r}"
    )
    if len(value) > 64:
        raise bad
    if _DURATION.match(value):
        ns = sum(float(n) * _UNIT_NS[u] for n, u in _DURATION_PART.findall(value))
        now = time.time_ns() if now_ns is None else now_ns
        if not ns < now:  # inf, or before 1970: everything stored is newer
            return 0
        return now - int(ns)
    try:
        return timestamps.parse_ns(value.encode())
    except (ValueError, OverflowError, UnicodeEncodeError) as exc:
        raise bad from exc


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def parse_query(params: Any) -> LogQuery:
    """Validate the query string; every problem is a ``BadParams`` with a message for the user."""
    # The first names of the unknown, and a sixth to tell that there are more: linear, where sorting
    # them all was not (a query of a thousand names is within aiohttp's 8 KiB request line).
    unknown = heapq.nsmallest(6, set(params) - _ALLOWED)
    if unknown:
        shown = ", ".join(_clip(name, 40) for name in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        raise BadParams(f"unknown parameter(s): {shown}; allowed: {', '.join(sorted(_ALLOWED))}")
    for name in set(params):
        if len(params.getall(name)) > 1:
            raise BadParams(f"parameter {name} given more than once")
    container = params.get("container") or None
    if container is not None:
        try:
            store.check_name("container", container)
        except ValueError as exc:
            raise BadParams(str(exc)) from exc
    tail: int | None = None
    if "tail" in params:
        raw = params["tail"].strip()
        if raw == "-1":
            tail = None  # kubectl's "all"
        elif raw.isascii() and raw.isdigit() and len(raw) <= 18:
            tail = int(raw)
        else:
            raise BadParams(f"tail must be a whole number of lines >= 0 (or -1 for all), not {_clip(raw)!r}")
    since = parse_since(params["since"]) if params.get("since") else None
    fmt = params.get("format", "text")
    if fmt not in ("text", "jsonl"):
        raise BadParams(f"format must be text or jsonl, not {_clip(fmt)!r}")
    return LogQuery(
        container=container,
        tail=tail,
        since_ns=since,
        follow=_bool("follow", params.get("follow", "false")),
        previous=_bool("previous", params.get("previous", "false")),
        timestamps=_bool("timestamps", params.get("timestamps", "false")),
        jsonl=fmt == "jsonl",
    )


def _error(status: int, message: str, **headers: str) -> web.Response:
    return web.Response(status=status, text=message + "\n", headers=headers)


def _ts(ns: int | None) -> str:
    return "?" if ns is None else timestamps.format_ns(ns)


def render_text(item: reading.LogItem, *, with_timestamps: bool) -> bytes:
    """A marker of a stored log as a line of its own (lines: `reading.render_block`)."""
    if isinstance(item, reading.LinesBlock | reading.LargeLinesBlock):
        raise TypeError("lines are rendered in pieces: reading.render_block / reading.serve_large")
    if isinstance(item, GapMarker):
        detail = f": {item.detail}" if item.detail else ""
        msg = (f"--- podmortem: lines may be missing here ({item.reason}) "
               f"between {_ts(item.after_ts_ns)} and {_ts(item.before_ts_ns)}{detail} ---\n")
    elif isinstance(item, reading.RetentionCut):
        msg = f"--- podmortem: {item.removed_lines} earlier lines were deleted by retention ---\n"
    elif isinstance(item, reading.Damaged):
        lost = f", {item.lines} lines" if item.lines else ""
        msg = f"--- podmortem: {item.length} bytes unreadable here ({item.why}{lost}) ---\n"
    else:
        msg = f"--- podmortem: end of log ({item.reason}) ---\n"
    return msg.encode()


def render_jsonl(item: reading.LogItem) -> bytes:
    """A marker of a stored log as one jsonl record (lines: `reading.render_block`)."""
    record: dict[str, Any]
    if isinstance(item, reading.LinesBlock | reading.LargeLinesBlock):
        raise TypeError("lines are rendered in pieces: reading.render_block / reading.serve_large")
    if isinstance(item, GapMarker):
        record = {"type": "gap", "reason": str(item.reason), "after_ts_ns": item.after_ts_ns,
                  "before_ts_ns": item.before_ts_ns, "detail": item.detail}
    elif isinstance(item, reading.RetentionCut):
        record = {"type": "retention-cut", "removed_lines": item.removed_lines}
    elif isinstance(item, reading.Damaged):
        record = {"type": "damage", "bytes": item.length, "why": item.why, "lines": item.lines}
    else:
        record = {"type": "end", "reason": str(item.reason), "container_id": item.container_id}
    return (json.dumps(record) + "\n").encode()


async def render(item: reading.LogItem, query: LogQuery) -> AsyncIterator[bytes]:
    """An item as the query wants it, in pieces: nothing of a long line is rendered whole."""
    if query.jsonl:
        how = reading.Render.JSONL
    else:
        how = reading.Render.TIMESTAMPS if query.timestamps else reading.Render.TEXT
    if isinstance(item, reading.LargeLinesBlock):
        async for piece in reading.serve_large(item, how):
            yield piece
    elif isinstance(item, reading.LinesBlock):
        for piece in reading.render_block(item, how):
            yield piece
    else:
        yield render_jsonl(item) if query.jsonl else render_text(item, with_timestamps=query.timestamps)


#: Bytes gathered before one write to a reader's socket (with one rendered piece over it at most).
FLUSH_BYTES = 64 << 10

STOPPING = web.AppKey("podmortem_log_server_stopping", Wakeup)
SETTINGS = web.AppKey("podmortem_log_server_settings", HttpSettings)

#: What a following reader gets when the server stops under it.
STOPPING_MARKER = b"--- podmortem: the log server is stopping; reconnect to read on ---\n"


class TooManyReaders(PodmortemError):
    """Beyond a reader cap: 429 with Retry-After."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass
class ReaderSlots:
    """Counts streaming readers, in total and per caller; a slot is held for a whole response.

    Fair to callers: besides its own cap (``per_caller``), a caller gets another slot only while it
    holds fewer readers than there are free slots left. A few callers at their cap thus leave room
    for others (8 callers of 32 readers once filled all 256 and everyone else got 429), and the
    last free slots go to callers that hold fewest.
    """

    total: int
    per_caller: int
    active: int = 0
    by_caller: dict[str, int] = field(default_factory=dict)

    @contextlib.contextmanager
    def hold(self, caller: str) -> Iterator[None]:
        free = self.total - self.active
        if free <= 0:
            raise TooManyReaders(
                f"the log server is serving its limit of {self.total} readers; retry later", 5
            )
        mine = self.by_caller.get(caller, 0)
        if mine >= self.per_caller:
            raise TooManyReaders(f"you already have {mine} log readers open (the limit per caller); "
                                 "close one or retry later", 5)
        if mine >= free:
            raise TooManyReaders(f"you already have {mine} log readers open and the server has {free} "
                                 "left for everyone; close one or retry later", 5)
        self.active += 1
        self.by_caller[caller] = mine + 1
        try:
            yield
        finally:
            self.active -= 1
            left = self.by_caller[caller] - 1
            if left:
                self.by_caller[caller] = left
            else:
                del self.by_caller[caller]


SLOTS = web.AppKey("podmortem_log_reader_slots", ReaderSlots)
#: Failed logins, per token and per address (see ``login_limits``).
FAILURES = web.AppKey("podmortem_log_auth_failures", login_limits.LoginLimits)


def _peer(request: web.Request) -> str:
    return request.remote or "unknown"


async def get_logs(request: web.Request) -> web.StreamResponse:
    # Hundreds of readers may connect at once: their first steps are spread over turns of the loop.
    await wakeup.take_turn()
    namespace = request.match_info["namespace"]
    pod = request.match_info["pod"]
    # Everything that needs no API call is checked first: a bad name costs no review.
    try:
        store.check_name("namespace", namespace)
        store.check_name("pod", pod)
        query = parse_query(request.query)
    except (BadParams, ValueError) as exc:
        return _error(400, str(exc))
    peer = _peer(request)
    try:
        user = await login_limits.check(
            request.app[FAILURES], request.app[REVIEWER], peer=peer,
            authorization=request.headers.get("Authorization"), namespace=namespace,
        )
    except auth.AccessError as exc:
        headers = {"WWW-Authenticate": 'Bearer realm="podmortem"'} if exc.status == 401 else {}
        if isinstance(exc, login_limits.TooManyFailures):
            headers = {"Retry-After": str(exc.retry_after_s)}
        return _error(exc.status, str(exc), **headers)
    caller = peer if user is auth.ANONYMOUS else "user:" + hashlib.sha256(user.name.encode()).hexdigest()
    try:
        with request.app[SLOTS].hold(caller):
            return await _serve_log(request, namespace, pod, query)
    except TooManyReaders as exc:
        return _error(429, str(exc), **{"Retry-After": str(exc.retry_after_s)})


async def _serve_log(request: web.Request, namespace: str, pod: str, query: LogQuery) -> web.StreamResponse:
    log_store = request.app[STORE]
    try:
        inst = await log_store.find_async(
            namespace=namespace, pod=pod, container=query.container, previous=query.previous
        )
    except store.ContainerRequired as exc:
        return _error(400, f"{exc} (add ?container=NAME)")
    except store.LogNotFound as exc:
        return _error(404, str(exc))
    except store.StoreClosed:
        return _error(503, "the log store is shutting down")

    response = web.StreamResponse(headers={
        "Content-Type": "application/x-ndjson" if query.jsonl else "text/plain; charset=utf-8",
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
    })
    response.enable_chunked_encoding()
    await response.prepare(request)
    stopping = request.app[STOPPING]
    deadline = request.app[SETTINGS].write_deadline_s
    pending: list[bytes] = []
    held = 0

    async def flush() -> None:
        nonlocal held
        if pending:
            data = pending[0] if len(pending) == 1 else b"".join(pending)
            pending.clear()
            held = 0
            # At most FLUSH_BYTES per write: one 16 MiB line written whole is one copy and one
            # send(2) of 16 MiB in the event loop, long enough to stall every other reader on a
            # busy core. A reader that leaves a full socket buffer unread for `deadline` is
            # dropped: its slot and its chunk are freed for readers that read.
            view = memoryview(data)
            for start in range(0, len(view), FLUSH_BYTES):
                async with asyncio.timeout(deadline):
                    await response.write(view[start : start + FLUSH_BYTES])

    try:
        # Pieces are gathered into writes of about FLUSH_BYTES (one socket write and one chunk
        # for many small batches), and sent whenever the log has nothing more for now.
        async for item in reading.read(inst, since_ns=query.since_ns, tail=query.tail, follow=query.follow,
                                       stop=stopping, idle_marks=True):
            if isinstance(item, reading.Idle):
                await flush()
                continue
            async for data in render(item, query):
                if data:
                    pending.append(data)
                    held += len(data)
                    if held >= FLUSH_BYTES:
                        await flush()
                del data
        await flush()
        if stopping.is_set() and query.follow:
            async with asyncio.timeout(1.0):
                await response.write(render_jsonl_stop() if query.jsonl else STOPPING_MARKER)
    except TimeoutError:
        logger.info("dropped a log reader of %s/%s that read nothing for %.0f s", namespace, pod, deadline)
        if request.transport is not None:
            request.transport.abort()
        return response
    except (ConnectionResetError, ConnectionError):
        logger.debug("log reader of %s/%s went away", namespace, pod)
        return response
    await response.write_eof()
    return response


def render_jsonl_stop() -> bytes:
    return (json.dumps({"type": "server-stopping"}) + "\n").encode()


def make_app(*, log_store: store.LogStore, reviewer: auth.Reviewer,
             settings: HttpSettings | None = None) -> web.Application:
    """The aiohttp application serving ``GET /logs/{namespace}/{pod}`` from ``log_store``."""
    settings = settings or HttpSettings()
    app = web.Application()
    app[STORE] = log_store
    app[REVIEWER] = reviewer
    app[SETTINGS] = settings
    app[STOPPING] = Wakeup()
    app[SLOTS] = ReaderSlots(total=settings.max_readers, per_caller=settings.max_readers_per_caller)
    app[FAILURES] = login_limits.LoginLimits.from_settings(settings)
    serving_limits.install(app, settings.connections, name="log server")
    app.router.add_get("/logs/{namespace}/{pod}", get_logs)

    async def tell_readers_to_stop(app: web.Application) -> None:
        app[STOPPING].set()  # runs before aiohttp waits for open requests to finish

    app.on_shutdown.append(tell_readers_to_stop)
    return app


def runner(app: web.Application, settings: HttpSettings) -> web.AppRunner:
    """An ``AppRunner`` with the server's deadlines (`serving_limits.runner`) and its shutdown wait.

    Handlers are cancelled when their client goes away: a follower waiting for new lines
    would otherwise hold its reader slot until the log next changed.
    """
    return serving_limits.runner(app, shutdown_timeout=settings.shutdown_timeout_s, handler_cancellation=True)


@asynccontextmanager
async def serve(
    *, log_store: store.LogStore, reviewer: auth.Reviewer, settings: HttpSettings | None = None
) -> AsyncIterator[web.AppRunner]:
    """Run the log server on ``settings.host:port`` for the duration of the ``async with``."""
    settings = settings or HttpSettings()
    run = runner(make_app(log_store=log_store, reviewer=reviewer, settings=settings), settings)
    await run.setup()
    certificate = settings.certificate()
    watching = Background("log-server")
    if certificate is not None:  # a renewed certificate is loaded without a restart
        watching.start(certificate.watch(), name="tls-certificate", eternal=True)
    try:
        tls = certificate.context if certificate is not None else None
        await serving_limits.start(run, host=settings.host, port=settings.port, ssl_context=tls)
        logger.info("serving stored pod logs on %s://%s:%d/logs/{namespace}/{pod}",
                    settings.scheme, settings.host, settings.port)
        yield run
    finally:
        await watching.close()
        await run.cleanup()
