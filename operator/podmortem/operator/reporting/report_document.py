"""A report's document around its findings: the pod, the log, the working set, the kernel record's state.

Built once, when the report is first written, from what is there within its two seconds; the
follow-ups then change the parts that came late (`podmortem.operator.reporting.follow_ups`).
Every source that failed is named in it instead of failing the report.
"""

from __future__ import annotations

from datetime import UTC, datetime

from podmortem.diagnosis.termination import Termination
from podmortem.operator import log_links
from podmortem.operator.followed_pods import PodLogFacts
from podmortem.operator.reporting import kernel_record, prometheus
from podmortem.reports.document import (
    Evidence,
    KernelRecordEvidence,
    LogEvidence,
    LogGap,
    PodContext,
    ReportDocument,
    WorkingSetEvidence,
)
from podmortem.reports.evidence import PodEvidence

#: Points of the working-set series kept in a report (evenly thinned, the peak always kept).
SERIES_POINTS = 48


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


def no_record_note(evidence: PodEvidence | None, *, waited_s: float) -> str:
    """Why the report has no kernel record: none reached the agent in time, and what the agent said."""
    when = f"within {waited_s:g} s of the report" if waited_s > 0 else "when the report was written"
    note = f"no kernel OOM record of this pod had reached the node agent {when}"
    if evidence is None:
        return note + "; the agent did not answer"
    if evidence.kmsg is not None and not evidence.kmsg.readable:
        return note + f"; the agent cannot read the kernel log ({evidence.kmsg.error or 'no reason given'})"
    if evidence.kmsg_lost:
        return note + f"; {evidence.kmsg_lost} record(s) on the node were lost to ring-buffer overwrites"
    return note


def _log(t: Termination, facts: PodLogFacts | None, *, log_url: str) -> LogEvidence:
    url = log_links.log_url(log_url, namespace=t.namespace, pod=t.pod, container=t.container)
    log = LogEvidence(location=f"{t.namespace}/{t.pod}/{t.container}", url=url)
    if facts is None:
        log.note = "the log of this pod was not followed"
        return log
    log.last_line_at = _ns_time(facts.last_line_at_ns(t.container))
    log.lines = facts.lines
    log.gaps = [
        LogGap(reason=str(g.reason), after=_ns_time(g.after_ts_ns), before=_ns_time(g.before_ts_ns))
        for g in facts.gaps
        if g.container == t.container
    ]
    log.error = facts.error or None
    return log


def build(
    t: Termination,
    *,
    agent: PodEvidence | None,
    record: kernel_record.State,
    record_wait_s: float,
    errors: list[str],
    working_set: prometheus.WorkingSet,
    working_set_pending: bool,
    facts: PodLogFacts | None,
    log_url: str,
) -> ReportDocument:
    """The first document of ``t``'s report, its findings still to be set; ``record_wait_s``: how long
    a pending kernel record is sought (the note says so); ``log_url``: the log server's base URL."""
    kernel = KernelRecordEvidence(state=record)
    if record == kernel_record.PENDING:
        kernel.note = (
            "the node agent had no kernel record of this kill yet; it is asked again for "
            f"{record_wait_s:g} s and this report is updated when it comes"
        )
    elif record == kernel_record.NOT_FOUND:
        kernel.note = no_record_note(agent, waited_s=0)
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
            working_set=working_set_evidence(working_set, pending=working_set_pending),
            log=_log(t, facts, log_url=log_url),
            errors=errors,
        ), agent),
    )
