"""Where a report goes: the TrainingJob's status, the pod's or job's annotation, Events, the timeline file.

Each write composes what it writes at its turn, under a lock (the outcome's for its report, the
target's for the annotation a multi-pod job's pods share), so a slow write never lands after a
newer one. A write that fails is named in the outcome (the first) or logged (the follow-ups):
the report stands where it was written.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp

from podmortem.diagnosis import job_section
from podmortem.kube.api import Kube, KubeError
from podmortem.logs.storage.store import LogStore
from podmortem.memory_line.status import peak_of_limit
from podmortem.operator import log_links, metrics
from podmortem.operator.job_pressure import ProjectionLine
from podmortem.operator.jobs import Target
from podmortem.operator.reporting import timeline_files
from podmortem.operator.reporting.job_view import JobView
from podmortem.operator.reporting.outcome import Outcome, headline
from podmortem.operator.reporting.registry import Reports
from podmortem.operator.settings import OperatorSettings
from podmortem.operator.status import StatusWriter
from podmortem.operator.watch_options import FAILURE_REPORT
from podmortem.reports.document import merge_patch, pod_peak, with_job
from podmortem.reports.evidence import PodEvidence
from podmortem.reports.timeline_model import Projection

logger = logging.getLogger(__name__)

#: What a write can fail with; each is named or logged, never raised to the watch.
WRITE_ERRORS = (KubeError, aiohttp.ClientError, TimeoutError)


class ReportWriter:
    """Writes reports, job sections, their Events and timelines, for one operator."""

    def __init__(
        self,
        *,
        kube: Kube,
        status: StatusWriter,
        settings: OperatorSettings,
        reports: Reports,
        log_url: str = "",
        log_store: LogStore | None = None,
        projection_of: Callable[[str], ProjectionLine | None] | None = None,
    ) -> None:
        self.kube = kube
        self.status = status
        self.settings = settings
        self.reports = reports
        self.log_url = log_url
        self.log_store = log_store
        self.projection_of = projection_of

    def status_document(self, outcome: Outcome) -> dict[str, Any]:
        """The report with its context, trimmed to the status budget."""
        return outcome.document.to_status(max_bytes=self.settings.status_report_max_bytes)

    def annotation_document(self, outcome: Outcome) -> dict[str, Any]:
        return outcome.document.to_annotation(max_bytes=self.settings.annotation_report_max_bytes)

    def page_url(self, target: Target) -> str:
        """The report page of ``target`` on the log server (``GET /reports/{namespace}/{job}``)."""
        return log_links.report_url(self.log_url, namespace=target.namespace, job=target.name)

    def pointer(self, target: Target) -> str:
        """Where an Event's reader finds the report: the field or annotation, and the page."""
        where = "status.failureReport" if target.role == "trainingjob" else FAILURE_REPORT
        return f"podmortem failure report in {where}, page {self.page_url(target)}"

    async def _put(self, outcome: Outcome, *, condition: bool) -> str | None:
        """Write the report where its target keeps it: ``status``, ``annotation``, or None (nowhere).

        ``condition`` also sets the TrainingJob's ``Failed`` condition from the verdict.
        """
        target = outcome.target
        async with outcome.lock:
            peak = outcome.document.evidence.peak = pod_peak(outcome.document)
            if target.role == "trainingjob":
                verdict, line = headline(outcome)
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
                    conditions=[("Failed", True, event_reason(verdict), line)] if condition else (),
                )
                return "status"
            if target.role == "foreign" or self.settings.patch_pods:
                await self._put_annotation(target, outcome)
                return "annotation"
            return None

    async def _put_annotation(self, target: Target, outcome: Outcome | None) -> None:
        """The annotation, composed at its turn: a job's root-cause pod's report plus the job section."""
        async with self.reports.lock_of(target.uid):
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
        view = self.reports.jobs.get(target.uid)
        if view is None:
            return self.annotation_document(outcome) if outcome is not None else None
        shown = self.reports.by_pod.get(view.root_uid or "") or outcome
        limit = self.settings.annotation_report_max_bytes
        doc = self.annotation_document(shown) if shown is not None else {}
        room = limit - _size(doc) - len(',"job":')
        if room < limit // 3 and shown is not None:
            doc = shown.document.to_annotation(max_bytes=limit // 2)
            room = limit - _size(doc) - len(',"job":')
        return with_job(doc, job_section.section(view.result, max_bytes=max(room, 0)))

    async def write(self, outcome: Outcome) -> None:
        """The report's first write and its Event; what failed is named in ``outcome.errors``."""
        place = "status" if outcome.target.role == "trainingjob" else "annotation"
        try:
            written = await self._put(outcome, condition=True)
            if written is not None:
                outcome.written.append(written)
                metrics.REPORTS.labels(target=written, outcome="ok").inc()
        except WRITE_ERRORS as exc:
            outcome.errors.append(f"{place}: {exc}")
            metrics.REPORTS.labels(target=place, outcome="error").inc()
        t = outcome.termination
        verdict, line = headline(outcome)
        message = f"{t.pod}/{t.container} {verdict}: {line} ({self.pointer(outcome.target)})"
        await self.post_event(outcome, reason=event_reason(verdict), message=message)

    async def patch(self, outcome: Outcome, *, what: str, condition: bool = False) -> bool:
        """Write an updated report after the first; failures are logged (the first report stands)."""
        try:
            await self._put(outcome, condition=condition)
        except WRITE_ERRORS as exc:
            logger.warning("patching %s into the report of %s failed: %s", what, outcome.target.name, exc)
            return False
        return True

    async def post_event(self, outcome: Outcome, *, reason: str, message: str) -> None:
        """An Event on the report's target; a refused one is named in the outcome and logged."""
        try:
            await self.kube.post_event(
                involved=outcome.target.involved(), type_="Warning", reason=reason, message=message
            )
            outcome.written.append("event")
            metrics.REPORTS.labels(target="event", outcome="ok").inc()
        except WRITE_ERRORS as exc:
            outcome.errors.append(f"event: {exc}")
            metrics.REPORTS.labels(target="event", outcome="error").inc()
            # The report is written by now; without this line a refused Event (RBAC) left no trace.
            logger.warning("posting the %s event of %s failed: %s", reason, outcome.target.name, exc)

    async def write_job(
        self, target: Target, view: JobView, *, event: str | None, outcome: Outcome | None,
        current: Callable[[], bool] | None = None,
    ) -> bool:
        """Record the job's root cause and write the annotation; post ``event`` (root changed) if given.

        ``current``: whether ``event`` is still the job's latest once the annotation is written (a
        pod's report that changed meanwhile made a newer one, posted by its rewrite; the older
        text must not come after it).
        """
        self.reports.jobs[target.uid] = view
        ok = True
        try:
            await self._put_annotation(target, outcome)
            metrics.REPORTS.labels(target="annotation", outcome="ok").inc()
        except WRITE_ERRORS as exc:
            ok = False
            metrics.REPORTS.labels(target="annotation", outcome="error").inc()
            logger.warning("writing the job report of %s/%s failed: %s", target.namespace, target.name, exc)
        if event is not None and (current is None or current()):
            await self.post_job_event(target, event)
        return ok

    async def post_job_event(self, target: Target, event: str) -> None:
        """The ``JobRootCause`` Event: which pod failed first, quoting its line (`job_section.headline`)."""
        try:
            await self.kube.post_event(
                involved=target.involved(), type_="Warning", reason="JobRootCause",
                message=f"{event} ({self.pointer(target)})",
            )
        except WRITE_ERRORS as exc:
            logger.warning("posting the JobRootCause event of %s failed: %s", target.name, exc)

    async def file_timeline(self, outcome: Outcome, evidence: PodEvidence | None) -> None:
        """The timeline with the agent's samples next to the job's logs (`timeline_files`; best effort)."""
        t = outcome.termination
        if self.log_store is None:
            return
        await timeline_files.save(
            self.log_store,
            namespace=outcome.target.namespace,
            job=outcome.target.name,
            pod=t.pod,
            report=outcome.document,
            samples=evidence.samples if evidence is not None else [],
            restarts=timeline_files.restarts_of(t, (o.termination for o in self.reports.of_pod(t.pod_uid))),
            projection=self._projection(t.pod_uid),
        )

    def _projection(self, pod_uid: str) -> Projection | None:
        line = self.projection_of(pod_uid) if self.projection_of is not None else None
        if line is None:
            return None
        start_ns, start_bytes, end_ns, end_bytes, text = line
        return Projection(start=datetime.fromtimestamp(start_ns / 1e9, UTC), start_bytes=start_bytes,
                          end=datetime.fromtimestamp(end_ns / 1e9, UTC), end_bytes=end_bytes, text=text)


def _size(doc: Mapping[str, Any]) -> int:
    return len(json.dumps(doc, separators=(",", ":")).encode())


def event_reason(verdict: str) -> str:
    """A condition/Event reason (CamelCase) from a verdict code: ``memcg-limit`` -> ``MemcgLimit``."""
    return "".join(part.capitalize() for part in verdict.replace("_", "-").split("-") if part) or "Unknown"
