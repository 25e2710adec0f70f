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
    --- podmortem: end of log (pod-deleted) ---

In jsonl every record is an object with a ``type`` of ``line``, ``gap``,
``retention-cut`` or ``end``; a line's ``text`` is its bytes decoded as UTF-8
with invalid bytes as lone surrogates (``\\udcXX``), so it round-trips exactly.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from podmortem.errors import PodmortemError
from podmortem.logs import auth, reading, store, timestamps
from podmortem.logs.events import GapMarker, LogEnd

logger = logging.getLogger(__name__)

STORE = web.AppKey("podmortem_log_store", store.LogStore)
REVIEWER = web.AppKey("podmortem_log_reviewer", auth.Reviewer)

_ALLOWED = frozenset({"container", "tail", "since", "follow", "previous", "timestamps", "format"})
_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no", ""}
_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?(?:h|m|s|ms|us|µs|ns))+$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)")
_UNIT_NS = {"h": 3600e9, "m": 60e9, "s": 1e9, "ms": 1e6, "us": 1e3, "µs": 1e3, "ns": 1.0}


@dataclass(frozen=True)
class HttpSettings:
    """Where the log server listens."""

    #: Address to bind. Default all interfaces: the Service in front decides who reaches it.
    host: str = "0.0.0.0"
    #: TCP port. Default 8080, the usual unprivileged HTTP port (the chart's Service maps it).
    port: int = 8080


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
    raise BadParams(f"{name} must be true or false, not {value!r}")


def parse_since(value: str, *, now_ns: int | None = None) -> int:
    """``since``: an RFC3339 time, or a duration back from now (Go syntax: ``90s``, ``1h30m``)."""
    value = value.strip()
    if _DURATION.match(value):
        ns = sum(float(n) * _UNIT_NS[u] for n, u in _DURATION_PART.findall(value))
        now = time.time_ns() if now_ns is None else now_ns
        return now - int(ns)
    try:
        return timestamps.parse_ns(value.encode())
    except (ValueError, UnicodeEncodeError) as exc:
        raise BadParams(
            f"since must be an RFC3339 time (2024-05-01T12:00:00Z) or a duration (10m, 1h30m), not {value!r}"
        ) from exc


def parse_query(params: Any) -> LogQuery:
    """Validate the query string; every problem is a ``BadParams`` with a message for the user."""
    unknown = sorted(set(params) - _ALLOWED)
    if unknown:
        raise BadParams(f"unknown parameter(s): {', '.join(unknown)}; allowed: {', '.join(sorted(_ALLOWED))}")
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
        elif raw.isdigit():
            tail = int(raw)
        else:
            raise BadParams(f"tail must be a whole number of lines >= 0 (or -1 for all), not {raw!r}")
    since = parse_since(params["since"]) if params.get("since") else None
    fmt = params.get("format", "text")
    if fmt not in ("text", "jsonl"):
        raise BadParams(f"format must be text or jsonl, not {fmt!r}")
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
    """One item of a stored log as text: lines as they were, markers as lines of their own."""
    if isinstance(item, reading.LinesBlock):
        return item.text_bytes(timestamps=with_timestamps)
    if isinstance(item, GapMarker):
        detail = f": {item.detail}" if item.detail else ""
        msg = (f"--- podmortem: lines may be missing here ({item.reason}) "
               f"between {_ts(item.after_ts_ns)} and {_ts(item.before_ts_ns)}{detail} ---\n")
    elif isinstance(item, reading.RetentionCut):
        msg = f"--- podmortem: {item.removed_lines} earlier lines were deleted by retention ---\n"
    else:
        msg = f"--- podmortem: end of log ({item.reason}) ---\n"
    return msg.encode()


def render_jsonl(item: reading.LogItem) -> bytes:
    if isinstance(item, reading.LinesBlock):
        fmt = timestamps.format_ns
        return "".join(
            json.dumps({"type": "line", "ts": fmt(ts), "ts_ns": ts,
                        "text": text.decode("utf-8", "surrogateescape")}) + "\n"
            for ts, text in zip(item.stamps(), item.payload.texts(item.start), strict=True)
        ).encode()
    record: dict[str, Any]
    if isinstance(item, GapMarker):
        record = {"type": "gap", "reason": str(item.reason), "after_ts_ns": item.after_ts_ns,
                  "before_ts_ns": item.before_ts_ns, "detail": item.detail}
    elif isinstance(item, reading.RetentionCut):
        record = {"type": "retention-cut", "removed_lines": item.removed_lines}
    else:
        assert isinstance(item, LogEnd)
        record = {"type": "end", "reason": str(item.reason), "container_id": item.container_id}
    return (json.dumps(record) + "\n").encode()


async def get_logs(request: web.Request) -> web.StreamResponse:
    namespace = request.match_info["namespace"]
    pod = request.match_info["pod"]
    reviewer = request.app[REVIEWER]
    try:
        await reviewer.check(authorization=request.headers.get("Authorization"), namespace=namespace)
    except auth.AccessError as exc:
        headers = {"WWW-Authenticate": 'Bearer realm="podmortem"'} if exc.status == 401 else {}
        return _error(exc.status, str(exc), **headers)
    try:
        query = parse_query(request.query)
        store.check_name("namespace", namespace)
        store.check_name("pod", pod)
    except (BadParams, ValueError) as exc:
        return _error(400, str(exc))
    log_store = request.app[STORE]
    try:
        inst = log_store.find(
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
    try:
        async for item in reading.read(inst, since_ns=query.since_ns, tail=query.tail, follow=query.follow):
            data = render_jsonl(item) if query.jsonl else render_text(item, with_timestamps=query.timestamps)
            if data:
                await response.write(data)
    except (ConnectionResetError, ConnectionError):
        logger.debug("log reader of %s/%s went away", namespace, pod)
        return response
    await response.write_eof()
    return response


def make_app(*, log_store: store.LogStore, reviewer: auth.Reviewer) -> web.Application:
    """The aiohttp application serving ``GET /logs/{namespace}/{pod}`` from ``log_store``."""
    app = web.Application()
    app[STORE] = log_store
    app[REVIEWER] = reviewer
    app.router.add_get("/logs/{namespace}/{pod}", get_logs)
    return app


@asynccontextmanager
async def serve(
    *, log_store: store.LogStore, reviewer: auth.Reviewer, settings: HttpSettings | None = None
) -> AsyncIterator[web.AppRunner]:
    """Run the log server on ``settings.host:port`` for the duration of the ``async with``."""
    settings = settings or HttpSettings()
    runner = web.AppRunner(make_app(log_store=log_store, reviewer=reviewer), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, settings.host, settings.port)
        await site.start()
        logger.info("serving stored pod logs on http://%s:%d/logs/{namespace}/{pod}",
                    settings.host, settings.port)
        yield runner
    finally:
        await runner.cleanup()
