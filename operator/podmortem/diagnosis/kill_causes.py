"""What ended the process: a cgroup limit, the whole node, an eviction, or a SIGKILL from elsewhere.

``memcg_limit`` and ``global_oom`` read a kernel record. ``eviction`` and
``sigkill_not_oom`` take plain facts from the pod status, so the operator can call
them when there is no kernel record at all.
"""

from __future__ import annotations

import re

from podmortem.diagnosis import limits
from podmortem.diagnosis.facts import RecordFacts
from podmortem.reports.failure import PodRef
from podmortem.reports.findings import Finding, Severity
from podmortem.reports.oom_record import CONSTRAINT_MEMCG, CONSTRAINT_NONE, KNOWN_CONSTRAINTS, OomKillRecord
from podmortem.reports.units import KIB, human_bytes


def _who(record: OomKillRecord) -> str:
    comm = record.victim_comm or "a process"
    pid = record.victim_pid
    return f"{comm} (pid {pid})" if pid is not None else comm


def _outcome(record: OomKillRecord) -> str:
    """What the kernel did, as far as the record shows it."""
    if record.no_killable:
        return "found no process it could kill"
    if record.victim_pid is None:
        return "was about to kill a process (the record is cut before its kill line: which one is not known)"
    return f"killed {_who(record)}"


_OWN_LIMIT_ACTION = (
    "Find what grew (the findings below) before raising resources.limits.memory: "
    "a bigger limit only moves the kill later if memory keeps growing."
)
_SHARED_LIMIT_ACTION = (
    "Raising this pod's limit does not help. Set memory requests close to real use so the node is not "
    "overcommitted (requests equal to limits gives Guaranteed QoS), spread or move large jobs to nodes with "
    "more allocatable memory, and check the kubelet's kube-reserved, system-reserved and eviction thresholds "
    "so it evicts before the kernel kills."
)


def _whose(record: OomKillRecord, level: str | None, pod: PodRef | None, size: str) -> tuple[str, str]:
    """The clause naming the cgroup that filled (``size``: " of 512 MiB" or ""), and what to do."""
    path = record.oom_memcg or "its memory cgroup"
    shared_size = f" (limit{size[3:]})" if size else ""
    if level == "qos":
        cls = "BestEffort" if limits.best_effort(record.oom_memcg) else "Burstable"
        extra = " (BestEffort pods have no memory limit of their own)" if cls == "BestEffort" else ""
        return (
            f"the {cls} QoS cgroup {path}{shared_size} filled: the {cls} pods on this node together used "
            f"all the memory the kubelet allows that class, so no pod hit a limit of its own{extra}",
            _SHARED_LIMIT_ACTION,
        )
    if level == "node":
        return (
            f"the node's pods cgroup {path}{shared_size} filled: all pods on this node together used the "
            "node's allocatable memory, so no pod hit a limit of its own",
            _SHARED_LIMIT_ACTION,
        )
    if level == "shared":
        return (
            f"the cgroup {path}{shared_size}, above this pod's own cgroup, filled: a limit the pods under "
            "it share, so this pod did not hit a limit of its own",
            _SHARED_LIMIT_ACTION,
        )
    if level == "system":
        return (
            f"the cgroup {path}, which is not a pod's, reached its own limit{size}, not because the node "
            "ran out",
            "Check the limit set on that cgroup (a systemd MemoryMax, or the kubelet enforcing kube-reserved "
            "or system-reserved on it) and what in it grew; pods did not hit their limits.",
        )
    if level == "container":
        whose = "the container's memory cgroup reached the container's own limit"
    elif level == "pod":
        whose = "the pod's memory cgroup reached the pod's limit (the sum of its containers' limits)"
    elif record.oom_memcg is None and pod is None:
        whose = "a memory cgroup (the text does not name it) reached its limit"
    else:
        named = (pod.limit_level if pod else None) or ""
        whose = {"container": "the container's", "pod": "the pod's"}.get(named, "its") + " memory cgroup "
        whose += "reached its own limit"
    return f"{whose}{size}, not because the node ran out", _OWN_LIMIT_ACTION


def _not_at_limit(record: OomKillRecord, hit: limits.LimitHit) -> tuple[str, str]:
    """A memcg kill while the cgroup's counters were below their limits: something else asked for it."""
    path = record.oom_memcg or "its memory cgroup"
    of = "no limit" if hit.limit_kb >= limits.UNLIMITED_KB else f"a {human_bytes(hit.limit_kb * KIB)} limit"
    printed = record.constraint_printed
    asked = (
        f"{printed} (not the kernel's limit check: a BPF OOM handler or a patched kernel's policy) asked "
        "for it"
        if printed and printed not in KNOWN_CONSTRAINTS
        else "of a limit the record does not show"
    )
    return (
        f"{asked}; the cgroup {path} was not at its limit ({human_bytes(hit.usage_kb * KIB)} of {of})",
        "Look at what decides OOM kills on this node besides the cgroup limits (a BPF OOM or PSI "
        "policy, a userspace OOM daemon acting through the kernel): no memory limit was reached.",
    )


def _counter_text(hit: limits.LimitHit | None) -> str:
    if hit is None or hit.counter == "memory":
        return ""
    size = human_bytes(hit.limit_kb * KIB)
    if hit.counter == "memory+swap":
        return (
            f" The full counter was memory+swap ({human_bytes(hit.usage_kb * KIB)} of {size}, failcnt "
            f"{hit.failcnt}), not memory alone: memory and swap together were used up."
        )
    return f" The full counter was kernel memory (kmem, {size})."


