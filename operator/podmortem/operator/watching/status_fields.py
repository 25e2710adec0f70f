"""The TrainingJob status fields that mirror its pod and its log: phase, times, exit, DiskFull. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from podmortem.kube.bodies import PodBody
from podmortem.operator.followed_pods import PodLogFacts


def pod_status_fields(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The TrainingJob status fields that mirror its pod."""
    body = PodBody(pod)
    phase = body.phase or "Pending"
    if phase not in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
        phase = "Unknown"
    fields: dict[str, Any] = {"phase": phase, "podName": body.name or None, "podUID": body.uid or None}
    if body.node_name:
        fields["nodeName"] = body.node_name
    started = body.status.get("startTime")
    finished = None
    exit_code = None
    for cs in body.statuses:
        started = started or cs.running_since or None
        term = cs.terminated
        if term is not None:
            finished = max(filter(None, [finished, term.finished_at]), default=None)
            if exit_code is None or term.exit_code not in (None, 0):
                exit_code = term.exit_code
    if started:
        fields["startedAt"] = started
    if phase in ("Succeeded", "Failed"):
        if finished:
            fields["finishedAt"] = finished
        if exit_code is not None:
            fields["exitCode"] = exit_code
    return fields


def disk_full_condition(facts: PodLogFacts, containers: list[str]) -> tuple[str, bool, str, str]:
    """The ``DiskFull`` condition: whose log is paused because the store's volume is full."""
    if containers:
        return ("DiskFull", True, "LogStoreFull",
                f"the log store's volume is full: following {facts.pod} ({', '.join(containers)}) is "
                "paused and retries from its cursor; lines the kubelet drops meanwhile are marked as a gap")
    return ("DiskFull", False, "LogStoreWritable", "the log store takes this job's lines again")
