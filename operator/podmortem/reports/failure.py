"""The failure report: what one kill (or one unexplained exit) comes down to, in a stable JSON shape.

``podmortem diagnose --json`` prints ``{"reports": [FailureReport, …]}`` and the operator
writes the same model into a TrainingJob's status, so its JSON is a contract: fields
are only ever added (all optional, with defaults), never renamed or removed. A job's
status has a size budget, hence ``trimmed(max_bytes)``, which drops the bulkiest
evidence first and records what it dropped.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, Field, computed_field

from podmortem.reports.findings import Finding
from podmortem.reports.memory import MemoryBreakdown
from podmortem.reports.memory_classes import CgroupVersion
from podmortem.reports.units import DEFAULT_PAGE_SIZE

Sharing = Literal["owned", "shared", "unknown"]


class PodRef(BaseModel):
    """Who a cgroup path belongs to in Kubernetes terms (from ``podmortem.cgroups.paths``).

    A container outside pods (docker, nerdctl, podman, CRI-O without the kubelet) has a
    ``container_id`` and ``runtime`` and no ``pod_uid``.
    """

    pod_uid: str | None = None
    container_id: str | None = None
    #: "guaranteed", "burstable" or "besteffort"; Guaranteed pods have no QoS level in the path.
    qos: str | None = None
    #: Container runtime as the path names it: "containerd", "cri-o", "docker", "podman"; None when bare.
    runtime: str | None = None
    #: The cgroup is the runtime's monitor of that container (``crio-conmon-``, ``libpod-conmon-``):
    #: a process in it is conmon, not one of the container's.
    monitor: bool = False
    #: Whether the limit that was hit is the "pod" cgroup, a "container" cgroup below it, or one
    #: "shared" above it (known from the pod's own cgroup, or read off the path's shape offline).
    limit_level: Literal["pod", "container", "shared"] | None = None


class KillSummary(BaseModel):
    """Who was killed, against which limit, and when. Sizes as the kernel printed them (kB)."""

    pid: int | None = None
    comm: str | None = None
    #: As printed in the oom-kill line; None without one, "" when printed empty.
    constraint: str | None = None
    constraint_effective: str | None = None
    constraint_inferred: bool = False
    constraint_note: str | None = None
    anon_rss_kb: int | None = None
    file_rss_kb: int | None = None
    shmem_rss_kb: int | None = None
    total_vm_kb: int | None = None
    oom_memcg: str | None = None
    task_memcg: str | None = None
    pod_uid: str | None = None
    container_id: str | None = None
    qos: str | None = None
    #: The container runtime a path names ("docker", "containerd", "cri-o", "podman"), pod or not.
    runtime: str | None = None
    #: The process was the runtime's monitor (conmon) of that container, not the container itself.
    container_monitor: bool = False
    #: Every killed pid: one, or the whole group under memory.oom.group.
    killed_pids: list[int] = Field(default_factory=list)
    #: Old kernels' ``Kill process PID (comm) score N or sacrifice child``: the process the kernel
    #: chose. A kill happened, but without the ``Killed process`` line it may have been a child.
    chosen_pid: int | None = None
    chosen_comm: str | None = None
    oom_group: bool = False
    trigger_pid: int | None = None
    trigger_comm: str | None = None
    kernel_version: str | None = None
    #: Kernel monotonic seconds; time_text is the human timestamp as printed (may drift).
    monotonic_s: float | None = None
    time_text: str | None = None
    host: str | None = None
    kmsg_seq: int | None = None


class CgroupSummary(BaseModel):
    """The cgroup whose limit was hit. ``stat`` is its printed memory.stat: original keys, bytes."""

    version: CgroupVersion | None = None
    path: str | None = None
    #: Usage, limit and failcnt of the counter that was hit (``limit_counter``).
    limit_bytes: int | None = None
    usage_bytes: int | None = None
    failcnt: int | None = None
    #: "memory", "memory+swap" (v1: a full memsw limit fails the charge while memory is below its
    #: own) or "kmem"; None when the record prints no counters.
    limit_counter: str | None = None
    #: v1 kernel memory (``kmem:`` line), where printed.
    kmem_bytes: int | None = None
    stat: dict[str, int] = Field(default_factory=dict)
    #: Which printed block ``stat`` is (the limit's own cgroup when printed, else the first).
    stat_path: str | None = None
    breakdown: MemoryBreakdown | None = None
    #: The category that holds at least half: "anon", "shmem", "kernel", "file", "sock" (v2 socket
    #: buffers) or "hugetlb"; None when mixed or unknown.
    dominant: str | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def dominant_class(self) -> str | None:
        """The finest class that holds at least half: a part of the category ("slab", "pagetables",
        "percpu", "kernel_stack", "zswap", "file_dirty") where one does, else the category itself."""
        return self.breakdown.dominant_class() if self.breakdown is not None else None


class TaskSummary(BaseModel):
    """One task-table row. Pages as printed; ``sharing`` marks fork copies that share pages."""

    pid: int
    name: str
    rss_pages: int | None = None
    rss_anon_pages: int | None = None
    rss_file_pages: int | None = None
    rss_shmem_pages: int | None = None
    total_vm_pages: int | None = None
    pgtables_bytes: int | None = None
    swapents_pages: int | None = None
    oom_score_adj: int | None = None
    killed: bool = False
    #: "owned": its pages are its own as far as the record shows; "shared": a fork of a larger
    #: process while the per-process sum exceeds the cgroup's anon; "unknown": no cgroup numbers.
    sharing: Sharing = "unknown"


class FailureReport(BaseModel):
    """Why a pod's process died: the kill, its cgroup, its processes, and the findings.

    Later stages add fields (pod status verdicts, log staleness, memory trend); every
    field has a default so that older JSON still reads.
    """

    #: The cause's finding code: "memcg-limit", "global-oom", "eviction", "sigkill-not-oom", or None.
    verdict: str | None = None
    kill: KillSummary | None = None
    cgroup: CgroupSummary | None = None
    tasks: list[TaskSummary] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    #: True when the record was cut short; ``missing`` says which parts.
    partial: bool = False
    missing: list[str] = Field(default_factory=list)
    #: Page size used to turn task-table pages into bytes (inferred from the record where possible).
    page_size_bytes: int = DEFAULT_PAGE_SIZE
    #: What ``trimmed()`` dropped to fit a size budget, in words; empty when nothing was dropped.
    dropped: list[str] = Field(default_factory=list)
    #: Where the kernel record came from when it is not the node's kernel log (the record's
    #: ``source``: ``podmortem demo``'s recorded record says "RECORDED, not from this run: ..."); None
    #: for a record the agent read. Every headline of the report starts with it (`labelled`).
    record_source: str | None = None

    def labelled(self, text: str) -> str:
        """``text`` (a headline quoting this report) with ``[record_source]`` in front, when there is one."""
        return f"[{self.record_source}] {text}" if self.record_source else text
    #: The codes of the findings that rest on in-pod evidence (the sidecar's termination message: the
    #: pod's own testimony, which a hostile trainer may have shaped), not on the kubelet or the kernel.
    in_pod_evidence: list[str] = Field(default_factory=list)

    def finding(self, code: str) -> Finding | None:
        return next((f for f in self.findings if f.code == code), None)

    def json_size(self) -> int:
        """Bytes of this report as the status and the annotation store it: compact ``json.dumps``,
        which writes non-ASCII text as ``\\uXXXX`` (6 bytes; pydantic's JSON writes UTF-8, 3 for a CJK
        character, so a ``dmesg -T`` time in Chinese measured short and overflowed the budget)."""
        return len(json.dumps(self.model_dump(mode="json"), separators=(",", ":")).encode())

    def trimmed(self, max_bytes: int) -> FailureReport:
        """A copy whose JSON fits ``max_bytes``, dropping bulk evidence first and saying what went.

        Order: small task rows (the killed and the largest five stay), then stat keys the
        diagnosis does not use, then all other task rows, the whole stat, finding evidence,
        and finally the actions. The verdict, kill summary and finding messages stay, so a
        budget below their size is not met (the caller sees ``json_size()``).
        """
        report = self.model_copy(deep=True)
        if report.json_size() <= max_bytes:
            return report
        steps = (
            _drop_small_tasks,
            _drop_unused_stat_keys,
            _drop_all_other_tasks,
            _drop_stat,
            _drop_evidence,
            _drop_actions,
        )
        for step in steps:
            note = step(report)
            if note:
                report.dropped.append(note)
            if report.json_size() <= max_bytes:
                break
        return report


#: Stat keys the diagnosis reads; kept by the second trimming step.
ESSENTIAL_STAT_KEYS = frozenset(
    {
        "anon",
        "file",
        "kernel",
        "shmem",
        "sock",
        "kernel_stack",
        "pagetables",
        "percpu",
        "slab",
        "rss",
        "cache",
        "total_rss",
        "total_cache",
        "total_shmem",
        "mapped_file",
        "file_mapped",
        "inactive_anon",
        "active_anon",
        "hierarchical_memory_limit",
    }
)


def _keep_pids(report: FailureReport) -> set[int]:
    by_size = sorted(report.tasks, key=lambda t: t.rss_pages or 0, reverse=True)
    keep = {t.pid for t in by_size[:5]}
    keep.update(t.pid for t in report.tasks if t.killed)
    return keep


def _drop_small_tasks(report: FailureReport) -> str | None:
    keep = _keep_pids(report)
    before = len(report.tasks)
    report.tasks = [t for t in report.tasks if t.pid in keep]
    dropped = before - len(report.tasks)
    return (
        f"tasks: dropped {dropped} of {before} rows (kept the killed and the 5 largest)" if dropped else None
    )


def _drop_unused_stat_keys(report: FailureReport) -> str | None:
    if report.cgroup is None:
        return None
    stat = report.cgroup.stat
    kept = {k: v for k, v in stat.items() if k in ESSENTIAL_STAT_KEYS}
    dropped = len(stat) - len(kept)
    report.cgroup.stat = kept
    return (
        f"cgroup.stat: dropped {dropped} of {len(stat)} keys the diagnosis does not use" if dropped else None
    )


def _drop_all_other_tasks(report: FailureReport) -> str | None:
    before = len(report.tasks)
    report.tasks = [t for t in report.tasks if t.killed]
    dropped = before - len(report.tasks)
    return f"tasks: dropped {dropped} more rows (kept only the killed)" if dropped else None


def _drop_stat(report: FailureReport) -> str | None:
    if report.cgroup is None or not report.cgroup.stat:
        return None
    count = len(report.cgroup.stat)
    report.cgroup.stat = {}
    return f"cgroup.stat: dropped the remaining {count} keys (breakdown kept)"


def _drop_evidence(report: FailureReport) -> str | None:
    if not any(f.evidence for f in report.findings):
        return None
    for finding in report.findings:
        finding.evidence = {}
    return "findings: dropped evidence numbers"


def _drop_actions(report: FailureReport) -> str | None:
    if not any(f.action for f in report.findings):
        return None
    for finding in report.findings:
        finding.action = ""
    return "findings: dropped actions"
