"""``GET /reports/{namespace}/{job}``: a job's failure report as a page, on the log server.

The report is where the operator wrote it: a TrainingJob's ``status.failureReport`` (read
from the API, so a standby or a restarted operator serves it too), or, for a watched job
of another kind, the annotation document this operator last composed (kept in memory:
other kinds are found only while this operator runs). Around it the page gets what the
log store holds: the last lines of the reported container up to the kill, and the
per-epoch memory lines among them. Access is the log server's own: a TokenReview and a
SubjectAccessReview for ``get pods/log`` in the job's namespace, so a page never shows
what its reader could not read with ``kubectl logs``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from podmortem import memory_line
from podmortem.kube import api as kube_mod
from podmortem.logs import auth, reading, store
from podmortem.logs import http as log_http
from podmortem.logs.events import GapMarker
from podmortem.operator import jobs, report_timeline
from podmortem.operator.log_links import report_url
from podmortem.operator.reporting import Reporter
from podmortem.reports import page, stored_timeline
from podmortem.reports import timeline as tl_mod

logger = logging.getLogger(__name__)

#: Log lines shown before the kill, and how many stored lines are read to find the memory lines.
SHOWN_LINES = 40
SCANNED_LINES = 5000


@dataclass(frozen=True)
class Found:
    """A stored report and what kind of object holds it."""

    document: dict[str, Any]
    where: str


class Missing(Exception):
    """No page: 404 with the reason in words."""


class ForeignReports(Protocol):
    """The reports this operator composed for watched jobs of other kinds (`Reporter`)."""

    def foreign_report(self, namespace: str, name: str) -> dict[str, Any] | None: ...


class ReportFinder:
    """Finds a job's stored report by namespace and name."""

    def __init__(self, *, kube: kube_mod.Kube | None, foreign: ForeignReports | None) -> None:
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
        status = obj.get("status") or {}
        report = status.get("failureReport")
        if not isinstance(report, dict) or not report:
            phase = status.get("phase") or "no phase yet"
            raise Missing(
                f"TrainingJob {namespace}/{job} has no failure report (phase: {phase}); a report is "
                "written when its pod's container exits non-zero"
            )
        return Found(report, "status.failureReport")


class ReporterReports:
    """`ForeignReports` over a `Reporter`: the annotation document of a foreign job's latest report."""

    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter

    def foreign_report(self, namespace: str, name: str) -> dict[str, Any] | None:
        for outcome in reversed(self.reporter.outcomes):
            t = outcome.target
            if t.namespace == namespace and t.name == name and t.role != "trainingjob":
                doc = self.reporter.job_annotation_document(t, outcome)
                return dict(doc) if doc is not None else None
        return None


FINDER = web.AppKey("podmortem_report_finder", ReportFinder)


def _utc(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9, UTC)


async def log_context(
    log_store: store.LogStore, report: Mapping[str, Any]
) -> tuple[list[page.LogLine], list[tl_mod.EpochPeak], str]:
    """The last lines up to the kill, the memory lines among the last ``SCANNED_LINES``, and a note."""
    pod = report.get("pod") or {}
    ns, name, container = pod.get("namespace"), pod.get("name"), pod.get("container")
    if not (isinstance(ns, str) and isinstance(name, str)):
        return [], [], "the report names no pod, so no log is shown"
    try:
        inst = await log_store.find_async(namespace=ns, pod=name, container=container or None)
        if pod.get("containerID") and inst.container_id and inst.container_id != pod.get("containerID"):
            inst = await log_store.find_async(
                namespace=ns, pod=name, container=container or None, previous=True
            )
    except (store.LogNotFound, store.ContainerRequired, ValueError) as exc:
        return [], [], f"no stored log: {exc}"
    kill = page.parse_time(pod.get("finishedAt"))
    kill_ns = int(kill.timestamp() * 1e9) + 999_999_999 if kill is not None else None
    lines: list[page.LogLine] = []
    peaks: list[tuple[datetime, int, int]] = []
    total = 0
    async for item in reading.read(inst, tail=SCANNED_LINES, follow=False):
        if isinstance(item, reading.LinesBlock):
            for ts, raw in zip(item.stamps(), item.payload.texts(item.start), strict=True):
                if kill_ns is not None and ts > kill_ns:
                    continue
                total += 1
                text = raw.decode("utf-8", "replace")
                lines.append(page.LogLine(at=_utc(ts), text=text))
                if "epoch" in text:
                    parsed = memory_line.parse(text)
                    if parsed is not None and parsed.pod is not None:
                        peak = parsed.pod.epoch_peak_bytes or parsed.pod.peak_bytes
                        peaks.append((_utc(ts), parsed.epoch, peak))
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
        lines = lines[-SHOWN_LINES * 2 :]
    shown = lines[-SHOWN_LINES:]
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
    found = await _find(request, namespace, job)
    if isinstance(found, web.Response):
        return found
    headers = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
    if fmt == "json":
        return web.Response(text=json.dumps(found.document), content_type="application/json", headers=headers)
    log_store = request.app[log_http.STORE]
    try:
        lines, epochs, note = await log_context(log_store, found.document)
    except store.StoreClosed:
        lines, epochs, note = [], [], "the log store is shutting down"
    stored = await _stored_timeline(log_store.root, namespace, job, found.document)
    samples, restarts, projection = (
        stored_timeline.expand(stored)
        if stored is not None and report_timeline.belongs_to(stored, found.document)
        else ([], [], None)
    )
    doc = page.render(
        page.PageInput(
            title=f"{namespace}/{job}",
            report=found.document,
            log_lines=lines,
            log_note=note,
            epochs=epochs,
            samples=samples,
            restarts=restarts,
            projection=projection,
            generated_at=datetime.now(UTC),
            json_url=report_url("", namespace=namespace, job=job) + "?format=json",
        )
    )
    headers["Content-Security-Policy"] = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    return web.Response(text=doc, content_type="text/html", headers=headers)


