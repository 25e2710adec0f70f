"""Forked processes: memory they own through copy-on-write, and RSS that counts shared pages twice.

A fork shares all its parent's pages until either side writes. A worker forked
from a grown trainer starts "free" but owns a page for every page either process
rewrites. The cgroup's anon counts each physical page once, while each process's
RSS counts every page it maps, so:

- cgroup anon − the largest process's anon = memory only the *other* processes hold;
- Σ per-process anon − cgroup anon = pages counted more than once (shared by forks).
"""

from __future__ import annotations

from dataclasses import dataclass

from podmortem.diagnosis.facts import RecordFacts
from podmortem.reports.findings import Finding, Severity
from podmortem.reports.oom_record import OomKillRecord, OomTask
from podmortem.reports.units import MIB, human_bytes

#: Memory only the others hold must be at least this share of the cgroup's anon to be reported...
FORK_COPIES_MIN_SHARE = 0.10
#: ...and at least this many bytes (small sidecars and shells are not worth a finding).
FORK_COPIES_MIN_BYTES = 8 * MIB
#: Per-process sums must exceed the cgroup's anon by this factor and this many bytes.
DOUBLE_COUNT_MIN_RATIO = 1.10
DOUBLE_COUNT_MIN_BYTES = 8 * MIB
#: Process names of the Python/PyTorch family: a DataLoader worker of a ``python`` trainer is its fork.
_PYTHON_FAMILY = ("python", "pt_main_thread", "pt_data_worker", "pt_autograd", "torchrun")
#: Same total_vm within this fraction suggests a fork that has not exec'd.
_TOTAL_VM_TOLERANCE = 0.25
_WORDS = {"anon": "anonymous", "rss": "resident"}


@dataclass(frozen=True, slots=True)
class ForkView:
    """The fork arithmetic for one record, shared by both rules and the task table's marks."""

    #: Compared quantity: "anon" (new tables print rss_anon) or "rss" (old tables print rss only).
    measure: str
    cgroup_bytes: int
    largest: OomTask
    largest_bytes: int
    family: list[OomTask]
    family_bytes: int
    others_only_bytes: int
    per_process_sum_bytes: int

    @property
    def double_counted_bytes(self) -> int:
        return max(0, self.per_process_sum_bytes - self.cgroup_bytes)

    @property
    def parent(self) -> OomTask:
        """The likely parent: the lowest pid of the family (pids grow with fork order)."""
        return min([self.largest, *self.family], key=lambda t: t.pid)


def _family_key(name: str) -> str:
    lowered = name.lower()
    for stem in _PYTHON_FAMILY:
        if lowered.startswith(stem):
            return "python"
    return lowered


def _same_family(a: OomTask, b: OomTask) -> bool:
    if _family_key(a.name) == _family_key(b.name):
        return True
    if a.total_vm_pages and b.total_vm_pages:
        return abs(a.total_vm_pages - b.total_vm_pages) <= _TOTAL_VM_TOLERANCE * a.total_vm_pages
    return False


def fork_view(record: OomKillRecord, facts: RecordFacts) -> ForkView | None:
    """None when the record lacks the numbers (no cgroup stats, no task rows)."""
    breakdown = facts.breakdown
    if breakdown is None or breakdown.anon_bytes is None or len(record.tasks) < 2:
        return None
    if facts.stat_block is None:
        return None  # a stand-in from the victim's own rss cannot split owners
    new_table = all(t.rss_anon_pages is not None for t in record.tasks)
    page = facts.page_size
    if new_table:
        measure = "anon"
        sizes = {t.pid: (t.rss_anon_pages or 0) * page for t in record.tasks}
        cgroup_bytes = breakdown.anon_bytes
    else:
        measure = "rss"
        sizes = {t.pid: (t.rss_pages or 0) * page for t in record.tasks}
        block = facts.stat_block
        mapped = 0
        if block is not None:
            mapped = block.stat.get(
                "total_mapped_file", block.stat.get("mapped_file", block.stat.get("file_mapped", 0))
            )
        cgroup_bytes = breakdown.anon_bytes + mapped + (breakdown.shmem_bytes or 0)
    largest = max(record.tasks, key=lambda t: sizes[t.pid])
    family = [t for t in record.tasks if t.pid != largest.pid and _same_family(largest, t)]
    return ForkView(
        measure=measure,
        cgroup_bytes=cgroup_bytes,
        largest=largest,
        largest_bytes=sizes[largest.pid],
        family=family,
        family_bytes=sum(sizes[t.pid] for t in family),
        others_only_bytes=max(0, cgroup_bytes - sizes[largest.pid]),
        per_process_sum_bytes=sum(sizes.values()),
    )


