"""One order of precedence for a report's evidence: the kernel's record, else the sidecar's, else the kubelet.

Recorded inputs: a real kernel OOM record (k3s, cgroup v1), the sidecar's evidence of a real kill
(`test_sidecar_findings.evidence`), and the kubelet's OOMKilled in the pod status.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from podmortem.diagnosis import termination as term_mod
from podmortem.diagnosis.rediagnose import Evidence, rediagnose
from podmortem.diagnosis.termination import Termination
from podmortem.kernel import oom_parser
from podmortem.reports.failure import FailureReport
from podmortem_demo.harness import evidence_for

from .test_sidecar_findings import UID, evidence, pod

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "oom-records"
RECORD = oom_parser.parse_text((RECORDS / "01-k3s-v1-dmesgT-stress-4.15.log").read_text())[0]
#: The victim the sidecar's evidence names (a pid the kernel record does not).
SIDECAR_VICTIM = 26707
STALE_S = 30.0


def trainer() -> Termination:
    """The trainer, OOMKilled (exit 137) in a pod with the sidecar."""
    [t] = term_mod.find(pod(None))
    return t


def diagnosed(evidence_: Evidence, t: Termination | None = None) -> FailureReport:
    return rediagnose(t or trainer(), evidence_, stale_after_s=STALE_S)


def codes(report: FailureReport) -> list[str]:
    return [f.code for f in report.findings]


def test_the_kernel_record_wins_over_the_sidecars_evidence() -> None:
    agent = evidence_for(UID, RECORD)
    both = diagnosed(Evidence.of(agent=agent, sidecar=evidence()))
    assert both == diagnosed(Evidence.of(agent=agent))  # the sidecar adds nothing to the record
    assert both.kill is not None and both.kill.pid == RECORD.victim_pid != SIDECAR_VICTIM
    assert "sidecar-evidence" not in codes(both) and both.in_pod_evidence == []
    assert "anon-dominant" in codes(both)  # what only the record tells


def test_without_a_record_the_sidecars_evidence_wins_over_the_kubelets_word() -> None:
    for agent in (None, evidence_for(UID, None)):  # the agent silent, or answering with no record
        report = diagnosed(Evidence.of(agent=agent, sidecar=evidence()))
        assert report.verdict == "memcg-limit" and report.kill is not None
        assert report.kill.pid == SIDECAR_VICTIM
        assert "sidecar-evidence" in codes(report) and "memcg-limit" in report.in_pod_evidence
        cause = next(f for f in report.findings if f.code == "memcg-limit")
        assert cause.evidence["source"] == "sidecar"


def test_with_neither_the_kubelets_word_alone_says_whether_the_record_is_on_its_way() -> None:
    alone = diagnosed(Evidence.of(agent=evidence_for(UID, None)))
    assert alone.verdict == "memcg-limit" and alone.kill is None and alone.in_pod_evidence == []
    assert "the agent has no OOM record of this pod" in alone.findings[0].message
    pending = diagnosed(Evidence.of(agent=evidence_for(UID, None), record_pending=True))
    assert "not in yet" in pending.findings[0].message
    assert "gave no evidence" in diagnosed(Evidence.of()).findings[0].message


def test_the_log_tail_is_read_where_the_kubelet_alone_speaks() -> None:
    crashed = dataclasses.replace(trainer(), exit_code=1, reason="Error")
    tail = ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
            "ValueError: the batch is empty"]
    assert diagnosed(Evidence.of(log_tail=tail), crashed).verdict == "python-exception"
    assert diagnosed(Evidence.of(), crashed).verdict != "python-exception"


def test_the_agents_samples_are_not_held_for_the_diagnosis() -> None:
    agent = evidence_for(UID, RECORD)
    assert agent.samples
    held = Evidence.of(agent=agent)
    assert held.agent is not None and held.agent.samples == [] and held.agent.kernel_records == [RECORD]
    assert diagnosed(held) == diagnosed(Evidence(agent=agent))
