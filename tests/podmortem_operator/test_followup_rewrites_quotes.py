"""The kernel-record follow-up rewrites what quoted the first report, whether the record comes or not.

The first report of an OOM kill whose record is pending says so in its cause finding ("The kernel's
own record is not in yet ..."); its ``Failed`` condition, a multi-pod job's section and the
``JobRootCause`` Event quote that text. When the follow-up ends (the record came, or the wait is
over and it says "was not available") the job's section is recomputed before the report is written
again (the reporter's ``_refresh_job``, over the followed targets it was built with), a new
``JobRootCause`` Event follows when its text changed,
and a TrainingJob's ``Failed`` condition is rewritten. Stand-ins for the agent and the API, as in
``test_kernel_record_followup``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from podmortem.diagnosis.job_root_cause import PodFacts
from podmortem.operator.jobs import Target
from podmortem.operator.targets import Targets, WatchedTarget
from podmortem.operator.watch_options import WatchOptions
from podmortem_demo.harness import evidence_for

from .test_kernel_record_followup import (
    RECORD,
    UID,
    RecordingKube,
    ScriptedAgent,
    running_reporter,
    termination,
)

PENDING_TEXT = "not in yet"


OTHER = "pod-uid-2"


def _job() -> tuple[Targets, WatchedTarget]:
    """A two-pod Job as the service knows it: this pod failed with the pending text, its peer too."""
    target = Target(role="foreign", api_version="batch/v1", kind="Job", namespace="default", name="ddp",
                    uid="job-uid", plural="jobs", options=WatchOptions())
    targets = Targets()
    known = targets.owners[target.uid] = WatchedTarget(target=target)
    started = datetime(2026, 1, 1, tzinfo=UTC)
    for uid, pod, rank, summary in ((UID, "trainer", 2, f"the kernel's record is {PENDING_TEXT}"),
                                    (OTHER, "peer", 0, "NCCL watchdog timed out")):
        mine = uid == UID
        known.job_pods[uid] = PodFacts(
            pod=pod, container="trainer", rank=rank, exit_code=137 if mine else 1,
            reason="OOMKilled" if mine else "Error",
            finished_at=started + timedelta(seconds=1 if mine else 30),
            last_line_at=None, verdict="memcg-limit" if mine else None, summary=summary,
        )
    return targets, known


async def _follow_up(agent: ScriptedAgent, *, wait_s: float) -> tuple[RecordingKube, WatchedTarget]:
    targets, known = _job()
    async with running_reporter(agent, wait_s=wait_s, targets=targets) as (reporter, kube):
        await reporter.report(
            termination=termination(), target=known.target, facts=None, seen_at=time.monotonic()
        )
    return kube, known


def _pod_target() -> Target:
    return Target(role="pod", api_version="v1", kind="Pod", namespace="default", name="trainer", uid=UID,
                  plural="pods", options=WatchOptions())


async def test_a_record_that_never_comes_rewrites_the_job_section_and_its_event() -> None:
    kube, known = await _follow_up(ScriptedAgent(evidence_for(UID, None)), wait_s=0.2)
    assert PENDING_TEXT in kube.annotations[0]["findings"][0]["message"]
    # the job's section was recomputed from the new text before the report was written again
    summary = known.job_pods[UID].summary or ""
    assert PENDING_TEXT not in summary and "was not available" in summary
    assert known.job_root is not None and "was not available" in known.job_root[2]
    last = kube.annotations[-1]
    assert last["kernelRecord"] == "not-found" and PENDING_TEXT not in last["findings"][0]["message"]
    assert [r for r, _ in kube.events] == ["MemcgLimit", "JobRootCause"]
    assert "was not available" in kube.events[-1][1] and PENDING_TEXT not in kube.events[-1][1]


async def test_a_record_that_comes_rewrites_the_job_section_then_both_events_follow() -> None:
    without = evidence_for(UID, None)
    kube, known = await _follow_up(ScriptedAgent(without, without, evidence_for(UID, RECORD)), wait_s=5.0)
    assert PENDING_TEXT not in (known.job_pods[UID].summary or "")
    assert [r for r, _ in kube.events] == ["MemcgLimit", "KernelRecordAttached", "JobRootCause"]


class StatusKube(RecordingKube):
    """Also takes a TrainingJob's status patches (the report and its conditions)."""

    def __init__(self) -> None:
        super().__init__()
        self.statuses: list[dict[str, Any]] = []

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path.endswith("/status"):
            self.statuses.append(body["status"])
            return body
        return await super().merge_patch(path, body)


async def test_a_trainingjobs_failed_condition_is_rewritten_when_the_record_never_comes() -> None:
    target = Target(role="trainingjob", api_version="podmortem.io/v1alpha1", kind="TrainingJob",
                    namespace="default", name="pg", uid="tj-uid", plural="trainingjobs",
                    options=WatchOptions())
    async with running_reporter(ScriptedAgent(evidence_for(UID, None)), wait_s=0.2) as (reporter, _):
        status_kube = StatusKube()
        reporter.writer.kube = reporter.writer.status.kube = status_kube  # type: ignore[assignment]
        await reporter.report(termination=termination(), target=target, facts=None, seen_at=time.monotonic())
    failed = [c for s in status_kube.statuses for c in s.get("conditions", []) if c["type"] == "Failed"]
    assert PENDING_TEXT in failed[0]["message"]
    assert failed[-1]["reason"] == "MemcgLimit" and PENDING_TEXT not in failed[-1]["message"], failed[-1]
    assert "was not available" in failed[-1]["message"]
    assert status_kube.statuses[-1]["failureReport"]["evidence"]["kernelRecord"]["state"] == "not-found"