def _swap_text(hit: limits.LimitHit | None, swap: int | None) -> str:
    if swap is None or swap <= 0:
        return ""
    text = f" {human_bytes(swap)} of its memory was in swap"
    if hit is not None and hit.swap_full:
        text += " and swap.max was full, so nothing more could be swapped out"
    return text + "."


def memcg_limit(record: OomKillRecord, facts: RecordFacts, *, pod: PodRef | None = None) -> Finding | None:
    """The kill was a memory cgroup's limit: the container's, the pod's, or a shared (QoS, node) one."""
    if record.constraint_effective != CONSTRAINT_MEMCG:
        return None
    shape = limits.level(record.oom_memcg)
    known = pod.limit_level if pod is not None else None
    # What the agent knows of the pod's cgroup wins over the path's shape; the shape only says
    # more where the known limit is a shared one (a QoS class's or the node's).
    level: str | None = shape if known is None or (known == "shared" and shape in ("qos", "node")) else known
    hit = limits.limit_hit(record)
    swap = hit.swap_bytes if hit is not None else None
    if swap is None:
        swap = limits.stat_swap_bytes(record)
    size = ""
    if hit is not None and hit.counter == "memory" and hit.limit_kb < limits.UNLIMITED_KB:
        size = f" of {human_bytes(hit.limit_kb * KIB)}"
    elif hit is None and facts.limit_bytes is not None:
        size = f" of {human_bytes(facts.limit_bytes)}"
    whose, action = _whose(record, level, pod, size)
    inferred = f" ({record.constraint_note})" if record.constraint_inferred else ""
    if hit is not None and not limits.at_limit(hit):
        whose, action = _not_at_limit(record, hit)
        inferred = ""
    if hit is not None and hit.counter == "memory+swap":
        action = "With a memory+swap limit, raising the memory limit alone changes nothing; " + (
            action[0].lower() + action[1:]
        )
    return Finding(
        code="memcg-limit",
        severity=Severity.CRITICAL,
        message=(
            f"The kernel {_outcome(record)} because {whose}{inferred}.{_counter_text(hit)}"
            f"{_swap_text(hit, swap)}"
        ),
        evidence={
            "oom_memcg": record.oom_memcg,
            "limit_level": level,
            "limit_hit": hit.counter if hit is not None else None,
            # The counter that was hit: memory+swap's numbers when that is the one (v1).
            "limit_bytes": hit.limit_kb * KIB if hit is not None else facts.limit_bytes,
            "usage_bytes": hit.usage_kb * KIB if hit is not None else facts.usage_bytes,
            "failcnt": hit.failcnt if hit is not None else facts.failcnt,
            "swap_bytes": swap,
            "constraint_printed": record.constraint_printed,
            "constraint_inferred": record.constraint_inferred,
        },
        action=action,
    )


def global_oom(record: OomKillRecord, facts: RecordFacts) -> Finding | None:
    """The whole node ran out of memory: the victim scored worst on the node, not necessarily the cause."""
    if record.constraint_effective != CONSTRAINT_NONE:
        return None
    if record.victim_pid is None:
        what = f"the kernel {_outcome(record)}"
    else:
        what = (
            f"the kernel killed {_who(record)}, the process with the highest OOM score on the node, which "
            "need not be the one that grew"
        )
    inferred = f" ({record.constraint_note})" if record.constraint_inferred else ""
    return Finding(
        code="global-oom",
        severity=Severity.CRITICAL,
        message=f"The whole node ran out of memory and {what}{inferred}.",
        evidence={
            "constraint_printed": record.constraint_printed,
            "constraint_effective": record.constraint_effective,
            "constraint_inferred_from": record.constraint_note if record.constraint_inferred else None,
            "task_memcg": record.task_memcg,
            "victim_anon_rss_kb": record.victim.anon_rss_kb if record.victim else None,
        },
        action=(
            "Give large jobs memory requests equal to their limits, keep kubelet eviction "
            "thresholds and system-reserved memory so the kubelet evicts before the kernel kills, "
            "and check what else ran on the node."
        ),
    )


def no_killable(record: OomKillRecord) -> Finding | None:
    """"Out of memory and no killable processes...": the kernel could not free memory by killing."""
    if not record.no_killable:
        return None
    protected = [t for t in record.tasks if t.oom_score_adj == -1000]
    listed = ""
    if record.tasks:
        listed = f" {len(protected)} of the {len(record.tasks)} listed processes have oom_score_adj -1000."
    return Finding(
        code="no-killable-process",
        severity=Severity.CRITICAL,
        message=(
            "The kernel found no process it could kill: every candidate was protected (oom_score_adj "
            "-1000), already exiting, or otherwise not eligible, so nothing was killed and no memory was "
            f"freed.{listed}"
        ),
        evidence={
            # The finding rests on the kernel's own line, whatever else the record lacks.
            "kernel_line": "Out of memory and no killable processes...",
            "protected_pids": [t.pid for t in protected],
            "listed_pids": [t.pid for t in record.tasks],
            "trigger_comm": record.trigger_comm,
        },
        action=(
            "Look for what holds the memory while being protected (runtime shims, conmon and pause run at "
            "-998 to -1000) and for a task that keeps asking for memory; the allocation keeps failing until "
            "memory is freed, so the workload may hang rather than restart."
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
