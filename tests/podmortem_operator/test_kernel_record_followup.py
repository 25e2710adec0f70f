"""The report and a kernel record that is there at once, comes late, never comes, or waits on a slow agent.

The Reporter runs against an agent stand-in that answers from a script and a
kube stand-in that records patches and Events; a pod's report is its
``podmortem.io/failure-report`` annotation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import aiohttp

from podmortem.diagnosis.termination import Termination
from podmortem.kernel import oom_parser
from podmortem.operator.jobs import Target
from podmortem.operator.reporting import kernel_record
from podmortem.operator.reporting.agent_client import AgentClient, AgentUnavailable
from podmortem.operator.reporting.reporter import Reporter
from podmortem.operator.settings import AgentAccessSettings, OperatorSettings, SidecarInjectionSettings
from podmortem.operator.status import StatusWriter
from podmortem.operator.targets import Targets
from podmortem.operator.watch_options import FAILURE_REPORT, WatchOptions
from podmortem.reports.document import merge_patch
from podmortem.reports.evidence import PodEvidence
from podmortem_demo.harness import evidence_for

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "oom-records"
RECORD = oom_parser.parse_text((RECORDS / "01-k3s-v1-dmesgT-stress-4.15.log").read_text())[0]
UID = "pod-uid-1"
#: The sidecar image the operator injects (its evidence is read only from a container running it).
SIDECAR_IMAGE = "registry.example.com/podmortem:0.1.0"


class ScriptedAgent:
    """Answers each request with the next scripted answer (the last one repeats); may stall."""

    def __init__(self, *answers: PodEvidence | AgentUnavailable | float) -> None:
        self.answers = list(answers)
        self.timeouts: list[float | None] = []

    async def evidence(
        self, *, node: str | None, pod_uid: str, timeout_s: float | None = None
    ) -> PodEvidence | AgentUnavailable:
        self.timeouts.append(timeout_s)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, float):  # a stall: longer than the in-budget timeout
            return AgentUnavailable(node, f"the agent on node {node} did not answer within {answer:g} s")
        return answer


class RecordingKube:
    def __init__(self) -> None:
        self.annotations: list[dict[str, Any]] = []
        self.events: list[tuple[str, str]] = []

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.annotations.append(json.loads(body["metadata"]["annotations"][FAILURE_REPORT]))
        return body

    async def post_event(self, *, involved: Any, type_: str, reason: str, message: str) -> None:
        self.events.append((reason, message))


def termination(*, reason: str = "OOMKilled", exit_code: int = 137) -> Termination:
    return Termination(
        namespace="default",
        pod="trainer",
        pod_uid=UID,
        node="node-a",
        container="trainer",
        container_id="containerd://abc",
        exit_code=exit_code,
        reason=reason,
        pod_reason=None,
        pod_message=None,
        started_at=datetime(2024, 5, 1, tzinfo=UTC),
        finished_at=datetime.now(UTC),
        deleting=False,
    )


TARGET = Target(
    role="pod",
    api_version="v1",
    kind="Pod",
    namespace="default",
    name="trainer",
    uid=UID,
    plural="pods",
    options=WatchOptions(),
)


@contextlib.asynccontextmanager
async def running_reporter(
    agent: ScriptedAgent, *, wait_s: float, agent_enabled: bool = True, finish: bool = True,
    targets: Targets | None = None,
) -> AsyncIterator[tuple[Reporter, RecordingKube]]:
    """A Reporter over the stand-ins; on exit its follow-ups run to their end (``finish``) or are cut."""
    kube = RecordingKube()
    settings = OperatorSettings(
        agent=AgentAccessSettings(
            enabled=agent_enabled, record_wait_s=wait_s, record_retry_min_s=0.01, record_retry_max_s=0.05
        ),
        sidecar=SidecarInjectionSettings(image=SIDECAR_IMAGE),
    )
    async with aiohttp.ClientSession() as session:
        reporter = Reporter(
            kube=cast(Any, kube),
            agent=cast(AgentClient, agent),
            session=session,
            settings=settings,
            status=StatusWriter(kube=cast(Any, kube)),
            targets=targets,
        )
        try:
            yield reporter, kube
            if finish:
                await asyncio.wait_for(reporter.follow_ups.wait(), timeout=30)
        finally:
            await reporter.stop()


async def report(
    agent: ScriptedAgent, *, t: Termination | None = None, wait_s: float = 5.0
) -> tuple[Reporter, RecordingKube]:
    async with running_reporter(agent, wait_s=wait_s) as (reporter, kube):
        await reporter.report(
            termination=t or termination(), target=TARGET, facts=None, seen_at=time.monotonic()
        )
    return reporter, kube


async def test_a_record_there_at_once_is_attached_and_nothing_is_asked_again() -> None:
    agent = ScriptedAgent(evidence_for(UID, RECORD))
    reporter, kube = await report(agent)
    assert len(agent.timeouts) == 1 and agent.timeouts == [None]  # the in-budget timeout
    assert [a["kernelRecord"] for a in kube.annotations] == ["attached"]
    assert "anon-dominant" in [f["code"] for f in kube.annotations[0]["findings"]]
    assert [r for r, _ in kube.events] == ["MemcgLimit"]
    assert reporter.outcomes[0].kernel_record_state == "attached"


async def test_a_late_record_is_asked_for_again_and_patched_in_with_new_findings() -> None:
    without = evidence_for(UID, None)
    agent = ScriptedAgent(without, without, without, evidence_for(UID, RECORD))
    reporter, kube = await report(agent)
    first, last = kube.annotations[0], kube.annotations[-1]
    assert first["kernelRecord"] == "pending" and [f["code"] for f in first["findings"]] == ["memcg-limit"]
    assert "kill" not in first
    assert last["kernelRecord"] == "attached" and "anon-dominant" in [f["code"] for f in last["findings"]]
    assert last["kill"]["pid"] == RECORD.victim_pid
    assert [r for r, _ in kube.events] == ["MemcgLimit", "KernelRecordAttached"]
    outcome = reporter.outcomes[0]
    assert outcome.document.evidence.kernel_record.requests == 3
    assert all(t is not None and 0 < t <= 5.0 for t in agent.timeouts[1:])  # the follow-up timeout


async def test_an_agent_too_slow_for_the_budget_is_asked_again_and_its_error_dropped() -> None:
    agent = ScriptedAgent(1.0, evidence_for(UID, RECORD))
    _, kube = await report(agent)
    first, last = kube.annotations[0], kube.annotations[-1]
    assert first["kernelRecord"] == "pending" and any("did not answer" in e for e in first["errors"])
    assert last["kernelRecord"] == "attached" and last["errors"] == []


async def test_a_record_that_never_comes_is_marked_not_found_without_a_second_event() -> None:
    agent = ScriptedAgent(evidence_for(UID, None))
    reporter, kube = await report(agent, wait_s=0.2)
    assert [a["kernelRecord"] for a in (kube.annotations[0], kube.annotations[-1])] == [
        "pending",
        "not-found",
    ]
    note = reporter.outcomes[0].document.evidence.kernel_record.note or ""
    assert "within 0.2 s" in note
    assert [r for r, _ in kube.events] == ["MemcgLimit"]


async def test_no_record_is_sought_for_a_kill_that_is_not_oom_like() -> None:
    agent = ScriptedAgent(evidence_for(UID, None))
    _, kube = await report(agent, t=termination(reason="Completed", exit_code=1))
    assert [a["kernelRecord"] for a in kube.annotations] == ["not-sought"]
    assert len(agent.timeouts) == 1


def test_settings_refuse_a_negative_wait() -> None:
    try:
        AgentAccessSettings(record_wait_s=-1)
    except ValueError as exc:
        assert "0 s or more" in str(exc)
    else:
        raise AssertionError("a negative wait was accepted")
    assert (
        kernel_record.initial_state(termination(), None, settings=AgentAccessSettings(record_wait_s=0))
        == kernel_record.NOT_FOUND
    )


def test_a_patch_removes_what_the_new_report_no_longer_has() -> None:
    old = {
        "evidence": {"kernelRecord": {"state": "pending", "note": "asked again"}, "samples": 5},
        "kill": None,
    }
    new = {"evidence": {"kernelRecord": {"state": "attached"}, "samples": 6}, "updatedAt": "t"}
    assert merge_patch(old, new) == {
        "evidence": {"kernelRecord": {"state": "attached", "note": None}, "samples": 6},
        "updatedAt": "t",
        "kill": None,
    }


async def resume(
    agent: ScriptedAgent, stored: dict[str, Any], *, wait_s: float, agent_enabled: bool = True
) -> tuple[Reporter, RecordingKube]:
    async with running_reporter(agent, wait_s=wait_s, agent_enabled=agent_enabled) as (reporter, kube):
        reporter.resume_pending_record(termination=termination(), target=TARGET, stored=stored)
    return reporter, kube


async def _pending_summary() -> dict[str, Any]:
    """The annotation an operator wrote before it stopped, with the record still pending."""
    agent = ScriptedAgent(evidence_for(UID, None))
    # The operator stops: the follow-up is cancelled.
    async with running_reporter(agent, wait_s=60.0, finish=False) as (reporter, kube):
        await reporter.report(termination=termination(), target=TARGET, facts=None, seen_at=time.monotonic())
    [first] = kube.annotations
    assert first["kernelRecord"] == "pending"
    return first


async def test_a_resumed_follow_up_attaches_a_record_that_came_while_no_operator_ran() -> None:
    stored = await _pending_summary()
    reporter, kube = await resume(ScriptedAgent(evidence_for(UID, RECORD)), stored, wait_s=60.0)
    [last] = kube.annotations
    assert last["kernelRecord"] == "attached" and "anon-dominant" in [f["code"] for f in last["findings"]]
    assert last["reportedAt"] == stored["reportedAt"] and last["pod"] == stored["pod"]
    assert [r for r, _ in kube.events] == ["KernelRecordAttached"]  # the first report's Event is not repeated
    assert reporter.outcomes[0].document.evidence.kernel_record.requests == 1


async def test_a_resumed_follow_up_past_its_window_asks_once_then_says_not_found() -> None:
    stored = await _pending_summary()
    stored["reportedAt"] = "2020-01-01T00:00:00Z"  # the operator was down longer than the wait
    agent = ScriptedAgent(evidence_for(UID, None))
    _, kube = await resume(agent, stored, wait_s=5.0)
    assert len(agent.timeouts) == 1
    [last] = kube.annotations
    assert last["kernelRecord"] == "not-found" and [f["code"] for f in last["findings"]] == ["memcg-limit"]
    assert kube.events == []


async def test_a_resumed_follow_up_without_an_agent_to_ask_says_so() -> None:
    stored = await _pending_summary()
    agent = ScriptedAgent(evidence_for(UID, RECORD))
    _, kube = await resume(agent, stored, wait_s=60.0, agent_enabled=False)
    assert agent.timeouts == []
    [last] = kube.annotations
    assert last["kernelRecord"] == "not-found" and kube.events == []
