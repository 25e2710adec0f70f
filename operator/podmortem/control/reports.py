"""On exit 137, OOMKilled or eviction: collect evidence, diagnose, and write the report within 2 s.

The steps run against a clock that starts when the operator sees the
termination. The agent on the pod's node is asked with a short timeout; the
log facts are in memory already; Prometheus (the working set over the pod's
whole life) gets a fraction of a second inline, and when it is slower its
series is patched into the report afterwards. Every source that fails is
named in the report instead of failing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp

from podmortem.control import kube as kube_mod
from podmortem.control import log_links, metrics, prometheus, verdicts
from podmortem.control.agent_client import AgentClient, AgentUnavailable
from podmortem.control.annotations import FAILURE_REPORT
from podmortem.control.following import PodLogFacts
from podmortem.control.jobs import Target
from podmortem.control.settings import OperatorSettings
from podmortem.control.status import StatusWriter
from podmortem.control.termination import Termination
from podmortem.reports.evidence import PodEvidence
from podmortem.reports.failure import FailureReport

logger = logging.getLogger(__name__)

#: Points of the working-set series kept in a report (evenly thinned, the peak always kept).
SERIES_POINTS = 48


@dataclass
class Outcome:
    """What one report run produced, for metrics, tests and the benchmark."""

    termination: Termination
    target: Target
    report: FailureReport
    document: dict[str, Any]
    #: Seconds from seeing the termination to the report written.
    latency_s: float
    #: Where it went: "status", "annotation", "event".
    written: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else None


def _ns_iso(ns: int | None) -> str | None:
    return _iso(datetime.fromtimestamp(ns / 1e9, UTC)) if ns is not None else None


def thin(points: list[tuple[datetime, int]], *, keep: int = SERIES_POINTS) -> list[list[Any]]:
    """At most ``keep`` points, evenly spaced, always with the peak and the last point."""
    if not points:
        return []
    if len(points) > keep:
        step = len(points) / keep
        picked = {int(i * step) for i in range(keep)}
        picked.add(len(points) - 1)
        picked.add(max(range(len(points)), key=lambda i: points[i][1]))
        points = [points[i] for i in sorted(picked)]
    return [[_iso(at), value] for at, value in points]


def working_set_document(ws: prometheus.WorkingSet) -> dict[str, Any]:
    doc: dict[str, Any] = {"source": ws.source}
    peak = ws.peak
    if peak is not None:
        doc["peakBytes"] = peak[1]
        doc["peakAt"] = _iso(peak[0])
    if ws.note:
        doc["note"] = ws.note
    doc["points"] = thin(ws.points)
    return doc


class Reporter:
    """Writes one failure report per terminated container instance."""

    def __init__(
        self,
        *,
        kube: kube_mod.Kube,
        agent: AgentClient,
        session: aiohttp.ClientSession,
        settings: OperatorSettings,
        status: StatusWriter,
        log_url: str = "",
    ) -> None:
        """``log_url`` is the base URL of the operator's log API (see ``OperatorSettings.log_base_url``)."""
        self.kube = kube
        self.agent = agent
        self.session = session
        self.settings = settings
        self.status = status
        self.log_url = log_url
        self._background: set[asyncio.Task[None]] = set()
        self.outcomes: list[Outcome] = []

    async def report(
        self,
        *,
        termination: Termination,
        target: Target,
        facts: PodLogFacts | None,
        seen_at: float,
    ) -> Outcome:
        """Collect, diagnose and write. ``seen_at`` is ``time.monotonic()`` when the termination was seen."""
        t = termination
        start, end = prometheus.life_span(t.started_at, t.finished_at, now=datetime.now(UTC))
        prom_task: asyncio.Task[prometheus.WorkingSet] | None = None
        if self.settings.prometheus.url:
            prom_task = asyncio.create_task(
                prometheus.query_working_set(
                    session=self.session,
                    settings=self.settings.prometheus,
                    namespace=t.namespace,
                    pod=t.pod,
                    start=start,
                    end=end,
                )
            )
        evidence = await self.agent.evidence(node=t.node, pod_uid=t.pod_uid)
        errors: list[str] = []
        if isinstance(evidence, AgentUnavailable):
            metrics.EVIDENCE_FAILURES.labels(source="agent").inc()
            errors.append(evidence.reason)
            agent_evidence: PodEvidence | None = None
        else:
            agent_evidence = evidence

        working_set, prom_pending = await self._working_set(prom_task, agent_evidence, errors)
        last_line_ns = facts.last_line_at_ns(t.container) if facts is not None else None
        report = verdicts.diagnose_termination(
            termination=t,
            evidence=agent_evidence,
            last_line_ns=last_line_ns,
            stale_after_s=self.settings.stale_log_threshold_s,
        )
        document = self._document(report, t, agent_evidence, errors, working_set, facts, prom_pending)
        outcome = Outcome(termination=t, target=target, report=report, document=document, latency_s=0.0)
        await self._write(outcome)
        outcome.latency_s = time.monotonic() - seen_at
        metrics.REPORT_LATENCY.observe(outcome.latency_s)
        metrics.OOM_KILLS.labels(namespace=t.namespace, verdict=report.verdict or "unknown").inc()
        self.outcomes.append(outcome)
        if prom_pending and prom_task is not None:
            self._spawn(self._patch_working_set_later(outcome, prom_task))
        return outcome

    async def _working_set(
        self,
        prom_task: asyncio.Task[prometheus.WorkingSet] | None,
        evidence: PodEvidence | None,
        errors: list[str],
    ) -> tuple[prometheus.WorkingSet, bool]:
        samples = evidence.samples if evidence is not None else []
        if prom_task is None:
            return prometheus.from_samples(
                samples, note="no Prometheus configured; from the agent's samples"
            ), False
        done, _ = await asyncio.wait({prom_task}, timeout=self.settings.prometheus.inline_wait_s)
        if not done:
            return prometheus.from_samples(
                samples, note="Prometheus is slow; its series follows shortly"
            ), True
        try:
            ws = prom_task.result()
        except prometheus.PrometheusError as exc:
            metrics.EVIDENCE_FAILURES.labels(source="prometheus").inc()
            errors.append(str(exc))
            return prometheus.from_samples(samples, note=f"{exc}; from the agent's samples"), False
        if not ws.points and samples:
            return prometheus.from_samples(samples, note=ws.note + "; from the agent's samples"), False
        return ws, False

    def _document(
        self,
        report: FailureReport,
        t: Termination,
        evidence: PodEvidence | None,
        errors: list[str],
        working_set: prometheus.WorkingSet,
        facts: PodLogFacts | None,
        prom_pending: bool,
    ) -> dict[str, Any]:
        log: dict[str, Any] = {"location": f"{t.namespace}/{t.pod}/{t.container}"}
        log["url"] = log_links.log_url(
            self.log_url, namespace=t.namespace, pod=t.pod, container=t.container
        )
        if facts is not None:
            log["lastLineAt"] = _ns_iso(facts.last_line_at_ns(t.container))
            log["lines"] = facts.lines
            log["gaps"] = [
                {"reason": str(g.reason), "after": _ns_iso(g.after_ts_ns), "before": _ns_iso(g.before_ts_ns)}
                for g in facts.gaps
                if g.container == t.container
            ]
            if facts.error:
                log["error"] = facts.error
        else:
            log["note"] = "the log of this pod was not followed"
        context = {
            "pod": {
                "namespace": t.namespace,
                "name": t.pod,
                "uid": t.pod_uid,
                "node": t.node,
                "container": t.container,
                "containerID": t.container_id,
                "exitCode": t.exit_code,
                "reason": t.reason,
                "podReason": t.pod_reason,
                "podMessage": t.pod_message,
                "startedAt": _iso(t.started_at),
                "finishedAt": _iso(t.finished_at),
            },
            "reportedAt": kube_mod.now_rfc3339(),
            "evidence": {
                "agent": "ok" if evidence is not None else "unavailable",
                "kernelRecords": len(evidence.kernel_records) if evidence is not None else 0,
                "samples": len(evidence.samples) if evidence is not None else 0,
                "workingSet": working_set_document(working_set) | ({"pending": True} if prom_pending else {}),
                "log": log,
                "errors": errors,
            },
        }
        return context

    def status_document(self, outcome: Outcome) -> dict[str, Any]:
        """The report with its context, trimmed to the status budget."""
        return fit(outcome.report, outcome.document, max_bytes=self.settings.status_report_max_bytes)

    def annotation_document(self, outcome: Outcome) -> dict[str, Any]:
        return summary(outcome.report, outcome.document, max_bytes=self.settings.annotation_report_max_bytes)

    async def _write(self, outcome: Outcome) -> None:
        target = outcome.target
        t = outcome.termination
        verdict = outcome.report.verdict or "unknown"
        cause = next((f for f in outcome.report.findings if f.code == verdict), None)
        headline = (
            cause.message if cause is not None else f"exit {t.exit_code}, reason {t.reason or t.pod_reason}"
        )
        if target.role == "trainingjob":
            try:
                await self.status.patch(
                    namespace=target.namespace,
                    name=target.name,
                    fields={"failureReport": self.status_document(outcome)},
                    conditions=[("Failed", True, _reason(verdict), headline)],
                )
                outcome.written.append("status")
                metrics.REPORTS.labels(target="status", outcome="ok").inc()
            except (kube_mod.KubeError, aiohttp.ClientError, TimeoutError) as exc:
                outcome.errors.append(f"status: {exc}")
                metrics.REPORTS.labels(target="status", outcome="error").inc()
        elif target.role == "foreign" or self.settings.patch_pods:
            body = {
                "metadata": {
                    "annotations": {
                        FAILURE_REPORT: json.dumps(self.annotation_document(outcome), separators=(",", ":"))
                    }
                }
            }
            try:
                await self.kube.merge_patch(target.path(), body)
                outcome.written.append("annotation")
                metrics.REPORTS.labels(target="annotation", outcome="ok").inc()
            except (kube_mod.KubeError, aiohttp.ClientError, TimeoutError) as exc:
                outcome.errors.append(f"annotation: {exc}")
                metrics.REPORTS.labels(target="annotation", outcome="error").inc()
        where = "status.failureReport" if target.role == "trainingjob" else FAILURE_REPORT
        message = f"{t.pod}/{t.container} {verdict}: {headline} (podmortem failure report in {where})"
        try:
            await self.kube.post_event(
                involved=target.involved(), type_="Warning", reason=_reason(verdict), message=message
            )
            outcome.written.append("event")
            metrics.REPORTS.labels(target="event", outcome="ok").inc()
        except (kube_mod.KubeError, aiohttp.ClientError, TimeoutError) as exc:
            outcome.errors.append(f"event: {exc}")
            metrics.REPORTS.labels(target="event", outcome="error").inc()

    async def _patch_working_set_later(
        self, outcome: Outcome, prom_task: asyncio.Task[prometheus.WorkingSet]
    ) -> None:
        try:
            ws = await prom_task
        except prometheus.PrometheusError as exc:
            metrics.EVIDENCE_FAILURES.labels(source="prometheus").inc()
            outcome.document["evidence"]["workingSet"]["pending"] = False
            outcome.document["evidence"]["errors"].append(str(exc))
        else:
            if not ws.points:
                return
            outcome.document["evidence"]["workingSet"] = working_set_document(ws)
        try:
            target = outcome.target
            if target.role == "trainingjob":
                await self.status.patch(
                    namespace=target.namespace,
                    name=target.name,
                    fields={"failureReport": self.status_document(outcome)},
                )
            elif target.role == "foreign" or self.settings.patch_pods:
                body = {
                    "metadata": {
                        "annotations": {
                            FAILURE_REPORT: json.dumps(
                                self.annotation_document(outcome), separators=(",", ":")
                            )
                        }
                    }
                }
                await self.kube.merge_patch(target.path(), body)
        except (kube_mod.KubeError, aiohttp.ClientError, TimeoutError) as exc:
            logger.warning("patching the Prometheus working set into %s failed: %s", outcome.target.name, exc)

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def stop(self) -> None:
        for task in list(self._background):
            task.cancel()
        for task in list(self._background):
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _reason(verdict: str) -> str:
    """A condition/Event reason (CamelCase) from a verdict code: ``memcg-limit`` -> ``MemcgLimit``."""
    return "".join(part.capitalize() for part in verdict.replace("_", "-").split("-") if part) or "Unknown"


