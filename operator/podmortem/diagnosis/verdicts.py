"""Turn one termination plus its evidence into a FailureReport, with the forensics rules.

The kernel record (from the node agent) is the best witness: with it the
forensics core tells a memcg limit from a node-wide OOM and names what held the
memory. Without it the pod status still says a lot: ``OOMKilled`` is the
kubelet's word for a memcg kill, ``Evicted`` is an eviction, and exit 137 with
any other reason is a SIGKILL from outside. The log's last line, against the
kill time, says whether the log tail can be trusted. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from podmortem import diagnosis
from podmortem.diagnosis import exit_causes, kill_causes, limits, sibling_oom, training_log
from podmortem.diagnosis import termination as termination_mod
from podmortem.diagnosis.termination import Termination
from podmortem.reports import codes as verdict_codes
from podmortem.reports.evidence import PodEvidence
from podmortem.reports.failure import FailureReport, PodRef
from podmortem.reports.findings import Finding, Severity
from podmortem.reports.oom_record import OomKillRecord


def pick_record(records: list[OomKillRecord], container_id: str | None) -> OomKillRecord | None:
    """The kernel record of this container instance: one naming its ID in a cgroup path, else the latest."""
    if not records:
        return None
    if container_id:
        short = container_id.split("://", 1)[-1]
        for record in reversed(records):
            paths = [record.task_in_memcg, record.limit_of_memcg, record.oom_group_memcg]
            if record.oom_kill is not None:
                paths += [record.oom_kill.task_memcg, record.oom_kill.oom_memcg]
            if any(p and short in p for p in paths):
                return record
    return records[-1]


def oomkilled_without_record(t: Termination, why_no_record: str, *, pending: bool = False) -> Finding:
    """The kubelet's OOMKilled without the kernel's record: for now (``pending``), or for good."""
    if pending:
        record = ("The kernel's own record is not in yet (the node agent has not handed it over); this "
                  "report is updated when it comes (evidence.kernelRecord.state: pending) and then says "
                  "what held the memory.")
        action = "Wait a few seconds for the kernel record; nothing to do yet."
    else:
        record = (f"The kernel's own record was not available ({why_no_record}), so what held the memory "
                  "is not known.")
        action = "Deploy the podmortem node agent on this node for the kernel record and memory samples."
    return Finding(
        code="memcg-limit",
        severity=Severity.CRITICAL,
        message=(
            f"The kubelet reports container {t.container!r} as OOMKilled: it passed its memory "
            f"limit and the kernel killed it. {record}"
        ),
        evidence={"reason": t.reason, "exit_code": t.exit_code, "container": t.container},
        action=action,
    )


def known_pod(record: OomKillRecord, evidence: PodEvidence | None) -> PodRef | None:
    """The pod as the node agent knows it: its UID, and where the limit that filled sits.

    The agent matched the record to this pod by the pod's own cgroup, so the limit's level is
    read against that cgroup, never guessed from the path's shape (a custom cgroup root, a
    nested runtime or the demo's own layout would otherwise read as "not a pod's").
    """
    if evidence is None:
        return None
    level = limits.level_from_pod(record.oom_memcg, evidence.cgroup_path)
    if level is None:
        return None
    return PodRef(pod_uid=evidence.pod_uid, limit_level=level)


def diagnose_termination(
    *,
    termination: Termination,
    evidence: PodEvidence | None,
    last_line_ns: int | None,
    stale_after_s: float,
    record_pending: bool = False,
    log_tail: Sequence[str] = (),
) -> FailureReport:
    """The report for one termination; ``record_pending``: the kernel record is still being sought.

    ``log_tail``: the container's last log lines, for the deaths only the log tells (a CUDA OOM,
    a full /dev/shm, a Python exception).
    """
    t = termination
    records = evidence.kernel_records if evidence is not None else []
    record = pick_record(records, t.container_id)
    known = known_pod(record, evidence) if record is not None else None
    report = diagnosis.diagnose(record, pod=known) if record is not None else FailureReport()
    findings = list(report.findings)
    codes = {f.code for f in findings}

    if not codes & set(verdict_codes.VERDICTS):
        told = training_log.read(log_tail)
        from_status = exit_causes.preempted(disruption=t.disruption, pod_reason=t.pod_reason) or (
            exit_causes.eviction_by_resource(pod_reason=t.pod_reason, message=t.pod_message)
        )
        evicted = kill_causes.eviction(reason=t.pod_reason, message=t.pod_message)
        from_log = _log_causes(t, told)
        if from_status is not None:
            findings.insert(0, from_status)
        elif evicted is not None:
            findings.insert(0, evicted)
        elif t.sibling_oom is not None:  # a sidecar's OOM kill came first: that is the cause
            findings[0:0] = [sibling_oom.finding(
                container=t.container, exit_code=t.exit_code, finished_at=t.finished_at, sibling=t.sibling_oom
            ), *from_log]
        elif t.reason == "OOMKilled":
            why = (
                "the node agent gave no evidence"
                if evidence is None
                else "the agent has no OOM record of this pod"
            )
            findings.insert(0, oomkilled_without_record(t, why, pending=record_pending))
        elif from_log and t.exit_code != termination_mod.SIGKILL_EXIT:
            findings[0:0] = from_log
        else:
            sigkill = kill_causes.sigkill_not_oom(
                exit_code=t.exit_code, reason=t.reason, oom_record_found=record is not None
            )
            if sigkill is not None:
                if t.pod_reason or t.deleting:
                    sigkill.evidence["pod_reason"] = t.pod_reason or "deletion"
                    sigkill.message += f" The pod status says: {t.pod_reason or 'the pod was being deleted'}."
                    if t.pod_message:
                        sigkill.message += f" ({t.pod_message})"
                findings.insert(0, sigkill)

    stale = diagnosis.stale_log(
        last_log_at=_at(last_line_ns), killed_at=t.finished_at, threshold=timedelta(seconds=stale_after_s)
    )
    if stale is not None:
        findings.append(stale)

    verdict = report.verdict
    if verdict is None:
        verdict = verdict_codes.verdict_of([f.code for f in findings])
    return report.model_copy(update={"findings": findings, "verdict": verdict})


def _log_causes(t: Termination, told: training_log.LogFacts) -> list[Finding]:
    """The cause the log tail and exit code show, most specific first (a CUDA OOM before its traceback).

    A launcher's child killed by a signal comes before the traceback: torchrun's ``ChildFailedError``
    and ``torch.distributed.launch``'s ``CalledProcessError`` only report that death.
    """
    oom = exit_causes.cuda_oom(told)
    if oom:
        return oom
    for rule in (exit_causes.batch_cgroup_oom(exit_code=t.exit_code, facts=told),
                 exit_causes.shm_full(exit_code=t.exit_code, facts=told, shm=t.shm),
                 exit_causes.segfault(exit_code=t.exit_code, facts=told),
                 exit_causes.child_sigkill(exit_code=t.exit_code, facts=told),
                 exit_causes.shell_sigkill(exit_code=t.exit_code, facts=told)):
        if rule is not None:
            return [rule]
    return exit_causes.python_exception(exit_code=t.exit_code, facts=told)


def _at(ns: int | None) -> datetime | None:
    return datetime.fromtimestamp(ns / 1e9, UTC) if ns is not None else None
