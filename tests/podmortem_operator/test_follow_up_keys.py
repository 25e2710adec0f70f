"""A report's follow-ups belong to its termination, and each makes the report again from all its evidence.

Pods are found by uid, never by name: two pods named alike in two namespaces each have their own
follow-ups, and one still waiting for its kernel record does not hold the other's reports unsettled.
After an operator restart, the sidecar's message is evidence the resumed report is made from; and a
record that never comes leaves no finding saying it is on its way. The Reporter runs over the
stand-ins of `test_kernel_record_followup`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from tests.diagnosis.test_sidecar_findings import evidence, pod

from podmortem.diagnosis import termination as term_mod
from podmortem.diagnosis.termination import Termination
from podmortem.operator.reporting.agent_client import AgentUnavailable
from podmortem.operator.reporting.follow_ups import FollowUpKey
from podmortem.reports.evidence import PodEvidence
from podmortem.reports.sidecar_evidence import render
from podmortem_demo.harness import evidence_for

from .test_kernel_record_followup import RECORD, TARGET, ScriptedAgent, running_reporter, termination

PENDING_TEXT = "not in yet"


class AgentByPod:
    """Answers with each pod's own evidence: the record for the pods given one, none for the others."""

    def __init__(self, records: dict[str, bool]) -> None:
        self.records = records

    async def evidence(
        self, *, node: str | None, pod_uid: str, timeout_s: float | None = None
    ) -> PodEvidence | AgentUnavailable:
        return evidence_for(pod_uid, RECORD if self.records[pod_uid] else None)


def in_namespace(namespace: str, uid: str) -> tuple[Termination, object]:
    t = dataclasses.replace(termination(), namespace=namespace, pod_uid=uid)
    return t, dataclasses.replace(TARGET, namespace=namespace, uid=uid)


async def test_same_named_pods_in_two_namespaces_have_their_own_follow_ups() -> None:
    agent = AgentByPod({"uid-a": False, "uid-b": True})
    async with running_reporter(agent, wait_s=60.0, finish=False) as (reporter, _):  # type: ignore[arg-type]
        waiting, waiting_target = in_namespace("team-a", "uid-a")
        done, done_target = in_namespace("team-b", "uid-b")
        assert waiting.pod == done.pod and FollowUpKey.of(waiting) != FollowUpKey.of(done)
        first = await reporter.report(termination=waiting, target=waiting_target,  # type: ignore[arg-type]
                                      facts=None, seen_at=time.monotonic())
        second = await reporter.report(termination=done, target=done_target,  # type: ignore[arg-type]
                                       facts=None, seen_at=time.monotonic())
        await asyncio.sleep(0)
        assert (first.kernel_record_state, second.kernel_record_state) == ("pending", "attached")
        assert reporter.follow_ups.running("kernel-record", waiting)
        assert not reporter.follow_ups.running("kernel-record", done)
        assert not reporter.settled("uid-a")
        assert reporter.settled("uid-b")  # the other namespace's waiting pod is not this one


async def test_a_resumed_report_keeps_the_sidecars_evidence_when_no_record_comes() -> None:
    [t] = term_mod.find(pod(render(evidence())))
    async with running_reporter(ScriptedAgent(evidence_for(t.pod_uid, None)), wait_s=60.0,
                                finish=False) as (reporter, kube):
        await reporter.report(termination=t, target=TARGET, facts=None, seen_at=time.monotonic())
    stored = kube.annotations[0]
    assert stored["kernelRecord"] == "pending"
    stored["reportedAt"] = "2020-01-01T00:00:00Z"  # the operator was down longer than the wait
    async with running_reporter(ScriptedAgent(evidence_for(t.pod_uid, None)), wait_s=5.0) as (reporter, kube):
        reporter.resume_pending_record(termination=t, target=TARGET, stored=stored)
    [last] = kube.annotations
    assert last["kernelRecord"] == "not-found"
    assert last["verdict"] == "memcg-limit" and last["kill"]["pid"] == evidence().kill.victim.pid  # type: ignore[union-attr]
    assert "sidecar-evidence" in [f["code"] for f in last["findings"]]


async def test_a_record_that_never_comes_leaves_no_finding_saying_it_is_on_its_way() -> None:
    agent = ScriptedAgent(evidence_for(TARGET.uid, None), 1.0)  # then the agent stops answering
    async with running_reporter(agent, wait_s=0.2) as (reporter, kube):
        await reporter.report(termination=termination(), target=TARGET, facts=None, seen_at=time.monotonic())
    first, last = kube.annotations[0], kube.annotations[-1]
    assert first["kernelRecord"] == "pending" and PENDING_TEXT in first["findings"][0]["message"]
    assert last["kernelRecord"] == "not-found"
    assert PENDING_TEXT not in last["findings"][0]["message"], last["findings"][0]
    assert "was not available" in last["findings"][0]["message"]
