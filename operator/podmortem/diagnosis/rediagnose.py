"""A termination's report from all the evidence gathered so far, with one order of precedence. Pure.

The operator writes a report within two seconds of a kill and makes it again as evidence comes:
the kernel's record (late from the node agent), the sidecar's termination message (late from the
pod status), or neither after an operator restart. Each time the report is made from everything
held at that moment, by this one function, so the order the sources rank in is written once:

1. the kernel's record, when the node agent handed one over: the kernel saw the kill, and its
   record names the victim and what held the memory; the sidecar's samples add nothing to it;
2. the sidecar's evidence (sidecar mode, `podmortem.diagnosis.sidecar_findings`): the container's
   own counters and processes at the kill, checked against the kubelet before it gets here;
3. the kubelet alone: the pod status (exit code, reason, eviction) and the log's last lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from podmortem.diagnosis import sidecar_findings, verdicts
from podmortem.diagnosis.termination import Termination
from podmortem.reports.evidence import PodEvidence
from podmortem.reports.failure import FailureReport
from podmortem.reports.sidecar_evidence import SidecarEvidence


@dataclass(frozen=True)
class Evidence:
    """What a termination's report is made from; a follow-up replaces the part that came."""

    #: The node agent's evidence of the pod (its kernel records), None when the agent gave none.
    agent: PodEvidence | None = None
    #: The sidecar's evidence, once its message was read and checked (sidecar mode).
    sidecar: SidecarEvidence | None = None
    #: When the container's log was last written (ns since the epoch), for a stale log.
    last_line_ns: int | None = None
    #: The container's last log lines, for the deaths only the log tells (a CUDA OOM, a traceback).
    log_tail: tuple[str, ...] = ()
    #: The kernel's record is still being sought: the report says so instead of "not available".
    record_pending: bool = False

    @classmethod
    def of(
        cls,
        *,
        agent: PodEvidence | None = None,
        sidecar: SidecarEvidence | None = None,
        last_line_ns: int | None = None,
        log_tail: Sequence[str] = (),
        record_pending: bool = False,
    ) -> Evidence:
        """The evidence as the diagnosis reads it: the agent's memory samples are left out.

        The samples go to the report's working set and timeline when they come; a report is kept
        for its pod's life, and the diagnosis never reads them, so they are not held twice.
        """
        if agent is not None and (agent.samples or agent.gaps):
            agent = agent.model_copy(update={"samples": [], "gaps": []})
        return cls(agent=agent, sidecar=sidecar, last_line_ns=last_line_ns, log_tail=tuple(log_tail),
                   record_pending=record_pending)

    @property
    def kernel_record(self) -> bool:
        """The node agent handed over a kernel record of the pod."""
        return self.agent is not None and bool(self.agent.kernel_records)


def rediagnose(termination: Termination, evidence: Evidence, *, stale_after_s: float) -> FailureReport:
    """The report of ``termination`` from ``evidence``: the kernel's record, else the sidecar's, else the
    kubelet's word alone (the module's order). ``stale_after_s``: a log quiet this long before the kill
    is named stale."""
    report = verdicts.diagnose_termination(
        termination=termination,
        evidence=evidence.agent,
        last_line_ns=evidence.last_line_ns,
        stale_after_s=stale_after_s,
        record_pending=evidence.record_pending,
        log_tail=evidence.log_tail,
    )
    if evidence.kernel_record or evidence.sidecar is None:
        return report
    return sidecar_findings.apply(report, termination, evidence.sidecar)
