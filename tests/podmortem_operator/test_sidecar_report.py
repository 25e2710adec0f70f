"""The Reporter with the sidecar's termination message: read late, untrusted, and behind the kernel's record.

The pod and its message are those of `tests.diagnosis.test_sidecar_findings`; the Reporter runs over
the stand-ins of `test_kernel_record_followup`; the pod's report is its annotation.
"""

from __future__ import annotations

import time

from tests.diagnosis.test_sidecar_findings import MIB, evidence, pod

from podmortem.diagnosis import sidecar_findings
from podmortem.diagnosis import termination as term_mod
from podmortem.reports.sidecar_evidence import render
from podmortem_demo.harness import evidence_for

from .test_kernel_record_followup import RECORD, TARGET, UID, ScriptedAgent, running_reporter


async def test_without_an_agent_the_sidecars_late_message_makes_the_report() -> None:
    agent = ScriptedAgent(evidence_for(UID, None))
    async with running_reporter(agent, wait_s=0.0, agent_enabled=False) as (reporter, kube):
        t = term_mod.find(pod(None))[0]
        outcome = await reporter.report(termination=t, target=TARGET, facts=None, seen_at=time.monotonic())
        first = outcome.document
        assert first.evidence.sidecar is not None and first.evidence.sidecar.state == "pending"
        assert "not available in sidecar mode" in (first.evidence.kernel_record.note or "")
        assert reporter.attach_sidecar(term_mod.find(pod(render(evidence())))[0])
        assert not reporter.attach_sidecar(term_mod.find(pod(render(evidence())))[0])  # once
    last = kube.annotations[-1]
    assert last["verdict"] == "memcg-limit" and last["kill"]["pid"] == 26707
    codes = [f["code"] for f in last["findings"]]
    assert codes[0] == "memcg-limit" and {"fork-copies", "sidecar-evidence"} <= set(codes)
    summary = outcome.document.evidence.sidecar
    assert summary is not None and summary.victim_pid == 26707


async def test_an_edited_message_is_named_invalid_and_changes_nothing_else() -> None:
    agent = ScriptedAgent(evidence_for(UID, None))
    async with running_reporter(agent, wait_s=0.0, agent_enabled=False) as (reporter, _):
        t = term_mod.find(pod('{"v": 1, "mem": {"usage": -5}}'))[0]
        outcome = await reporter.report(termination=t, target=TARGET, facts=None, seen_at=time.monotonic())
    side = outcome.document.evidence.sidecar
    assert side is not None and side.state == "invalid" and "not its evidence" in (side.note or "")
    assert [f.code for f in outcome.report.findings][:1] == ["memcg-limit"]  # the kubelet's word alone
    assert "sidecar-evidence" not in [f.code for f in outcome.report.findings]


async def test_with_an_agent_the_kernel_record_wins_and_both_name_the_same_kill() -> None:
    agent = ScriptedAgent(evidence_for(UID, RECORD))
    victim = RECORD.victim_pid
    assert victim is not None
    side = evidence(kill={"victim": {"pid": victim, "comm": "python", "pss": 1100 * MIB, "role": "trainer"},
                          "gone": [victim], "at": "2026-12-04T13:36:26.457Z"})
    async with running_reporter(agent, wait_s=5.0) as (reporter, _):
        t = term_mod.find(pod(render(side)))[0]
        outcome = await reporter.report(termination=t, target=TARGET, facts=None, seen_at=time.monotonic())
    codes = [f.code for f in outcome.report.findings]
    assert outcome.kernel_record_state == "attached" and "sidecar-evidence" not in codes
    from_sidecar = sidecar_findings.findings(t, side)
    assert outcome.report.verdict == from_sidecar[0].code == "memcg-limit"
    assert outcome.report.kill is not None
    assert outcome.report.kill.pid == victim == from_sidecar[0].evidence["victim_pid"]
    summary = outcome.document.evidence.sidecar
    assert summary is not None and summary.state == "attached"
