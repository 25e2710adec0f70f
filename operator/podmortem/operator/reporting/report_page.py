"""``GET /reports/{namespace}/{job}``: a job's failure report as a page, on the log server.

The report is where the operator wrote it: a TrainingJob's ``status.failureReport`` (read
from the API, so a standby or a restarted operator serves it too), or, for a watched job
of another kind, the annotation document this operator last composed (kept in memory:
other kinds are found only while this operator runs). Around it the page gets what the
log store holds: the last lines of the reported container up to the kill, and the
per-epoch memory lines among them. Access is the log server's own: a TokenReview and a
SubjectAccessReview for ``get pods/log`` in the job's namespace, so a page never shows
what its reader could not read with ``kubectl logs``.

A page costs what its log lines and its report cost, and both come from outside: the pod
prints the lines (one may be megabytes long), and anyone who may edit the object can edit the
report. So each shown line is clipped to `LINE_BYTES` as it is read, the report is read only
within `stored_bounds`' bounds, the page stays under ``page.PAGE_MAX_BYTES``, it is rendered in
a worker thread, and each page request holds one of the log server's reader slots, as a
``GET /logs`` does (429 with Retry-After beyond them).
"""

from __future__ import annotations

import asyncio
import codecs
import collections
import hashlib
import json
import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from aiohttp import web

from podmortem import memory_line
from podmortem.kube.api import Kube, KubeError
from podmortem.kube.bodies import Body
from podmortem.logs.events import GapMarker
from podmortem.logs.serving import auth, login_limits
from podmortem.logs.serving import http as log_http
from podmortem.logs.storage import read_pool, reading, store
from podmortem.operator import jobs
from podmortem.operator.log_links import report_url
from podmortem.operator.reporting import timeline_files
from podmortem.operator.reporting.reporter import Reporter
from podmortem.render import page
from podmortem.reports import stored_bounds, stored_timeline
from podmortem.reports import timeline_model as tm
from podmortem.reports.document import ReportDocument
from podmortem.reports.stored_report import StoredReport
from podmortem.reports.text import shorten

logger = logging.getLogger(__name__)

#: Log lines shown before the kill, and how many stored lines are read to find the memory lines.
SHOWN_LINES = 40
SCANNED_LINES = 5000

LINE_BYTES = 2048
"""Bytes of one log line shown on the page; the rest is cut as the line is read from the store,
and the line ends with ``… [N more bytes]``. 40 lines of 2 KiB are 80 KiB at most (480 KiB
escaped), where 4 lines of 8 MiB made a 128 MiB page."""

MEMORY_LINE_BYTES = 4096
"""Bytes read for a memory line from its marker on: the runtime prints about 200; a longer
"memory line" is read only this far (and most likely is none)."""

#: The page's Content-Security-Policy: nothing loaded, inline styles and data: images only, and
#: no framing by another site (clickjacking).
PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'"
SVG_CSP = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"

_MARKER = memory_line.MARKER.encode()


@dataclass(frozen=True)
class Found:
    """A stored report as stored (``?format=json`` serves it so) and what kind of object holds it."""

    document: dict[str, Any]
    where: str


@dataclass(frozen=True)
class Readable:
    """A stored report within the bounds, read (`ReportDocument.parse`), and who asks for it."""

    found: Found
    report: ReportDocument
    caller: str


class Missing(Exception):
    """No page: 404 with the reason in words."""


class ForeignReports(Protocol):
    """The reports this operator composed for watched jobs of other kinds (`Reporter`)."""

    def foreign_report(self, namespace: str, name: str) -> dict[str, Any] | None: ...


class ReportFinder:
    """Finds a job's stored report by namespace and name."""

    def __init__(self, *, kube: Kube | None, foreign: ForeignReports | None) -> None:
        self.kube = kube
        self.foreign = foreign

    async def find(self, namespace: str, job: str) -> Found:
        if self.foreign is not None:
            doc = self.foreign.foreign_report(namespace, job)
            if doc is not None:
                return Found(doc, "annotation")
        obj = await self.kube.get(jobs.trainingjob_path(namespace, job)) if self.kube is not None else None
        if obj is None:
            raise Missing(
                f"no TrainingJob {namespace}/{job}, and no watched job of another kind by that name "
                "has a report from this operator run"
            )
        stored = StoredReport.locate(obj)
        if stored is None:
            phase = shorten(str(Body(obj).status.get("phase") or "no phase yet"), 100)
            raise Missing(
                f"TrainingJob {namespace}/{job} has no failure report (phase: {phase}); a report is "
                "written when its pod's container exits non-zero"
            )
        return Found(stored.raw, stored.where)


