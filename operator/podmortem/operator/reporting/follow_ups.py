"""What changes a report after its first write: the late Prometheus series, the late kernel record, the
sidecar's message, and a kernel-record wait an earlier operator run left unfinished.

Each follow-up replaces the part of the outcome's evidence that came and makes the report again with
`podmortem.diagnosis.rediagnose` (which alone ranks the kernel's record, the sidecar's evidence and
the kubelet's word), then writes it and whatever quoted it. The background tasks are keyed by the
termination they work for (namespace, pod uid, container, container instance), so two pods that share
a name, in two namespaces or one after the other, never stand for each other.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Coroutine, Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

from podmortem.background import AlreadyRunning, Background
from podmortem.diagnosis import sidecar_findings
from podmortem.diagnosis.rediagnose import Evidence, rediagnose
from podmortem.diagnosis.termination import Termination
from podmortem.operator import metrics, sidecar_injection
from podmortem.operator.jobs import Target
from podmortem.operator.reporting import job_view, kernel_record, prometheus
from podmortem.operator.reporting.agent_client import AgentClient
from podmortem.operator.reporting.outcome import Outcome, headline
from podmortem.operator.reporting.registry import Reports
from podmortem.operator.reporting.report_document import no_record_note, with_agent, working_set_evidence
from podmortem.operator.reporting.writer import ReportWriter
from podmortem.operator.settings import OperatorSettings
from podmortem.operator.targets import Targets
from podmortem.reports.document import KernelRecordEvidence, ReportDocument

logger = logging.getLogger(__name__)

#: The follow-ups a pod's reports are not settled while they run (`FollowUps.settled`).
UNSETTLED = ("kernel-record", "working-set")


class FollowUpKey(NamedTuple):
    """The termination a follow-up works for: one container instance of one pod."""

    namespace: str
    pod_uid: str
    container: str
    #: The container instance (its ID; a restart is a new one), or "evicted" for one that never ran.
    instance: str

    @classmethod
    def of(cls, t: Termination) -> FollowUpKey:
        return cls(t.namespace, t.pod_uid, t.container, t.container_id or "evicted")


class FollowUps:
    """The follow-ups of the reports written by one operator, each a background task of its termination."""

    def __init__(
        self,
        *,
        agent: AgentClient,
        settings: OperatorSettings,
        reports: Reports,
        writer: ReportWriter,
        targets: Targets | None = None,
    ) -> None:
        self.agent = agent
        self.settings = settings
        self.reports = reports
        self.writer = writer
        self.targets = targets
        self._background = Background("reporter")

    def start(self, kind: str, t: Termination, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as the ``kind`` follow-up of ``t``; one already running for it does the work."""
        key = FollowUpKey.of(t)
        try:
            self._background.start(coro, name=f"{kind}-{t.namespace}-{t.pod}-{t.container}",
                                   key=_task_key(kind, key))
        except AlreadyRunning:
            logger.debug("the %s follow-up of %s/%s (%s) is running already", kind, t.namespace, t.pod,
                         t.container)

    def running(self, kind: str, t: Termination) -> bool:
        """Whether the ``kind`` follow-up of ``t`` has not ended yet."""
        return self._background.keyed(_task_key(kind, FollowUpKey.of(t))) is not None

    def settled(self, pod_uid: str) -> bool:
        """No follow-up of the pod's reports runs (a late kernel record, a slow Prometheus)."""
        return not any(
            self.running(kind, o.termination) for o in self.reports.of_pod(pod_uid) for kind in UNSETTLED
        )

    def diagnose(self, outcome: Outcome) -> None:
        """Make the outcome's report again from its evidence (`rediagnose`)."""
        outcome.report = rediagnose(
            outcome.termination, outcome.evidence, stale_after_s=self.settings.stale_log_threshold_s
        )

    async def working_set_later(
        self, outcome: Outcome, prom_task: asyncio.Task[prometheus.WorkingSet]
    ) -> None:
        """Patch in Prometheus' series once it answers (the report went out with the agent's samples)."""
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
        await self.writer.patch(outcome, what="the Prometheus working set")

    def resume_pending_record(
        self, *, termination: Termination, target: Target, stored: Mapping[str, Any]
    ) -> None:
        """Finish the kernel-record follow-up of a report an earlier operator run left ``pending``.

        The agent is asked for what is left of ``record_wait_s`` since the report (at least once),
        and the report is patched as if this run had written it (`ReportDocument.parse` read it back).
        The sidecar's message, if the pod has one, is read again from the pod: it is evidence the
        report is made from, whatever the record brings.
        """
        document = ReportDocument.parse(stored)
        document.report_url = self.writer.page_url(target)
        reported = document.reported_at
        elapsed = max(0.0, (datetime.now(UTC) - reported).total_seconds()) if reported is not None else 0.0
        seek = kernel_record.worth_seeking(termination, settings=self.settings.agent)
        sidecar = sidecar_findings.read(termination, sidecar_injection.identity(self.settings.sidecar))
        if sidecar.summary is not None:
            document.evidence.sidecar = sidecar.summary
        outcome = Outcome(
            termination=termination,
            target=target,
            document=document,
            latency_s=0.0,
            evidence=Evidence.of(sidecar=sidecar.evidence, last_line_ns=document.last_line_ns(),
                                 record_pending=seek),
            sidecar_read=sidecar.summary is None or sidecar.summary.state != "pending",
        )
        empty = document.report.verdict is None and not document.report.findings
        if document.form == "annotation" or empty:
            self.diagnose(outcome)  # the summary keeps the findings' messages only: made again from the pod
        self.reports.keep(outcome, latest=False)
        if not seek:
            document.evidence.kernel_record = KernelRecordEvidence(
                state=kernel_record.NOT_FOUND,
                note="the operator that resumed this report after a restart has no node agent to ask",
            )
            # The stored findings say the record is pending; they are written again saying it is not there.
            self.diagnose(outcome)
            rewrite = self.rewrite(outcome, what="the kernel record state", announce=False)
            self.start("rewrite", termination, rewrite)
            return
        logger.info(
            "report of %s/%s (%s) still waits for its kernel record after an operator restart; asking "
            "the agent again (%.1f s since the report)",
            termination.namespace, termination.pod, termination.container, elapsed,
        )
        wait = max(0.0, self.settings.agent.record_wait_s - elapsed)
        self.start("kernel-record", termination,
                   self.kernel_record_later(outcome, wait_s=wait, waited_before_s=elapsed))

    async def kernel_record_later(
        self, outcome: Outcome, *, wait_s: float | None = None, waited_before_s: float = 0.0
    ) -> None:
        """Ask the agent again for the kernel record; patch the report (and post an Event) when it comes.

        Once the wait is over the report is made again either way: with the record, or saying it
        is not there (no longer that it is on its way).
        """
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
        agent = Evidence.of(agent=evidence).agent if evidence is not None else outcome.evidence.agent
        outcome.evidence = dataclasses.replace(outcome.evidence, agent=agent, record_pending=False)
        self.diagnose(outcome)
        if found:
            record = KernelRecordEvidence(state=kernel_record.ATTACHED, arrived_after_s=round(waited, 1))
        else:
            record = KernelRecordEvidence(
                state=kernel_record.NOT_FOUND,
                note=no_record_note(evidence, waited_s=self.settings.agent.record_wait_s),
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
            await self.writer.file_timeline(outcome, evidence)
        await self.rewrite(outcome, what="the kernel record", announce=found, waited_s=waited)

    def attach_sidecar(self, termination: Termination) -> bool:
        """Add the sidecar's evidence to the report of ``termination`` once its message is there.

        The sidecar ends after the trainer (it writes its message when the trainer's processes are
        gone, and the kubelet stops it after the main containers), so its message usually comes in a
        later pod event than the kill. The report is made again with it and written again. Returns
        whether it was taken.
        """
        outcome = self.reports.by_pod.get(termination.pod_uid)
        if outcome is None or outcome.sidecar_read or outcome.termination.key != termination.key:
            return False
        read = sidecar_findings.read(termination, sidecar_injection.identity(self.settings.sidecar))
        if read.summary is None or read.summary.state == "pending":
            return False
        outcome.sidecar_read = True
        outcome.evidence = dataclasses.replace(outcome.evidence, sidecar=read.evidence)
        outcome.document.evidence.sidecar = read.summary
        self.diagnose(outcome)
        outcome.document.updated_at = datetime.now(UTC)
        rewrite = self.rewrite(outcome, what="the sidecar's evidence", announce=False)
        self.start("sidecar", termination, rewrite)
        return True

    def _refresh_job(self, outcome: Outcome) -> str | None:
        """A pod's report changed after it was written: its row and the job's root cause quote that
        report, so they are recomputed now, before it is written again (`job_view.refreshed`).

        Returns the ``JobRootCause`` Event's message when it changed.
        """
        uid = outcome.termination.pod_uid
        known = self.targets.owners.get(outcome.target.uid) if self.targets is not None else None
        if known is None or known.target.role != "foreign" or self.reports.by_pod.get(uid) is not outcome:
            return None
        computed = job_view.refreshed(known, outcome)
        if computed is None:
            return None
        view, event = computed
        self.reports.jobs[known.target.uid] = view
        return event

    async def rewrite(self, outcome: Outcome, *, what: str, announce: bool, waited_s: float = 0.0) -> None:
        """Write a report whose findings changed after it was first written, and all that quoted it.

        The report's pending text was quoted by its ``Failed`` condition (a TrainingJob), by a multi-pod
        job's section (its root cause's line, its rows) and by the ``JobRootCause`` Event: the section
        is recomputed before the write, so the annotation and the page never show the old text beside
        the new; a new ``JobRootCause`` Event follows when its line changed. ``announce``: post
        ``KernelRecordAttached`` (the record came).
        """
        t = outcome.termination
        job_event = self._refresh_job(outcome)
        written = await self.writer.patch(outcome, what=what, condition=True)
        if written and announce:
            verdict, _ = headline(outcome)
            codes = ", ".join(f.code for f in outcome.report.findings)
            await self.writer.post_event(
                outcome,
                reason="KernelRecordAttached",
                message=outcome.report.labelled(
                    f"{t.pod}/{t.container}: the kernel's OOM record reached the node agent {waited_s:.1f} s "
                    f"after the report; verdict {verdict}, findings {codes} "
                    f"({self.writer.pointer(outcome.target)}; updated)"
                ),
            )
        if job_event is not None:
            await self.writer.post_job_event(outcome.target, job_event)

    async def wait(self) -> None:
        """Wait until every follow-up started so far, and those they start, has ended (for tests)."""
        await self._background.wait()

    async def stop(self) -> None:
        await self._background.close()


def _task_key(kind: str, key: FollowUpKey) -> str:
    return "\x00".join((kind, *key))
