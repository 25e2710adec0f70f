"""What ended the process: a cgroup limit, the whole node, an eviction, or a SIGKILL from elsewhere.

``memcg_limit`` and ``global_oom`` read a kernel record. ``eviction`` and
``sigkill_not_oom`` take plain facts from the pod status, so the operator can call
them when there is no kernel record at all.
"""

from __future__ import annotations

import re

from podmortem.diagnosis.facts import RecordFacts
from podmortem.reports.failure import PodRef
from podmortem.reports.findings import Finding, Severity
from podmortem.reports.oom_record import CONSTRAINT_MEMCG, CONSTRAINT_NONE, OomKillRecord
from podmortem.reports.units import human_bytes


def _who(record: OomKillRecord) -> str:
    comm = record.victim_comm or "a process"
    pid = record.victim_pid
    return f"{comm} (pid {pid})" if pid is not None else comm


def memcg_limit(record: OomKillRecord, facts: RecordFacts, *, pod: PodRef | None = None) -> Finding | None:
    """The kill was a memory cgroup's own limit (the container's or the pod's), not the node running out."""
    if record.constraint_effective != CONSTRAINT_MEMCG:
        return None
    level = pod.limit_level if pod is not None else None
    whose = {"container": "the container's", "pod": "the pod's"}.get(level or "", "its")
    limit = f" of {human_bytes(facts.limit_bytes)}" if facts.limit_bytes is not None else ""
    inferred = f" ({record.constraint_note})" if record.constraint_inferred else ""
    return Finding(
        code="memcg-limit",
        severity=Severity.CRITICAL,
        message=(
            f"The kernel killed {_who(record)} because {whose} memory cgroup reached its own "
            f"limit{limit}, not because the node ran out{inferred}."
        ),
        evidence={
            "oom_memcg": record.oom_memcg,
            "limit_level": level,
            "limit_bytes": facts.limit_bytes,
            "usage_bytes": facts.usage_bytes,
            "failcnt": facts.failcnt,
            "constraint_printed": record.constraint_printed,
            "constraint_inferred": record.constraint_inferred,
        },
        action=(
            "Find what grew (the findings below) before raising resources.limits.memory: "
            "a bigger limit only moves the kill later if memory keeps growing."
        ),
    )


def global_oom(record: OomKillRecord, facts: RecordFacts) -> Finding | None:
    """The whole node ran out of memory: the victim scored worst on the node, not necessarily the cause."""
    if record.constraint_effective != CONSTRAINT_NONE:
        return None
    return Finding(
        code="global-oom",
        severity=Severity.CRITICAL,
        message=(
            f"The whole node ran out of memory and the kernel killed {_who(record)}, the process "
            f"with the highest OOM score on the node, which need not be the one that grew."
        ),
        evidence={
            "constraint_printed": record.constraint_printed,
            "task_memcg": record.task_memcg,
            "victim_anon_rss_kb": record.victim.anon_rss_kb if record.victim else None,
        },
        action=(
            "Give large jobs memory requests equal to their limits, keep kubelet eviction "
            "thresholds and system-reserved memory so the kubelet evicts before the kernel kills, "
            "and check what else ran on the node."
        ),
    )


_EVICTION_USAGE = re.compile(
    r"Container (\S+) was using ([^\s,]+), request is ([^\s,.]+)|"
    r"Container (\S+) was using ([^\s,]+), which exceeds its request of ([^\s,.]+)"
)


def eviction(*, reason: str | None, message: str | None) -> Finding | None:
    """The kubelet evicted the pod (pod status ``reason: Evicted``) under node memory pressure."""
    if reason != "Evicted":
        return None
    text = message or ""
    evidence: dict[str, str | None] = {"reason": reason, "status_message": message}
    m = _EVICTION_USAGE.search(text)
    if m is not None:
        groups = m.groups()
        container, using, request = groups[0:3] if groups[0] else groups[3:6]
        evidence.update({"container": container, "usage": using, "request": request})
    resource = "memory" if "memory" in text else "a node resource"
    return Finding(
        code="eviction",
        severity=Severity.CRITICAL,
        message=(
            f"The kubelet evicted the pod because the node ran low on {resource}; "
            f"pods using most above their requests go first."
        ),
        evidence=dict(evidence),
        action=(
            "Set the memory request close to real peak usage (or requests equal to limits for "
            "Guaranteed QoS) so this pod is not first in line."
        ),
    )


def sigkill_not_oom(*, exit_code: int | None, reason: str | None, oom_record_found: bool) -> Finding | None:
    """Exit 137 (SIGKILL) with no OOM kill behind it: something else sent the signal."""
    if exit_code != 137 or oom_record_found or reason == "OOMKilled":
        return None
    return Finding(
        code="sigkill-not-oom",
        severity=Severity.CRITICAL,
        message=(
            "The container got SIGKILL (exit 137) but no OOM kill was recorded, so something "
            "else killed it: a failed liveness probe, a grace period that ran out, a forced "
            "delete, or a node shutdown."
        ),
        evidence={"exit_code": exit_code, "reason": reason, "oom_record_found": oom_record_found},
        action=(
            "Check the pod's events for probe failures and Killing events, and whether "
            "terminationGracePeriodSeconds is long enough for a checkpoint to finish."
        ),
    )