async def _stored_timeline(
    root: Path, namespace: str, job: str, report: dict[str, Any]
) -> dict[str, Any] | None:
    """The timeline filed next to the logs of the report's pod (the root cause's, for a multi-pod job)."""
    pod = report_timeline.pod_of(report)
    if pod is None:
        return None
    return await asyncio.to_thread(report_timeline.load, root, namespace=namespace, job=job, pod=pod)


async def get_timeline_svg(request: web.Request) -> web.StreamResponse:
    """``GET /reports/{namespace}/{job}/timeline.svg``: the SVG filed with the report, for tickets."""
    namespace, job = request.match_info["namespace"], request.match_info["job"]
    if request.query:
        return web.Response(status=400, text="timeline.svg takes no parameters\n")
    found = await _find(request, namespace, job)
    if isinstance(found, web.Response):
        return found
    root = request.app[log_http.STORE].root
    stored = await _stored_timeline(root, namespace, job, found.document)
    svg = None
    pod = report_timeline.pod_of(found.document)
    if stored is not None and pod is not None:
        directory = report_timeline.pod_dir(root, namespace=namespace, job=job, pod=pod)
        try:
            svg = await asyncio.to_thread((directory / stored_timeline.SVG_NAME).read_text, encoding="utf-8")
        except OSError:
            svg = None
    if svg is None or stored is None or not report_timeline.belongs_to(stored, found.document):
        return web.Response(
            status=404, text=f"no timeline of the report of {namespace}/{job} is filed in the log store\n"
        )
    headers = {
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
    }
    return web.Response(text=svg, content_type="image/svg+xml", headers=headers)


async def _find(request: web.Request, namespace: str, job: str) -> Found | web.Response:
    """The job's report after the log server's access checks, or the response that refuses it."""
    try:
        store.check_name("namespace", namespace)
        store.check_name("job", job)
    except ValueError as exc:
        return web.Response(status=400, text=f"{exc}\n")
    peer = request.remote or "unknown"
    failures = request.app[log_http.FAILURES]
    if failures.exhausted(peer):
        return web.Response(
            status=429,
            text="too many failed authentications; retry in a minute\n",
            headers={"Retry-After": "60"},
        )
    try:
        await request.app[log_http.REVIEWER].check(
            authorization=request.headers.get("Authorization"), namespace=namespace
        )
    except auth.AccessError as exc:
        if isinstance(exc, auth.Unauthenticated):
            failures.spend(peer)
        headers = {"WWW-Authenticate": 'Bearer realm="podmortem"'} if exc.status == 401 else {}
        return web.Response(status=exc.status, text=f"{exc}\n", headers=headers)
    try:
        found = await request.app[FINDER].find(namespace, job)
    except Missing as exc:
        return web.Response(status=404, text=f"{exc}\n")
    except kube_mod.KubeError as exc:
        return web.Response(status=503, text=f"the Kubernetes API did not answer: {exc}\n")
    pod_ns = (found.document.get("pod") or {}).get("namespace")
    if pod_ns not in (None, namespace):  # a report never shows another namespace's pod
        return web.Response(status=404, text=f"the report of {namespace}/{job} names another namespace\n")
    return found


def add_routes(app: web.Application, finder: ReportFinder) -> None:
    """Serve ``GET /reports/{namespace}/{job}`` on the log server's app (made by ``logs.http.make_app``)."""
    app[FINDER] = finder
    app.router.add_get("/reports/{namespace}/{job}", get_report)
    app.router.add_get("/reports/{namespace}/{job}/timeline.svg", get_timeline_svg)