class ReporterReports:
    """`ForeignReports` over a `Reporter`: the annotation document of a foreign job's latest report."""

    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter

    def foreign_report(self, namespace: str, name: str) -> dict[str, Any] | None:
        outcome = self.reporter.latest_of(namespace, name)
        if outcome is None:
            return None
        doc = self.reporter.job_annotation_document(outcome.target, outcome)
        return dict(doc) if doc is not None else None


FINDER = web.AppKey("podmortem_report_finder", ReportFinder)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _utc(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9, UTC)


def clip_line(raw: bytes, limit: int = LINE_BYTES, *, more: int = 0) -> str:
    """The line's first ``limit`` bytes as text, ending ``… [N more bytes]`` when longer.

    ``more``: bytes already cut after ``raw`` (by the store's reader). The cut backs off to a
    character boundary, so no half character is shown (the held-back bytes are counted in N).
    """
    if len(raw) <= limit and not more:
        return raw.decode("utf-8", "replace")
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    shown = decoder.decode(raw[:limit], final=False)  # keeps back a trailing incomplete character
    held, _ = decoder.getstate()
    return f"{shown}… [{max(0, len(raw) - limit) + len(held) + more} more bytes]"


def memory_peak(raw: bytes) -> tuple[int, int] | None:
    """(epoch, pod peak bytes) of a per-epoch memory line; None for any other line.

    A line with the marker that is not in the format (``INFO -> memory epoch is done``) is just
    a log line here: the page shows it, and draws no peak from it.
    """
    at = raw.find(_MARKER)
    if at < 0:
        return None
    try:
        parsed = memory_line.parse(raw[at : at + MEMORY_LINE_BYTES].decode("utf-8", "replace"))
    except ValueError:  # MemoryLineError, and pydantic's ValidationError
        return None
    if parsed is None or parsed.pod is None:
        return None
    return parsed.epoch, parsed.pod.epoch_peak_bytes or parsed.pod.peak_bytes


def _take(
    block: reading.LinesBlock,
    kill_ns: int | None,
    lines: collections.deque[page.LogLine],
    peaks: list[tuple[datetime, int, int]],
) -> int:
    """Clip the block's lines up to the kill into ``lines``, note memory peaks; how many were read."""
    taken = 0
    for ts, raw in zip(block.stamps(), block.payload.texts(block.start), strict=True):
        if kill_ns is not None and ts > kill_ns:
            continue
        taken += 1
        lines.append(page.LogLine(at=_utc(ts), text=clip_line(raw)))
        peak = memory_peak(raw)
        if peak is not None:
            peaks.append((_utc(ts), *peak))
    return taken


#: How `reading.read_large_lines` ends a line it cut.
_STORE_CUT = re.compile(rb" \[podmortem: (\d+) more bytes\]")


async def _take_large(
    block: reading.LargeLinesBlock,
    kill_ns: int | None,
    lines: collections.deque[page.LogLine],
    peaks: list[tuple[datetime, int, int]],
) -> int:
    """`_take` for a batch too big to read whole: the store's reader cuts each line at `LINE_BYTES`."""
    taken = 0
    for line in await reading.read_large_lines(block, LINE_BYTES):
        if kill_ns is not None and line.ts_ns > kill_ns:
            continue
        taken += 1
        raw, more = line.text, 0
        cut = _STORE_CUT.fullmatch(raw, LINE_BYTES) if len(raw) > LINE_BYTES else None
        if cut is not None:
            raw, more = raw[:LINE_BYTES], int(cut[1])
        lines.append(page.LogLine(at=_utc(line.ts_ns), text=clip_line(raw, more=more)))
        peak = memory_peak(raw)
        if peak is not None:
            peaks.append((_utc(line.ts_ns), *peak))
    return taken


