"""Turning a pod's ring of samples and records into the `PodEvidence` the operator reads.

Pure: it takes what the agent holds and returns the model, so the JSON contract
is tested without a server, a kernel or a clock.
"""

from __future__ import annotations

from datetime import datetime

from podmortem.agent.pods import WatchedPod
from podmortem.agent.ring import PodHistory
from podmortem.reports.evidence import KernelLogStatus, PodEvidence, SampleGap
from podmortem.reports.memory import MemorySample
from podmortem.reports.oom_record import OomKillRecord

Entry = MemorySample | SampleGap


def build_evidence(
    *,
    uid: str,
    history: PodHistory[Entry, OomKillRecord] | None,
    pod: WatchedPod | None,
    node: str,
    cgroup_version: int | None,
    kmsg: KernelLogStatus,
    now: datetime,
    since: datetime | None = None,
) -> PodEvidence:
    """Evidence for one pod; ``since`` keeps only samples, gaps and nothing older (records are all kept)."""
    samples: list[MemorySample] = []
    gaps: list[SampleGap] = []
    records: list[OomKillRecord] = []
    samples_dropped = records_dropped = 0
    if history is not None:
        for entry in history.samples:
            if since is not None and entry.at < since:
                continue
            if isinstance(entry, MemorySample):
                samples.append(entry)
            else:
                gaps.append(entry)
        records = list(history.records)
        samples_dropped = history.samples_dropped
        records_dropped = history.records_dropped
    return PodEvidence(
        pod_uid=uid,
        node=node,
        namespace=pod.namespace if pod is not None else "",
        name=pod.name if pod is not None else "",
        cgroup_path=pod.cgroup_path if pod is not None else None,
        cgroup_version=cgroup_version,
        samples=samples,
        samples_dropped=samples_dropped,
        gaps=gaps,
        kernel_records=records,
        kernel_records_dropped=records_dropped,
        kmsg_lost=kmsg.lost,
        kmsg=kmsg,
        sampled_from=samples[0].at if samples else None,
        sampled_to=samples[-1].at if samples else None,
        served_at=now,
    )