def _shares_pages(view: ForkView) -> bool:
    """The processes map pages more than once: the evidence that some were forked without exec."""
    return (
        view.double_counted_bytes >= DOUBLE_COUNT_MIN_BYTES
        and view.per_process_sum_bytes >= DOUBLE_COUNT_MIN_RATIO * view.cgroup_bytes
    )


def fork_copies(view: ForkView | None) -> Finding | None:
    """Processes forked from a grown parent, still sharing its pages, hold memory of their own.

    Made only on the record's evidence: same-program processes that own memory (the cgroup holds
    more than the largest one maps) *and* still share pages (the processes' sum exceeds the
    cgroup). Without shared pages, workers that allocated their own memory (``stress --vm``) are
    no fork copies. Even with them, what a fork owns may be copy-on-write copies or its own
    allocations: the message says so rather than guess.
    """
    if view is None or not view.family or not _shares_pages(view):
        return None
    owned = min(view.others_only_bytes, view.family_bytes)
    if owned < FORK_COPIES_MIN_BYTES or owned < FORK_COPIES_MIN_SHARE * view.cgroup_bytes:
        return None
    parent = view.parent
    forks = [t for t in [view.largest, *view.family] if t.pid != parent.pid]
    shared = view.double_counted_bytes
    return Finding(
        code="fork-copies",
        severity=Severity.WARNING,
        message=(
            f"{len(forks)} process(es) forked from {parent.name} (pid {parent.pid}) still share "
            f"{human_bytes(shared)} of its pages (their {_WORDS[view.measure]} memory counts them again), "
            f"so they were forked after it had grown, and hold {human_bytes(owned)} of memory of their own "
            f"on top of the largest process's {human_bytes(view.largest_bytes)}: copy-on-write copies of "
            "pages rewritten since the fork, or memory they allocated themselves (the record does not "
            "tell which)."
        ),
        evidence={
            "cgroup_bytes": view.cgroup_bytes,
            "measure": view.measure,
            "largest_pid": view.largest.pid,
            "largest_bytes": view.largest_bytes,
            "others_only_bytes": view.others_only_bytes,
            "fork_owned_bytes": owned,
            "shared_bytes": shared,
            "per_process_sum_bytes": view.per_process_sum_bytes,
            "parent_pid": parent.pid,
            "fork_pids": sorted(t.pid for t in forks),
        },
        action=(
            "Fork workers before the parent grows, or start them with the 'forkserver' or 'spawn' "
            "context; keep DataLoader workers alive across evaluations (persistent_workers=True) "
            "instead of forking new ones from a grown process each time."
        ),
    )


def shared_pages_double_counted(view: ForkView | None) -> Finding | None:
    """The per-process sum clearly exceeds the cgroup's memory: RSS counts shared fork pages per process."""
    if view is None:
        return None
    extra = view.double_counted_bytes
    if not _shares_pages(view):
        return None
    return Finding(
        code="shared-pages-double-counted",
        severity=Severity.INFO,
        message=(
            f"Adding up the processes' {_WORDS[view.measure]} memory gives "
            f"{human_bytes(view.per_process_sum_bytes)}, "
            f"{human_bytes(extra)} more than the cgroup holds: forked processes share pages with "
            f"their parent and each one's RSS counts them again."
        ),
        evidence={
            "per_process_sum_bytes": view.per_process_sum_bytes,
            "cgroup_bytes": view.cgroup_bytes,
            "double_counted_bytes": extra,
            "measure": view.measure,
        },
        action=(
            "Judge memory by the cgroup (memory.stat anon) or by per-process PSS "
            "(/proc/PID/smaps_rollup), never by summing RSS."
        ),
    )