async def log_context(
    log_store: store.LogStore, report: ReportDocument
) -> tuple[list[page.LogLine], list[tm.EpochPeak], str]:
    """The last lines up to the kill, the memory lines among the last ``SCANNED_LINES``, and a note.

    Lines are clipped to `LINE_BYTES` block by block as they are read: no whole long line is
    kept past the read of its block, and at most ``SHOWN_LINES`` clipped lines are held.
    """
    pod = report.pod
    ns, name, container = pod.namespace, pod.name, pod.container or None
    if ns is None or name is None:
        return [], [], "the report names no pod, so no log is shown"
    try:
        inst = await log_store.find_async(namespace=ns, pod=name, container=container)
        if pod.container_id and inst.container_id and inst.container_id != pod.container_id:
            inst = await log_store.find_async(namespace=ns, pod=name, container=container, previous=True)
    except (store.LogNotFound, store.ContainerRequired, ValueError) as exc:
        return [], [], f"no stored log: {shorten(str(exc), 300)}"
    # Lines up to the kill at its own resolution: all of a whole-second stamp's second, no more.
    after = page.after_kill(pod.finished_at)
    kill_ns = (after - _EPOCH) // timedelta(microseconds=1) * 1000 - 1 if after is not None else None
    lines: collections.deque[page.LogLine] = collections.deque(maxlen=SHOWN_LINES)
    peaks: list[tuple[datetime, int, int]] = []
    total = 0
    async for item in reading.read(inst, tail=SCANNED_LINES, follow=False):
        if isinstance(item, reading.LinesBlock):
            total += _take(item, kill_ns, lines, peaks)
            del item  # the block's bytes go now, not when the next block has been read
        elif isinstance(item, reading.LargeLinesBlock):
            total += await _take_large(item, kill_ns, lines, peaks)
        elif isinstance(item, GapMarker):
            when = _utc(item.after_ts_ns) if item.after_ts_ns is not None else None
            lines.append(page.LogLine(at=when, text=f"lines may be missing here ({item.reason})", kind="gap"))
        elif isinstance(item, reading.RetentionCut | reading.Damaged):
            what = (
                f"{item.removed_lines} earlier lines deleted by retention"
                if isinstance(item, reading.RetentionCut)
                else f"{item.length} bytes unreadable ({item.why})"
            )
            lines.append(page.LogLine(text=what, kind="gap"))
    shown = list(lines)
    note = (
        f"the last {sum(1 for x in shown if x.kind == 'line')} lines up to the kill, of {inst.container}'s "
        f"stored log; per-epoch peaks from memory lines among its last {SCANNED_LINES} lines ({total} read)"
    )
    return shown, page.epochs_from(peaks), note


async def get_report(request: web.Request) -> web.StreamResponse:
    namespace, job = request.match_info["namespace"], request.match_info["job"]
    fmt = request.query.get("format", "html")
    if fmt not in ("html", "json") or set(request.query) - {"format"}:
        return web.Response(status=400, text="the only parameter is format=html or format=json\n")
    answer = await _find(request, namespace, job)
    if isinstance(answer, web.Response):
        return answer
    headers = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
    if fmt == "json":
        text = json.dumps(answer.found.document)
        return web.Response(text=text, content_type="application/json", headers=headers)
    try:
        with request.app[log_http.SLOTS].hold(answer.caller):
            doc = await _page(request, namespace, job, answer.report)
    except log_http.TooManyReaders as exc:
        return web.Response(status=429, text=f"{exc}\n", headers={"Retry-After": str(exc.retry_after_s)})
    if isinstance(doc, web.Response):
        return doc
    headers["Content-Security-Policy"] = PAGE_CSP
    # "replace": a lone surrogate (JSON allows "\ud800") must not fail the encoding of the page.
    body = doc.encode("utf-8", "replace")
    return web.Response(body=body, content_type="text/html", charset="utf-8", headers=headers)


async def _page(request: web.Request, namespace: str, job: str, report: ReportDocument) -> str | web.Response:
    """The page's HTML: the log read on the loop (a block at a time), the page made in a worker thread."""
    log_store = request.app[log_http.STORE]
    try:
        lines, epochs, note = await log_context(log_store, report)
    except store.StoreClosed:
        lines, epochs, note = [], [], "the log store is shutting down"
    stored = await _stored_timeline(log_store, namespace, job, report)
    samples, restarts, projection = (
        stored_timeline.expand(stored)
        if stored is not None and timeline_files.belongs_to(stored, report)
        else ([], [], None)
    )
    data = page.PageInput(
        title=f"{namespace}/{job}",
        report=report,
        log_lines=lines,
        log_note=note,
        epochs=epochs,
        samples=samples,
        restarts=restarts,
        projection=projection,
        generated_at=datetime.now(UTC),
        json_url=report_url("", namespace=namespace, job=job) + "?format=json",
    )
    try:
        # Off the event loop: a big page would otherwise hold up every other request of the server.
        return await asyncio.to_thread(page.render, data)
    except (ValueError, TypeError, ArithmeticError, LookupError, AttributeError, RecursionError) as exc:
        # A report within the bounds that still cannot be drawn: a bug or an edit we did not foresee.
        logger.exception("the report page of %s/%s could not be made", namespace, job)
        return web.Response(
            status=404,
            text=f"the stored report of {namespace}/{job} could not be shown ({type(exc).__name__}); "
            "?format=json serves it as stored\n",
        )


