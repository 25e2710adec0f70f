"""On exit 137, OOMKilled or eviction: collect evidence, diagnose, and write the report within 2 s.

The steps run against a clock that starts when the operator sees the
termination. The agent on the pod's node is asked with a short timeout; the
log facts are in memory already; Prometheus (the working set over the pod's
whole life) gets a fraction of a second inline. What comes later is patched
in afterwards: Prometheus' series, and the kernel's OOM record, which the
agent often holds only a second or more after the kubelet reported the kill
(see :mod:`podmortem.operator.reporting.kernel_record`). Every source that fails is
named in the report instead of failing it.

Why one module of this size: a report's first write, its Event, the kernel-record follow-up and the
resume after a restart share one Outcome per termination and its write order; the pure parts
(diagnosis, stored form, kernel-record states) already live elsewhere.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp

from podmortem.background import Background
from podmortem.diagnosis import job_root_cause, job_section, sidecar_findings, verdicts
from podmortem.diagnosis.termination import Termination
from podmortem.kube import api as kube_mod
from podmortem.logs.storage.store import LogStore
from podmortem.memory_line.status import peak_of_limit
from podmortem.operator import log_links, metrics, sidecar_injection
from podmortem.operator.annotations import FAILURE_REPORT
from podmortem.operator.following import PodLogFacts
from podmortem.operator.job_pressure import ProjectionLine
from podmortem.operator.jobs import Target
from podmortem.operator.reporting import kernel_record, prometheus, report_timeline
from podmortem.operator.reporting.agent_client import AgentClient, AgentUnavailable
from podmortem.operator.settings import OperatorSettings
from podmortem.operator.status import StatusWriter
from podmortem.operator.targets import Targets, WatchedTarget
from podmortem.reports.document import (
    Evidence,
    KernelRecordEvidence,
    KernelRecordState,
    LogEvidence,
    LogGap,
    PodContext,
    ReportDocument,
    WorkingSetEvidence,
    merge_patch,
    pod_peak,
    with_job,
)
from podmortem.reports.evidence import PodEvidence
from podmortem.reports.failure import FailureReport
from podmortem.reports.sidecar_evidence import SidecarEvidence
from podmortem.reports.timeline_model import Projection

logger = logging.getLogger(__name__)

#: Points of the working-set series kept in a report (evenly thinned, the peak always kept).
SERIES_POINTS = 48


@dataclass
class Outcome:
    """What one report run produced, for metrics, tests and the benchmark; later patches update it."""

    termination: Termination
    target: Target
    #: The report with its context, as written (and rewritten as evidence comes).
    document: ReportDocument
    #: Seconds from seeing the termination to the report written.
    latency_s: float
    #: Where it went: "status", "annotation", "event".
    written: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: The log's last line (for re-diagnosing when the kernel record comes late).
    last_line_ns: int | None = None
    #: Why the agent gave no evidence in the report's budget, if it did not.
    agent_error: str | None = None
    #: The first report and its patches (Prometheus series, kernel record) are written one at a time.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: The pod's sidecar evidence (sidecar mode), once read; ``sidecar_read``: its message was read
    #: (or there is no sidecar), so a later pod event does not read it again.
    sidecar: SidecarEvidence | None = None
    sidecar_read: bool = True
    #: Its place among the reports written (the order of `Reporter.outcomes`).
    order: int = 0

    @property
    def report(self) -> FailureReport:
        return self.document.report

    @report.setter
    def report(self, report: FailureReport) -> None:
        self.document.report = report

    @property
    def kernel_record_state(self) -> KernelRecordState | None:
        return self.document.kernel_record_state


def _ns_time(ns: int | None) -> datetime | None:
    return datetime.fromtimestamp(ns // 1_000_000_000, UTC) if ns is not None else None


def thin(points: list[tuple[datetime, int]], *, keep: int = SERIES_POINTS) -> list[tuple[datetime, int]]:
    """At most ``keep`` points, evenly spaced, always with the peak and the last point."""
    if len(points) > keep:
        step = len(points) / keep
        picked = {int(i * step) for i in range(keep)}
        picked.add(len(points) - 1)
        picked.add(max(range(len(points)), key=lambda i: points[i][1]))
        points = [points[i] for i in sorted(picked)]
    return list(points)


def working_set_evidence(ws: prometheus.WorkingSet, *, pending: bool = False) -> WorkingSetEvidence:
    peak = ws.peak
    return WorkingSetEvidence(
        source=ws.source,
        peak_bytes=peak[1] if peak is not None else None,
        peak_at=peak[0] if peak is not None else None,
        note=ws.note or None,
        points=thin(ws.points),
        pending=pending,
    )


def with_agent(evidence: Evidence, agent: PodEvidence | None) -> Evidence:
    """``evidence`` with the summary of what the agent gave."""
    return evidence.model_copy(update={
        "agent": "ok" if agent is not None else "unavailable",
        "kernel_records": len(agent.kernel_records) if agent is not None else 0,
        "samples": len(agent.samples) if agent is not None else 0,
    })


def _no_record_note(evidence: PodEvidence | None, *, waited_s: float) -> str:
    when = f"within {waited_s:g} s of the report" if waited_s > 0 else "when the report was written"
    note = f"no kernel OOM record of this pod had reached the node agent {when}"
    if evidence is None:
        return note + "; the agent did not answer"
    if evidence.kmsg is not None and not evidence.kmsg.readable:
        return note + f"; the agent cannot read the kernel log ({evidence.kmsg.error or 'no reason given'})"
    if evidence.kmsg_lost:
        return note + f"; {evidence.kmsg_lost} record(s) on the node were lost to ring-buffer overwrites"
    return note


@dataclass
class JobView:
    """A multi-pod job's root cause as last computed, and the uid of its root-cause pod."""

    result: job_root_cause.JobRootCause
    root_uid: str | None