def fit(report: FailureReport, context: Mapping[str, Any], *, max_bytes: int) -> dict[str, Any]:
    """The report plus context in at most ``max_bytes`` of JSON, trimming the bulk first.

    The working-set series goes first (halved until it fits), then the report's own
    ``trimmed()`` steps. The verdict and findings' messages always stay.
    """
    ctx: dict[str, Any] = json.loads(json.dumps(context))
    series = ctx.get("evidence", {}).get("workingSet", {})

    def size(doc: dict[str, Any]) -> int:
        return len(json.dumps(doc, separators=(",", ":")).encode())

    doc = report.model_dump(mode="json") | ctx
    while size(doc) > max_bytes and len(series.get("points") or []) > 2:
        series["points"] = series["points"][::2]
        doc = report.model_dump(mode="json") | ctx
    if size(doc) > max_bytes:
        budget = max_bytes - size(ctx)
        trimmed = report.trimmed(max(budget, 0))
        doc = trimmed.model_dump(mode="json") | ctx
        if size(doc) > max_bytes and series.get("points"):
            series["points"] = []
            series["dropped"] = "series dropped to fit the report size limit"
            doc = trimmed.model_dump(mode="json") | ctx
    return doc


def summary(report: FailureReport, context: Mapping[str, Any], *, max_bytes: int) -> dict[str, Any]:
    """The annotation's JSON summary (verdict, pod, kill, findings), within ``max_bytes``."""
    pod = dict(context.get("pod", {}))
    evidence = context.get("evidence", {})
    ws = evidence.get("workingSet", {})
    doc: dict[str, Any] = {
        "verdict": report.verdict,
        "reportedAt": context.get("reportedAt"),
        "pod": {
            k: pod.get(k)
            for k in (
                "namespace",
                "name",
                "uid",
                "node",
                "container",
                "containerID",
                "exitCode",
                "reason",
                "podReason",
                "finishedAt",
            )
        },
        "findings": [
            {"code": f.code, "severity": str(f.severity), "message": f.message} for f in report.findings
        ],
        "workingSetPeakBytes": ws.get("peakBytes"),
        "lastLogLineAt": evidence.get("log", {}).get("lastLineAt"),
        "logUrl": evidence.get("log", {}).get("url"),
        "errors": list(evidence.get("errors", [])),
    }
    if report.kill is not None:
        doc["kill"] = {"pid": report.kill.pid, "comm": report.kill.comm, "anonRssKb": report.kill.anon_rss_kb}

    def size() -> int:
        return len(json.dumps(doc, separators=(",", ":")).encode())

    # Trim in order of least value until it fits: error detail, extra findings, long messages.
    steps = (
        lambda: doc.update(errors=[e[:200] for e in doc["errors"][:2]]),
        lambda: doc.update(findings=doc["findings"][:3]),
        lambda: [f.update(message=f["message"][:300]) for f in doc["findings"]],
        lambda: doc.update(errors=[]),
        lambda: doc.update(findings=doc["findings"][:1]),
        lambda: [f.update(message=f["message"][:100]) for f in doc["findings"]],
    )
    for step in steps:
        if size() <= max_bytes:
            break
        step()
        doc["truncated"] = True
    return doc