async def _stored_timeline(
    log_store: store.LogStore, namespace: str, job: str, report: ReportDocument
) -> dict[str, Any] | None:
    """The timeline filed next to the logs of the report's pod (the root cause's, for a multi-pod job)."""
    pod = report.pod.name
    if not pod:
        return None
    return await read_pool.run(timeline_files.load, log_store, namespace=namespace, job=job, pod=pod)


async def get_timeline_svg(request: web.Request) -> web.StreamResponse:
    """``GET /reports/{namespace}/{job}/timeline.svg``: the SVG filed with the report, for tickets."""
    namespace, job = request.match_info["namespace"], request.match_info["job"]
    if request.query:
        return web.Response(status=400, text="timeline.svg takes no parameters\n")
    answer = await _find(request, namespace, job)
    if isinstance(answer, web.Response):
        return answer
    log_store = request.app[log_http.STORE]
    stored = await _stored_timeline(log_store, namespace, job, answer.report)
    svg = None
    pod = answer.report.pod.name
    if stored is not None and pod:
        svg = await read_pool.run(timeline_files.read, log_store, namespace=namespace, job=job, pod=pod,
                                  name=stored_timeline.SVG_NAME)
    if svg is None or stored is None or not timeline_files.belongs_to(stored, answer.report):
        return web.Response(
            status=404, text=f"no timeline of the report of {namespace}/{job} is filed in the log store\n"
        )
    headers = {
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": SVG_CSP,
    }
    return web.Response(text=svg, content_type="image/svg+xml", headers=headers)


async def _find(request: web.Request, namespace: str, job: str) -> Readable | web.Response:
    """The job's report and the caller (as ``/logs`` counts readers) after the log server's access
    checks, or the response that refuses it."""
    try:
        store.check_name("namespace", namespace)
        store.check_name("job", job)
    except ValueError as exc:
        return web.Response(status=400, text=f"{exc}\n")
    peer = request.remote or "unknown"
    try:
        user = await login_limits.check(
            request.app[log_http.FAILURES], request.app[log_http.REVIEWER], peer=peer,
            authorization=request.headers.get("Authorization"), namespace=namespace,
        )
    except auth.AccessError as exc:
        headers = {"WWW-Authenticate": 'Bearer realm="podmortem"'} if exc.status == 401 else {}
        if isinstance(exc, login_limits.TooManyFailures):
            headers = {"Retry-After": str(exc.retry_after_s)}
        return web.Response(status=exc.status, text=f"{exc}\n", headers=headers)
    caller = peer if user is auth.ANONYMOUS else "user:" + hashlib.sha256(user.name.encode()).hexdigest()
    unreadable = f"the stored report of {namespace}/{job} could not be read"
    try:
        found = await request.app[FINDER].find(namespace, job)
        stored_bounds.checked(found.document)
    except Missing as exc:
        return web.Response(status=404, text=f"{exc}\n")
    except KubeError as exc:
        return web.Response(status=503, text=f"the Kubernetes API did not answer: {exc}\n")
    except stored_bounds.Unreadable as exc:
        return web.Response(status=404, text=f"{unreadable}: {exc}\n")
    except RecursionError:  # the API's answer, parsed by the client, nested past Python's limit
        return web.Response(status=404, text=f"{unreadable}: nested deeper than Python parses\n")
    except (ValueError, TypeError) as exc:  # an answer that is no JSON object
        why = shorten(str(exc), 200)
        return web.Response(status=404, text=f"{unreadable}: {type(exc).__name__}: {why}\n")
    report = ReportDocument.parse(found.document)
    if report.pod.namespace not in (None, namespace):  # a report never shows another namespace's pod
        return web.Response(status=404, text=f"the report of {namespace}/{job} names another namespace\n")
    return Readable(found=found, report=report, caller=caller)


def add_routes(app: web.Application, finder: ReportFinder) -> None:
    """Serve ``GET /reports/{namespace}/{job}`` on the log server's app (made by ``logs.http.make_app``)."""
    app[FINDER] = finder
    app.router.add_get("/reports/{namespace}/{job}", get_report)
    app.router.add_get("/reports/{namespace}/{job}/timeline.svg", get_timeline_svg)