def compute_job(known: WatchedTarget) -> tuple[JobView, str | None] | None:
    """The job's root cause from its pods' facts (None: under two pods, or none failed), and the
    ``JobRootCause`` Event's message when the root, or the line the Event quotes, is not the one
    announced last (a root cause's report that changed makes the earlier Event's text stale)."""
    pods = list(known.job_pods.items())
    if len(pods) < 2 or not any(p.failed for _, p in pods):
        return None
    result = job_root_cause.root_cause([p for _, p in pods])
    root = result.root
    root_uid = next((u for u, p in pods if p is root), None)
    line = next((r.line for r in result.rows if r.facts is root), "")
    key = (root.pod, result.guessed, line) if root is not None else None
    event = job_section.headline(result) if key != known.job_root else None
    known.job_root = key
    return JobView(result=result, root_uid=root_uid), event


class Reporter:
    """Writes one failure report per terminated container instance, and a multi-pod job's section."""

    def __init__(
        self,
        *,
        kube: kube_mod.Kube,
        agent: AgentClient,
        session: aiohttp.ClientSession,
        settings: OperatorSettings,
        status: StatusWriter,
        log_url: str = "",
        log_store: LogStore | None = None,
        projection_of: Callable[[str], ProjectionLine | None] | None = None,
        targets: Targets | None = None,
    ) -> None:
        """``log_url`` is the base URL of the operator's log API (see ``OperatorSettings.log_base_url``);
        ``log_store``, where each report's timeline is filed beside the pod's logs (none: not filed);
        ``projection_of``, the early warning's projection line of a pod, drawn on its timeline;
        ``targets``, the followed targets, whose multi-pod jobs' sections a changed report refreshes."""
        self.kube = kube
        self.agent = agent
        self.session = session
        self.settings = settings
        self.status = status
        self.log_url = log_url
        self.log_store = log_store
        self._background = Background("reporter")
        self.projection_of = projection_of
        self.targets = targets
        #: Every report of a pod still known, by pod uid, in the order written: what a restart count
        #: and a foreign job's page read. Dropped with the pod (`forget_pod`) or its job (`forget_target`).
        self._of_pod: dict[str, list[Outcome]] = {}
        #: The latest outcome per pod uid (a job's report shows its root-cause pod's).
        self.by_pod: dict[str, Outcome] = {}
        #: The latest outcome of each target that is not a TrainingJob, by (namespace, name): its page.
        self._latest: dict[tuple[str, str], Outcome] = {}
        #: Target uid -> its job-level root cause, for foreign jobs with more than one pod.
        self.jobs: dict[str, JobView] = {}
        #: One annotation write at a time per target, each composed from the state at its turn.
        self._target_locks: dict[str, asyncio.Lock] = {}
        self._written = 0

    @property
    def outcomes(self) -> list[Outcome]:
        """Every report still kept, in the order written (for tests, the bench and the page)."""
        return sorted((o for kept in self._of_pod.values() for o in kept), key=lambda o: o.order)

    def latest_of(self, namespace: str, name: str) -> Outcome | None:
        """The latest report of a target that is not a TrainingJob (its page), if still kept."""
        return self._latest.get((namespace, name))

    def _keep(self, outcome: Outcome) -> None:
        self._written += 1
        outcome.order = self._written
        self._of_pod.setdefault(outcome.termination.pod_uid, []).append(outcome)
        if outcome.target.role != "trainingjob":
            self._latest[(outcome.target.namespace, outcome.target.name)] = outcome

    def forget_pod(self, pod_uid: str) -> None:
        """The pod is deleted: drop its reports, unless a foreign job's section and page still show them
        (they go with the job, `forget_target`). A TrainingJob's report stays in its status."""
        kept = self._of_pod.get(pod_uid, [])
        if any(o.target.role == "foreign" for o in kept):
            return
        self._drop(pod_uid)

    def drop_pod(self, pod_uid: str) -> None:
        """The pod finished long ago and nobody deletes it: drop its reports, whatever its job."""
        self._drop(pod_uid)

    def settled(self, pod_uid: str) -> bool:
        """No follow-up of the pod's reports runs (a late kernel record, a slow Prometheus)."""
        for outcome in self._of_pod.get(pod_uid, ()):
            pod = outcome.termination.pod
            if any(self._background.running(f"{what}-{pod}") for what in ("kernel-record", "working-set")):
                return False
        return True

    def forget_target(self, target_uid: str) -> None:
        """The job (TrainingJob or a foreign one) is deleted: drop its section and all its pods' reports."""
        self.jobs.pop(target_uid, None)
        self._target_locks.pop(target_uid, None)
        pods = [uid for uid, kept in self._of_pod.items() if any(o.target.uid == target_uid for o in kept)]
        for uid in pods:
            self._drop(uid)

    def _drop(self, pod_uid: str) -> None:
        for outcome in self._of_pod.pop(pod_uid, []):
            key = (outcome.target.namespace, outcome.target.name)
            if self._latest.get(key) is outcome:
                del self._latest[key]
        self.by_pod.pop(pod_uid, None)
        lock = self._target_locks.get(pod_uid)  # a bare pod is its own target
        if lock is not None and not lock.locked():
            del self._target_locks[pod_uid]

    def kept(self) -> dict[str, int]:
        """How much per-pod and per-job state is held (for tests and the soak bench)."""
        return {"pods": len(self._of_pod), "reports": sum(map(len, self._of_pod.values())),
                "latest": len(self._latest), "jobs": len(self.jobs), "locks": len(self._target_locks)}

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
        agent_error: str | None = None
        if isinstance(evidence, AgentUnavailable):
            metrics.EVIDENCE_FAILURES.labels(source="agent").inc()
            agent_error = evidence.reason
            errors.append(agent_error)
            agent_evidence: PodEvidence | None = None
        else:
            agent_evidence = evidence

        working_set, prom_pending = await self._working_set(prom_task, agent_evidence, errors)
        last_line_ns = facts.last_line_at_ns(t.container) if facts is not None else None
        record = kernel_record.initial_state(t, agent_evidence, settings=self.settings.agent)
        report = verdicts.diagnose_termination(
            termination=t,
            evidence=agent_evidence,
            last_line_ns=last_line_ns,
            stale_after_s=self.settings.stale_log_threshold_s,
            record_pending=record == kernel_record.PENDING,
            log_tail=facts.last_lines(t.container) if facts is not None else (),
        )
        sidecar = sidecar_findings.read(t, sidecar_injection.identity(self.settings.sidecar))
        if record != kernel_record.ATTACHED and sidecar.evidence is not None:
            report = sidecar_findings.apply(report, t, sidecar.evidence)
        document = self._document(t, agent_evidence, record, errors, working_set, facts, prom_pending)
        document.report = report
        document.report_url = self.page_url(target)
        document.evidence.sidecar = sidecar.summary
        if t.sidecar and not self.settings.agent.enabled:
            note = "the kernel's record is " + sidecar_findings.NO_KERNEL_RECORD
            document.evidence.kernel_record.note = note
        outcome = Outcome(
            termination=t,
            target=target,
            document=document,
            latency_s=0.0,
            last_line_ns=last_line_ns,
            agent_error=agent_error,
            sidecar=sidecar.evidence,
            sidecar_read=sidecar.summary is None or sidecar.summary.state != "pending",
        )
        self.by_pod[t.pod_uid] = outcome
        self._keep(outcome)
        await self._write(outcome)
        outcome.latency_s = time.monotonic() - seen_at
        metrics.REPORT_LATENCY.observe(outcome.latency_s)
        metrics.OOM_KILLS.labels(namespace=t.namespace, verdict=report.verdict or "unknown").inc()
        if prom_pending and prom_task is not None:
            self._spawn(self._patch_working_set_later(outcome, prom_task), name=f"working-set-{t.pod}")
        if record == kernel_record.PENDING:
            self._spawn(self._attach_record_later(outcome), name=f"kernel-record-{t.pod}")
        elif record != kernel_record.NOT_SOUGHT:
            metrics.KERNEL_RECORDS.labels(outcome=record).inc()
        await self._file_timeline(outcome, agent_evidence)
        return outcome

    async def _file_timeline(self, outcome: Outcome, evidence: PodEvidence | None) -> None:
        """The timeline with the agent's samples next to the job's logs (`report_timeline`; best effort)."""
        t = outcome.termination
        if self.log_store is None:
            return
        await report_timeline.save(
            self.log_store,
            namespace=outcome.target.namespace,
            job=outcome.target.name,
            pod=t.pod,
            report=outcome.document,
            samples=evidence.samples if evidence is not None else [],
            restarts=report_timeline.restarts_of(t, (o.termination for o in self._of_pod.get(t.pod_uid, ()))),
            projection=self._projection(t.pod_uid),
        )

    def _projection(self, pod_uid: str) -> Projection | None:
        line = self.projection_of(pod_uid) if self.projection_of is not None else None
        if line is None:
            return None
        start_ns, start_bytes, end_ns, end_bytes, text = line
        return Projection(start=datetime.fromtimestamp(start_ns / 1e9, UTC), start_bytes=start_bytes,
                          end=datetime.fromtimestamp(end_ns / 1e9, UTC), end_bytes=end_bytes, text=text)

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
        t: Termination,
        evidence: PodEvidence | None,
        record: kernel_record.State,
        errors: list[str],
        working_set: prometheus.WorkingSet,
        facts: PodLogFacts | None,
        prom_pending: bool,
    ) -> ReportDocument:
        url = log_links.log_url(self.log_url, namespace=t.namespace, pod=t.pod, container=t.container)
        log = LogEvidence(location=f"{t.namespace}/{t.pod}/{t.container}", url=url)
        if facts is not None:
            log.last_line_at = _ns_time(facts.last_line_at_ns(t.container))
            log.lines = facts.lines
            log.gaps = [
                LogGap(reason=str(g.reason), after=_ns_time(g.after_ts_ns), before=_ns_time(g.before_ts_ns))
                for g in facts.gaps
                if g.container == t.container
            ]
            log.error = facts.error or None
        else:
            log.note = "the log of this pod was not followed"
        kernel = KernelRecordEvidence(state=record)
        if record == kernel_record.PENDING:
            kernel.note = (
                "the node agent had no kernel record of this kill yet; it is asked again for "
                f"{self.settings.agent.record_wait_s:g} s and this report is updated when it comes"
            )
        elif record == kernel_record.NOT_FOUND:
            kernel.note = _no_record_note(evidence, waited_s=0)
        return ReportDocument(
            pod=PodContext(
                namespace=t.namespace,
                name=t.pod,
                uid=t.pod_uid,
                node=t.node,
                container=t.container,
                container_id=t.container_id,
                exit_code=t.exit_code,
                reason=t.reason,
                pod_reason=t.pod_reason,
                pod_message=t.pod_message,
                started_at=t.started_at,
                finished_at=t.finished_at,
                time_zone=t.time_zone or None,
            ),
            reported_at=datetime.now(UTC),
            evidence=with_agent(Evidence(
                kernel_record=kernel,
                working_set=working_set_evidence(working_set, pending=prom_pending),
                log=log,
                errors=errors,
            ), evidence),
        )

    def status_document(self, outcome: Outcome) -> dict[str, Any]:
        """The report with its context, trimmed to the status budget."""
        return outcome.document.to_status(max_bytes=self.settings.status_report_max_bytes)

    def annotation_document(self, outcome: Outcome) -> dict[str, Any]:
        return outcome.document.to_annotation(max_bytes=self.settings.annotation_report_max_bytes)

    def _where(self, target: Target) -> str:
        return "status.failureReport" if target.role == "trainingjob" else FAILURE_REPORT

    def page_url(self, target: Target) -> str:
        """The report page of ``target`` on the log server (``GET /reports/{namespace}/{job}``)."""
        return log_links.report_url(self.log_url, namespace=target.namespace, job=target.name)

    def _pointer(self, target: Target) -> str:
        """Where an Event's reader finds the report: the field or annotation, and the page."""
        return f"podmortem failure report in {self._where(target)}, page {self.page_url(target)}"

    def _headline(self, outcome: Outcome) -> tuple[str, str]:
        """The verdict and the one-line cause (a condition's and an Event's message)."""
        verdict = outcome.report.verdict or "unknown"
        cause = next((f for f in outcome.report.findings if f.code == verdict), None)
        t = outcome.termination
        return verdict, outcome.report.labelled(
            cause.message if cause is not None else f"exit {t.exit_code}, reason {t.reason or t.pod_reason}"
        )

    async def _put(self, outcome: Outcome, *, condition: bool) -> str | None:
        """Write the report where its target keeps it: ``status``, ``annotation``, or None (nowhere).

        ``condition`` also sets the TrainingJob's ``Failed`` condition from the verdict.
        """
        target = outcome.target
        async with outcome.lock:
            peak = outcome.document.evidence.peak = pod_peak(outcome.document)
            if target.role == "trainingjob":
                verdict, headline = self._headline(outcome)
                document = self.status_document(outcome)
                # The patch turns the report the status holds into this one (what it no longer has goes).
                held = self.status.fields(namespace=target.namespace, name=target.name).get("failureReport")
                fields: dict[str, Any] = {
                    "failureReport": merge_patch(held if isinstance(held, Mapping) else {}, document)
                }
                if peak is not None and peak.kind == "kernel" and peak.peak_bytes is not None:
                    # The kernel's usage at the kill is the peak (the cgroup was at its limit): the
                    # Peak/Limit column shows it, and says so, instead of the last memory line's (a
                    # record that is not the node's, the demo's recorded one, says that too).
                    word = "recorded kernel" if outcome.report.record_source else "kernel"
                    fields["memory"] = {
                        "podPeakBytes": peak.peak_bytes,
                        "peakOfLimit": peak_of_limit(peak.peak_bytes, peak.limit_bytes, source=word),
                        "peakSource": peak.source,
                    }
                    if peak.limit_bytes is not None:
                        fields["memory"]["podLimitBytes"] = peak.limit_bytes
                await self.status.patch(
                    namespace=target.namespace,
                    name=target.name,
                    fields=fields,
                    conditions=[("Failed", True, _reason(verdict), headline)] if condition else (),
                )
                return "status"
            if target.role == "foreign" or self.settings.patch_pods:
                await self._put_annotation(target, outcome)
                return "annotation"
            return None

    async def _put_annotation(self, target: Target, outcome: Outcome | None) -> None:
        """The annotation, composed at its turn: a job's root-cause pod's report plus the job section."""
        lock = self._target_locks.setdefault(target.uid, asyncio.Lock())
        async with lock:
            document = self.job_annotation_document(target, outcome)
            if document is None:
                return
            report = json.dumps(document, separators=(",", ":"))
            patch = {"metadata": {"annotations": {FAILURE_REPORT: report}}}
            await self.kube.merge_patch(target.path(), patch)

    def job_annotation_document(self, target: Target, outcome: Outcome | None) -> dict[str, Any] | None:
        """The annotation's summary; for a multi-pod job, of the root-cause pod, with the ``job`` section.

        The section gets what the summary leaves of the size limit; when that is under a third,
        the summary is cut to half the limit first.
        """
        view = self.jobs.get(target.uid)
        if view is None:
            return self.annotation_document(outcome) if outcome is not None else None
        shown = self.by_pod.get(view.root_uid or "") or outcome
        limit = self.settings.annotation_report_max_bytes
        doc = self.annotation_document(shown) if shown is not None else {}
        room = limit - _size(doc) - len(',"job":')
        if room < limit // 3 and shown is not None:
            doc = shown.document.to_annotation(max_bytes=limit // 2)
            room = limit - _size(doc) - len(',"job":')
        return with_job(doc, job_section.section(view.result, max_bytes=max(room, 0)))

    async def write_job(
        self, target: Target, view: JobView, *, event: str | None, outcome: Outcome | None,
        current: Callable[[], bool] | None = None,
    ) -> bool:
        """Record the job's root cause and write the annotation; post ``event`` (root changed) if given.

        ``current``: whether ``event`` is still the job's latest once the annotation is written (a
        pod's report that changed meanwhile made a newer one, posted by `_rewrite`; the older
        text must not come after it).
        """
        self.jobs[target.uid] = view
        ok = True
        try:
            await self._put_annotation(target, outcome)
            metrics.REPORTS.labels(target="annotation", outcome="ok").inc()
        except _WRITE_ERRORS as exc:
            ok = False
            metrics.REPORTS.labels(target="annotation", outcome="error").inc()
            logger.warning("writing the job report of %s/%s failed: %s", target.namespace, target.name, exc)
        if event is not None and (current is None or current()):
            await self._post_job_event(target, event)
        return ok

    async def _post_job_event(self, target: Target, event: str) -> None:
        """The ``JobRootCause`` Event: which pod failed first, quoting its line (`job_section.headline`)."""
        try:
            await self.kube.post_event(
                involved=target.involved(), type_="Warning", reason="JobRootCause",
                message=f"{event} ({self._pointer(target)})",
            )
        except _WRITE_ERRORS as exc:
            logger.warning("posting the JobRootCause event of %s failed: %s", target.name, exc)

    def headline_of(self, outcome: Outcome) -> tuple[str, str]:
        """The verdict and the one-line cause of a pod's report (the job section's line for it)."""
        return self._headline(outcome)

    async def _post_event(self, outcome: Outcome, *, reason: str, message: str) -> None:
        try:
            await self.kube.post_event(
                involved=outcome.target.involved(), type_="Warning", reason=reason, message=message
            )
            outcome.written.append("event")
            metrics.REPORTS.labels(target="event", outcome="ok").inc()
        except _WRITE_ERRORS as exc:
            outcome.errors.append(f"event: {exc}")
            metrics.REPORTS.labels(target="event", outcome="error").inc()
            # The report is written by now; without this line a refused Event (RBAC) left no trace.
            logger.warning("posting the %s event of %s failed: %s", reason, outcome.target.name, exc)

    async def _write(self, outcome: Outcome) -> None:
        place = "status" if outcome.target.role == "trainingjob" else "annotation"
        try:
            written = await self._put(outcome, condition=True)
            if written is not None:
                outcome.written.append(written)
                metrics.REPORTS.labels(target=written, outcome="ok").inc()
        except _WRITE_ERRORS as exc:
            outcome.errors.append(f"{place}: {exc}")
            metrics.REPORTS.labels(target=place, outcome="error").inc()
        t = outcome.termination
        verdict, headline = self._headline(outcome)
        message = (
            f"{t.pod}/{t.container} {verdict}: {headline} "
            f"({self._pointer(outcome.target)})"
        )
        await self._post_event(outcome, reason=_reason(verdict), message=message)

    async def _patch(self, outcome: Outcome, *, what: str, condition: bool = False) -> bool:
        """Write an updated report after the first; failures are logged (the first report stands)."""
        try:
            await self._put(outcome, condition=condition)
        except _WRITE_ERRORS as exc:
            logger.warning("patching %s into the report of %s failed: %s", what, outcome.target.name, exc)
            return False
        return True

    async def _patch_working_set_later(
        self, outcome: Outcome, prom_task: asyncio.Task[prometheus.WorkingSet]
    ) -> None:
        try:
            ws = await prom_task
        except prometheus.PrometheusError as exc:
            metrics.EVIDENCE_FAILURES.labels(source="prometheus").inc()
            outcome.document.evidence.working_set.pending = False
            outcome.document.evidence.errors.append(str(exc))
        else:
            if not ws.points:
                return
            outcome.document.evidence.working_set = working_set_evidence(ws)
        await self._patch(outcome, what="the Prometheus working set")

    def resume_pending_record(
        self, *, termination: Termination, target: Target, stored: Mapping[str, Any]
    ) -> None:
        """Finish the kernel-record follow-up of a report an earlier operator run left ``pending``.

        The agent is asked for what is left of ``record_wait_s`` since the report (at least once),
        and the report is patched as if this run had written it (`ReportDocument.parse` read it back).
        """
        document = ReportDocument.parse(stored)
        document.report_url = self.page_url(target)
        reported = document.reported_at
        elapsed = max(0.0, (datetime.now(UTC) - reported).total_seconds()) if reported is not None else 0.0
        last_line_ns = document.last_line_ns()
        empty = document.report.verdict is None and not document.report.findings
        if document.form == "annotation" or empty:
            # The summary keeps the findings' messages only: the report is made again from the pod.
            document.report = verdicts.diagnose_termination(
                termination=termination,
                evidence=None,
                last_line_ns=last_line_ns,
                stale_after_s=self.settings.stale_log_threshold_s,
            )
        outcome = Outcome(
            termination=termination,
            target=target,
            document=document,
            latency_s=0.0,
            last_line_ns=last_line_ns,
        )
        self._keep(outcome)
        self.by_pod.setdefault(termination.pod_uid, outcome)
        if not kernel_record.worth_seeking(termination, settings=self.settings.agent):
            document.evidence.kernel_record = KernelRecordEvidence(
                state=kernel_record.NOT_FOUND,
                note="the operator that resumed this report after a restart has no node agent to ask",
            )
            # The stored findings say the record is pending; they are written again saying it is not there.
            outcome.report = verdicts.diagnose_termination(
                termination=termination,
                evidence=None,
                last_line_ns=last_line_ns,
                stale_after_s=self.settings.stale_log_threshold_s,
            )
            self._spawn(self._rewrite(outcome, what="the kernel record state", announce=False),
                        name=f"rewrite-{outcome.termination.pod}")
            return
        logger.info(
            "report of %s/%s (%s) still waits for its kernel record after an operator restart; asking "
            "the agent again (%.1f s since the report)",
            termination.namespace, termination.pod, termination.container, elapsed,
        )
        wait = max(0.0, self.settings.agent.record_wait_s - elapsed)
        self._spawn(self._attach_record_later(outcome, wait_s=wait, waited_before_s=elapsed),
                    name=f"kernel-record-{outcome.termination.pod}")

    async def _attach_record_later(
        self, outcome: Outcome, *, wait_s: float | None = None, waited_before_s: float = 0.0
    ) -> None:
        """Ask the agent again for the kernel record; patch the report (and post an Event) when it comes."""
        t = outcome.termination
        assert t.node is not None  # kernel_record.worth_seeking
        began = time.monotonic()
        evidence, asked = await kernel_record.ask_until_record(
            agent=self.agent, node=t.node, pod_uid=t.pod_uid, settings=self.settings.agent, wait_s=wait_s
        )
        waited = waited_before_s + time.monotonic() - began
        found = evidence is not None and bool(evidence.kernel_records)
        document = outcome.document
        if evidence is not None:
            document.evidence = with_agent(document.evidence, evidence)
            if outcome.agent_error is not None and outcome.agent_error in document.evidence.errors:
                document.evidence.errors.remove(outcome.agent_error)  # the agent answered after all
            outcome.report = verdicts.diagnose_termination(
                termination=t,
                evidence=evidence,
                last_line_ns=outcome.last_line_ns,
                stale_after_s=self.settings.stale_log_threshold_s,
            )
            if not found and outcome.sidecar is not None:
                outcome.report = sidecar_findings.apply(outcome.report, t, outcome.sidecar)
        if found:
            record = KernelRecordEvidence(state=kernel_record.ATTACHED, arrived_after_s=round(waited, 1))
        else:
            record = KernelRecordEvidence(
                state=kernel_record.NOT_FOUND,
                note=_no_record_note(evidence, waited_s=self.settings.agent.record_wait_s),
            )
        record.requests = asked
        document.evidence.kernel_record = record
        document.updated_at = datetime.now(UTC)
        metrics.KERNEL_RECORDS.labels(outcome=str(record.state)).inc()
        logger.info(
            "kernel record of %s/%s (%s): %s after %.1f s, %d request(s)",
            t.namespace, t.pod, t.container, record.state, waited, asked,
        )
        if evidence is not None:
            await self._file_timeline(outcome, evidence)
        await self._rewrite(outcome, what="the kernel record", announce=found, waited_s=waited)

    def attach_sidecar(self, termination: Termination) -> bool:
        """Add the sidecar's evidence to the report of ``termination`` once its message is there.

        The sidecar ends after the trainer (it writes its message when the trainer's processes are
        gone, and the kubelet stops it after the main containers), so its message usually comes in a
        later pod event than the kill. Without the kernel's record its findings replace the
        kubelet-only ones, and the report is written again. Returns whether it was taken.
        """
        outcome = self.by_pod.get(termination.pod_uid)
        if outcome is None or outcome.sidecar_read or outcome.termination.key != termination.key:
            return False
        read = sidecar_findings.read(termination, sidecar_injection.identity(self.settings.sidecar))
        if read.summary is None or read.summary.state == "pending":
            return False
        outcome.sidecar_read = True
        outcome.sidecar = read.evidence
        outcome.document.evidence.sidecar = read.summary
        if read.evidence is not None and outcome.kernel_record_state != kernel_record.ATTACHED:
            outcome.report = sidecar_findings.apply(outcome.report, outcome.termination, read.evidence)
        outcome.document.updated_at = datetime.now(UTC)
        self._spawn(self._rewrite(outcome, what="the sidecar's evidence", announce=False),
                    name=f"sidecar-{termination.pod}")
        return True

    def _refresh_job(self, outcome: Outcome) -> str | None:
        """A pod's report changed after it was written (its kernel record came, or never will): its row and
        the job's root cause quote that report, so they are recomputed now, before it is written again.

        The job's section is what the reporter composes the annotation (and the page) from; updated
        here, the next write shows the new text everywhere. Returns the ``JobRootCause`` Event's
        message when it changed (see `compute_job`).
        """
        uid = outcome.termination.pod_uid
        known = self.targets.owners.get(outcome.target.uid) if self.targets is not None else None
        if known is None or known.target.role != "foreign" or self.by_pod.get(uid) is not outcome:
            return None
        before = known.job_pods.get(uid)
        if before is None or not before.failed:
            return None
        verdict, line = self.headline_of(outcome)
        facts = dataclasses.replace(before, verdict=verdict if outcome.report.verdict else None, summary=line)
        if facts == before:
            return None
        known.job_pods[uid] = facts
        computed = compute_job(known)
        if computed is None:
            return None
        view, event = computed
        self.jobs[known.target.uid] = view
        return event

    async def _rewrite(self, outcome: Outcome, *, what: str, announce: bool, waited_s: float = 0.0) -> None:
        """Write a report whose findings changed after it was first written, and all that quoted it.

        The report's pending text was quoted by its ``Failed`` condition (a TrainingJob), by a multi-pod
        job's section (its root cause's line, its rows) and by the ``JobRootCause`` Event: the section
        is recomputed before the write, so the annotation and the page never show the old text beside
        the new; a new ``JobRootCause`` Event follows when its line changed. ``announce``: post
        ``KernelRecordAttached`` (the record came).
        """
        t = outcome.termination
        job_event = self._refresh_job(outcome)
        written = await self._patch(outcome, what=what, condition=True)
        if written and announce:
            verdict, _ = self._headline(outcome)
            codes = ", ".join(f.code for f in outcome.report.findings)
            await self._post_event(
                outcome,
                reason="KernelRecordAttached",
                message=outcome.report.labelled(
                    f"{t.pod}/{t.container}: the kernel's OOM record reached the node agent {waited_s:.1f} s "
                    f"after the report; verdict {verdict}, findings {codes} "
                    f"({self._pointer(outcome.target)}; updated)"
                ),
            )
        if job_event is not None:
            await self._post_job_event(outcome.target, job_event)

    def _spawn(self, coro: Coroutine[Any, Any, None], *, name: str) -> None:
        self._background.start(coro, name=name)

    async def stop(self) -> None:
        await self._background.close()


_WRITE_ERRORS = (kube_mod.KubeError, aiohttp.ClientError, TimeoutError)


def _size(doc: Mapping[str, Any]) -> int:
    return len(json.dumps(doc, separators=(",", ":")).encode())


def _reason(verdict: str) -> str:
    """A condition/Event reason (CamelCase) from a verdict code: ``memcg-limit`` -> ``MemcgLimit``."""
    return "".join(part.capitalize() for part in verdict.replace("_", "-").split("-") if part) or "Unknown"
