"""Facts about the killed process and the table around it that change how the kill should be read."""

from __future__ import annotations

from podmortem.diagnosis.facts import RecordFacts
from podmortem.reports.findings import Finding, Severity
from podmortem.reports.oom_record import OomKillRecord
from podmortem.reports.units import MIB, human_bytes

#: Container-runtime helpers: killing one fails an exec or a probe, not the workload.
RUNTIME_PROCESSES = (
    "runc",
    "runc:[1:CHILD]",
    "runc:[2:INIT]",
    "crun",
    "conmon",
    "pause",
    "containerd-shim",
    "containerd-shim-runc-v2",
    "dockerinit",
)
#: The victim counts as "not the largest" when its rss is below this share of the largest's.
NOT_LARGEST_SHARE = 0.9
PAGE_TABLES_MIN_SHARE = 0.05
PAGE_TABLES_MIN_BYTES = 64 * MIB
SWAP_MIN_BYTES = 64 * MIB


def victim_not_largest(record: OomKillRecord, facts: RecordFacts) -> Finding | None:
    """The kernel picked a process other than the biggest one (oom_score_adj tipped the choice)."""
    pid = record.victim_pid
    rows = [t for t in record.tasks if t.rss_pages is not None]
    victim = next((t for t in rows if t.pid == pid), None)
    if victim is None or len(rows) < 2:
        return None
    largest = max(rows, key=lambda t: t.rss_pages or 0)
    if largest.pid == victim.pid or (victim.rss_pages or 0) >= NOT_LARGEST_SHARE * (largest.rss_pages or 0):
        return None
    return Finding(
        code="victim-not-largest",
        severity=Severity.INFO,
        message=(
            f"The kernel killed {victim.name} (pid {victim.pid}, "
            f"rss {human_bytes(facts.task_rss_bytes(victim))}) "
            f"rather than the largest process, {largest.name} (pid {largest.pid}, rss "
            f"{human_bytes(facts.task_rss_bytes(largest))}); oom_score_adj and swap weigh in the choice."
        ),
        evidence={
            "victim_pid": victim.pid,
            "victim_rss_pages": victim.rss_pages,
            "victim_oom_score_adj": victim.oom_score_adj,
            "largest_pid": largest.pid,
            "largest_rss_pages": largest.rss_pages,
            "largest_oom_score_adj": largest.oom_score_adj,
        },
        action="Read the findings about the largest process: the memory that filled the limit may be there.",
    )


def runtime_process_killed(record: OomKillRecord) -> Finding | None:
    """The victim is container-runtime plumbing (an exec probe, ``kubectl exec``), not the workload."""
    comm = record.victim_comm
    if comm is None or comm not in RUNTIME_PROCESSES:
        return None
    return Finding(
        code="runtime-process-killed",
        severity=Severity.WARNING,
        message=(
            f"The kernel killed {comm}, a container-runtime helper (typically an exec probe or "
            f"kubectl exec starting), so the workload that filled the cgroup may still be running."
        ),
        evidence={"victim_comm": comm, "victim_pid": record.victim_pid},
        action="Look at what holds the cgroup's memory (the category finding), not at the killed helper.",
    )


def page_tables(record: OomKillRecord, facts: RecordFacts) -> Finding | None:
    """Page tables alone take a noticeable share: huge sparse mappings or very many processes."""
    total = sum(t.pgtables_bytes or 0 for t in record.tasks)
    base = facts.limit_bytes or facts.usage_bytes
    if base is None or total < PAGE_TABLES_MIN_BYTES or total < PAGE_TABLES_MIN_SHARE * base:
        return None
    return Finding(
        code="page-tables-large",
        severity=Severity.INFO,
        message=(
            f"The processes' page tables alone take {human_bytes(total)} ({total / base:.0%} of the limit)."
        ),
        evidence={"pgtables_bytes": total, "limit_bytes": base},
        action="Use fewer processes with the same huge mappings, or huge pages for very large heaps.",
    )


def swapped_out(record: OomKillRecord, facts: RecordFacts) -> Finding | None:
    """Processes had memory swapped out: the pod was already short of memory before the kill."""
    pages = sum(t.swapents_pages or 0 for t in record.tasks)
    swapped = pages * facts.page_size
    if swapped < SWAP_MIN_BYTES:
        return None
    return Finding(
        code="swapped-out",
        severity=Severity.INFO,
        message=(
            f"The processes had {human_bytes(swapped)} swapped out when the kill came: memory "
            f"pressure was building up well before it."
        ),
        evidence={"swapents_pages": pages, "swapped_bytes": swapped},
        action="Treat heavy swapping as the early warning: alert on it before the limit is reached.",
    )


def oom_group(record: OomKillRecord) -> Finding | None:
    """memory.oom.group: the kernel killed every process in the cgroup, not just one."""
    if record.oom_group_memcg is None:
        return None
    return Finding(
        code="oom-group-kill",
        severity=Severity.INFO,
        message=(
            f"memory.oom.group is set on {record.oom_group_memcg}, so the kernel killed all its "
            f"processes together ({len(record.killed)} killed line(s) after deduplication)."
        ),
        evidence={"oom_group_memcg": record.oom_group_memcg, "killed_pids": [k.pid for k in record.killed]},
        action="Expect the whole container to restart on every OOM kill (kubelet sets this on cgroup v2).",
    )


#: The victim frees "little" when everything it maps is below this share of the cgroup's shared memory.
FREES_LITTLE_SHARE = 0.25


def kill_frees_little(record: OomKillRecord, facts: RecordFacts) -> Finding | None:
    """Shared memory filled the cgroup and the victim maps little of it: the kill frees almost nothing.

    tmpfs and /dev/shm pages stay charged to the cgroup after the process that wrote them dies,
    until the files are removed, so the cgroup stays at its limit and the next allocation kills again.
    """
    victim = record.victim
    breakdown = facts.breakdown
    if victim is None or victim.anon_rss_kb is None or breakdown is None:
        return None
    shares = breakdown.categories()
    total = breakdown.total_bytes()
    shmem = shares.get("shmem", 0)
    if total <= 0 or shmem < 0.5 * total:
        return None
    frees = (victim.anon_rss_kb + (victim.file_rss_kb or 0) + (victim.shmem_rss_kb or 0)) * 1024
    if frees >= FREES_LITTLE_SHARE * shmem:
        return None
    return Finding(
        code="kill-frees-little",
        severity=Severity.WARNING,
        message=(
            f"Killing {victim.comm} (pid {victim.pid}) frees at most {human_bytes(frees)}, while "
            f"{human_bytes(shmem)} of the cgroup's {human_bytes(total)} is shared memory (tmpfs, /dev/shm) "
            "that stays charged until its files are removed: the cgroup stays at its limit and more kills "
            "can follow."
        ),
        evidence={"victim_rss_bytes": frees, "shmem_bytes": shmem, "cgroup_bytes": total},
        action=(
            "Remove what fills /dev/shm or the memory-backed emptyDir (stale DataLoader or IPC files), or "
            "give it a sizeLimit; killing processes does not free it."
        ),
    )
