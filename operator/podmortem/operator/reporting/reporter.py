"""On a non-zero exit, OOMKilled or eviction: collect evidence, diagnose, and write the report within 2 s.

The steps run against a clock that starts when the operator sees the
termination. The agent on the pod's node is asked with a short timeout; the
log facts are in memory already; Prometheus (the working set over the pod's
whole life) gets a fraction of a second inline. What comes later is patched
in afterwards: Prometheus' series, and the kernel's OOM record, which the
agent often holds only a second or more after the kubelet reported the kill
(see :mod:`podmortem.operator.reporting.kernel_record`). Every source that fails is
named in the report instead of failing it.

The `Reporter` coordinates the parts, each in its own module: the reports held
(`registry`), the document built around the findings (`report_document`), the
writes of documents, annotations and Events (`writer`), the follow-ups
(`follow_ups`) and the job section (`job_view`); the report itself is made by
`podmortem.diagnosis.rediagnose`, the first time and after each follow-up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp

from podmortem.background import Background
from podmortem.diagnosis import sidecar_findings
from podmortem.diagnosis.rediagnose import Evidence, rediagnose
from podmortem.diagnosis.termination import Termination
from podmortem.kube.api import Kube
from podmortem.logs.storage.store import LogStore
from podmortem.operator import metrics, sidecar_injection
from podmortem.operator.followed_pods import PodLogFacts
from podmortem.operator.job_pressure import ProjectionLine
from podmortem.operator.jobs import Target
from podmortem.operator.reporting import kernel_record, prometheus, report_document
from podmortem.operator.reporting.agent_client import AgentClient, AgentUnavailable
from podmortem.operator.reporting.follow_ups import FollowUps
from podmortem.operator.reporting.job_view import JobView
from podmortem.operator.reporting.outcome import Outcome, headline
from podmortem.operator.reporting.registry import Reports
from podmortem.operator.reporting.writer import ReportWriter
from podmortem.operator.settings import OperatorSettings
from podmortem.operator.status import StatusWriter
from podmortem.operator.targets import Targets
from podmortem.reports.evidence import PodEvidence


class Reporter:
    """Writes one failure report per terminated container instance, and a multi-pod job's section."""

    def __init__(
        self,
        *,
        kube: Kube,
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
        self.agent = agent
        self.session = session
        self.settings = settings
        self.log_url = log_url
        self.reports = Reports()
        self.writer = ReportWriter(kube=kube, status=status, settings=settings, reports=self.reports,
                                   log_url=log_url, log_store=log_store, projection_of=projection_of)
        self.follow_ups = FollowUps(agent=agent, settings=settings, reports=self.reports, writer=self.writer,
                                    targets=targets)
        #: The Prometheus queries in flight, each awaited by its report or by its follow-up.
        self.queries = Background("reporter-prometheus")

    @property
    def by_pod(self) -> dict[str, Outcome]:
        """The latest outcome per pod uid (a job's report shows its root-cause pod's)."""
        return self.reports.by_pod

    @property
    def jobs(self) -> dict[str, JobView]:
        """Target uid -> its job-level root cause, for foreign jobs with more than one pod."""
        return self.reports.jobs

    @property
    def outcomes(self) -> list[Outcome]:
        """Every report still kept, in the order written (for tests, the bench and the page)."""
        return self.reports.outcomes

    def latest_of(self, namespace: str, name: str) -> Outcome | None:
        """The latest report of a target that is not a TrainingJob (its page), if still kept."""
        return self.reports.latest_of(namespace, name)

    def forget_pod(self, pod_uid: str) -> None:
        """The pod is deleted: drop its reports, unless a foreign job's section and page still show them
        (they go with the job, `forget_target`). A TrainingJob's report stays in its status."""
        self.reports.forget_pod(pod_uid)

    def drop_pod(self, pod_uid: str) -> None:
        """The pod finished long ago and nobody deletes it: drop its reports, whatever its job."""
        self.reports.drop_pod(pod_uid)

    def forget_target(self, target_uid: str) -> None:
        """The job (TrainingJob or a foreign one) is deleted: drop its section and all its pods' reports."""
        self.reports.forget_target(target_uid)

    def settled(self, pod_uid: str) -> bool:
        """No follow-up of the pod's reports runs (a late kernel record, a slow Prometheus)."""
        return self.follow_ups.settled(pod_uid)

    def kept(self) -> dict[str, int]:
        """How much per-pod and per-job state is held (for tests and the soak bench)."""
        return self.reports.kept()

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
            prom_task = self.queries.start(
                prometheus.query_working_set(
                    session=self.session,
                    settings=self.settings.prometheus,
                    namespace=t.namespace,
                    pod=t.pod,
                    start=start,
                    end=end,
                ),
                name=f"{t.namespace}/{t.pod}/{t.container}",
                awaited=True,
            )
        try:
            return await self._report(t, target=target, facts=facts, seen_at=seen_at, prom_task=prom_task)
        except asyncio.CancelledError:
            # The report stops here (the operator stopping): so does its query, which nobody would
            # await now. Another error leaves it to end within its own timeout.
            if prom_task is not None:
                prom_task.cancel()
            raise

    async def _report(self, t: Termination, *, target: Target, facts: PodLogFacts | None, seen_at: float,
                      prom_task: asyncio.Task[prometheus.WorkingSet] | None) -> Outcome:
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
        record = kernel_record.initial_state(t, agent_evidence, settings=self.settings.agent)
        sidecar = sidecar_findings.read(t, sidecar_injection.identity(self.settings.sidecar))
        gathered = Evidence.of(
            agent=agent_evidence,
            sidecar=sidecar.evidence,
            last_line_ns=facts.last_line_at_ns(t.container) if facts is not None else None,
            log_tail=facts.last_lines(t.container) if facts is not None else (),
            record_pending=record == kernel_record.PENDING,
        )
        document = report_document.build(
            t, agent=agent_evidence, record=record, record_wait_s=self.settings.agent.record_wait_s,
            errors=errors, working_set=working_set, working_set_pending=prom_pending, facts=facts,
            log_url=self.log_url,
        )
        document.report = rediagnose(t, gathered, stale_after_s=self.settings.stale_log_threshold_s)
        document.report_url = self.writer.page_url(target)
        document.evidence.sidecar = sidecar.summary
        if t.sidecar and not self.settings.agent.enabled:
            note = "the kernel's record is " + sidecar_findings.NO_KERNEL_RECORD
            document.evidence.kernel_record.note = note
        outcome = Outcome(
            termination=t,
            target=target,
            document=document,
            latency_s=0.0,
            evidence=gathered,
            agent_error=agent_error,
            sidecar_read=sidecar.summary is None or sidecar.summary.state != "pending",
        )
        self.reports.keep(outcome)
        await self.writer.write(outcome)
        outcome.latency_s = time.monotonic() - seen_at
        metrics.REPORT_LATENCY.observe(outcome.latency_s)
        metrics.OOM_KILLS.labels(namespace=t.namespace, verdict=outcome.report.verdict or "unknown").inc()
        if prom_pending and prom_task is not None:
            self.follow_ups.start("working-set", t, self.follow_ups.working_set_later(outcome, prom_task))
        if record == kernel_record.PENDING:
            self.follow_ups.start("kernel-record", t, self.follow_ups.kernel_record_later(outcome))
        elif record != kernel_record.NOT_SOUGHT:
            metrics.KERNEL_RECORDS.labels(outcome=record).inc()
        await self.writer.file_timeline(outcome, agent_evidence)
        return outcome

    async def _working_set(
        self,
        prom_task: asyncio.Task[prometheus.WorkingSet] | None,
        evidence: PodEvidence | None,
        errors: list[str],
    ) -> tuple[prometheus.WorkingSet, bool]:
        """The working set within the report's budget, and whether Prometheus' series follows later."""
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

    def resume_pending_record(
        self, *, termination: Termination, target: Target, stored: Mapping[str, Any]
    ) -> None:
        """Finish the kernel-record follow-up of a report an earlier operator run left ``pending``."""
        self.follow_ups.resume_pending_record(termination=termination, target=target, stored=stored)

    def attach_sidecar(self, termination: Termination) -> bool:
        """Add the sidecar's evidence to the report of ``termination`` once its message is there;
        whether it was taken (`FollowUps.attach_sidecar`)."""
        return self.follow_ups.attach_sidecar(termination)

    def status_document(self, outcome: Outcome) -> dict[str, Any]:
        """The report with its context, trimmed to the status budget."""
        return self.writer.status_document(outcome)

    def annotation_document(self, outcome: Outcome) -> dict[str, Any]:
        return self.writer.annotation_document(outcome)

    def job_annotation_document(self, target: Target, outcome: Outcome | None) -> dict[str, Any] | None:
        """The annotation's summary; for a multi-pod job, of the root-cause pod, with the ``job`` section."""
        return self.writer.job_annotation_document(target, outcome)

    def page_url(self, target: Target) -> str:
        """The report page of ``target`` on the log server (``GET /reports/{namespace}/{job}``)."""
        return self.writer.page_url(target)

    async def write_job(
        self, target: Target, view: JobView, *, event: str | None, outcome: Outcome | None,
        current: Callable[[], bool] | None = None,
    ) -> bool:
        """Record the job's root cause and write the annotation; post ``event`` (root changed) if given."""
        return await self.writer.write_job(target, view, event=event, outcome=outcome, current=current)

    def headline_of(self, outcome: Outcome) -> tuple[str, str]:
        """The verdict and the one-line cause of a pod's report (the job section's line for it)."""
        return headline(outcome)

    async def stop(self) -> None:
        await self.follow_ups.stop()
        await self.queries.close()
