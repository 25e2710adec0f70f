"""Numbers the rules share, read off a record once: limit, usage, page size, the memory split.

Old v1 kernels print each child cgroup's *local* stats, so the limit's total is
their sum; newer v1 prints ``total_*`` keys and v2 is hierarchical already. When
the record has no stat block at all (grep-filtered posts), the killed process's
own RSS stands in, but only when it accounts for most of the limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from podmortem.reports.memory import CgroupMemoryStat, MemoryBreakdown, breakdown_mem_info, breakdown_v1
from podmortem.reports.oom_record import OomKillRecord, OomTask
from podmortem.reports.units import DEFAULT_PAGE_SIZE, KIB

#: cgroup v1 prints "no limit" as this many kB (PAGE_COUNTER_MAX pages); anything this large is no limit.
UNLIMITED_KB = 2**50
#: Page sizes a kernel may use, in kB, for inferring the task table's unit.
_PAGE_SIZES_KB = (4, 8, 16, 64)
#: The killed process must hold at least this share of the limit to stand in for missing cgroup stats.
VICTIM_STAND_IN_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class RecordFacts:
    """What the rules read, computed once per record."""

    limit_bytes: int | None
    usage_bytes: int | None
    failcnt: int | None
    kmem_bytes: int | None
    page_size: int
    stat_block: CgroupMemoryStat | None
    breakdown: MemoryBreakdown | None
    #: The breakdown is the whole node's (show_mem of a global OOM), not a cgroup's.
    node_wide: bool = False

    def task_anon_bytes(self, task: OomTask) -> int | None:
        """The task's anon pages in bytes (new tables); None on old tables, which print rss only."""
        return task.rss_anon_pages * self.page_size if task.rss_anon_pages is not None else None

    def task_rss_bytes(self, task: OomTask) -> int | None:
        return task.rss_pages * self.page_size if task.rss_pages is not None else None


def _counter_bytes(record: OomKillRecord, name: str, attr: str) -> int | None:
    counter = record.counters.get(name)
    if counter is None:
        return None
    value: int = getattr(counter, attr)
    return None if value >= UNLIMITED_KB else value * KIB


def infer_page_size(record: OomKillRecord) -> int:
    """Bytes per task-table page, from the killed process's kB line against its row; 4096 otherwise."""
    victim = record.victim
    if victim is None:
        return DEFAULT_PAGE_SIZE
    row = next((t for t in record.tasks if t.pid == victim.pid), None)
    if row is None:
        return DEFAULT_PAGE_SIZE
    if row.rss_anon_pages and victim.anon_rss_kb:
        ratio = victim.anon_rss_kb / row.rss_anon_pages
    elif row.rss_pages and victim.anon_rss_kb is not None:
        total_kb = (victim.anon_rss_kb or 0) + (victim.file_rss_kb or 0) + (victim.shmem_rss_kb or 0)
        ratio = total_kb / row.rss_pages
    else:
        return DEFAULT_PAGE_SIZE
    for size in _PAGE_SIZES_KB:
        if abs(ratio - size) <= 0.1 * size:
            return size * KIB
    return DEFAULT_PAGE_SIZE


def _limit_block(record: OomKillRecord) -> CgroupMemoryStat | None:
    """The stat block printed for the cgroup whose limit was hit, else the first with keys."""
    oom = record.oom_memcg
    with_keys = [b for b in record.cgroup_stats if b.stat]
    for block in with_keys:
        if oom is not None and block.path == oom:
            return block
    return with_keys[0] if with_keys else None


def _sum_local_v1(record: OomKillRecord, top: CgroupMemoryStat, kmem: int | None) -> MemoryBreakdown:
    """Old v1 kernels print local numbers per cgroup; the limit's total is the sum over its subtree."""
    root = top.path or ""
    blocks = [
        b
        for b in record.cgroup_stats
        if b.stat and b.path is not None and (b.path == root or b.path.startswith(root.rstrip("/") + "/"))
    ] or [top]
    summed: dict[str, int] = {}
    for block in blocks:
        for key, value in block.stat.items():
            summed[key] = summed.get(key, 0) + value
    # rss and cache are there (0) even when no block printed them: the limit's total is their sum
    summed.setdefault("rss", 0)
    summed.setdefault("cache", 0)
    return breakdown_v1(summed, kmem_bytes=kmem, source=f"sum of {len(blocks)} v1 local stat block(s)")


def _victim_stand_in(record: OomKillRecord, limit: int | None, kmem: int | None) -> MemoryBreakdown | None:
    victim = record.victim
    if victim is None or limit is None or victim.anon_rss_kb is None:
        return None
    anon = victim.anon_rss_kb * KIB
    file = (victim.file_rss_kb or 0) * KIB
    shmem = (victim.shmem_rss_kb or 0) * KIB
    if anon + file + shmem < VICTIM_STAND_IN_SHARE * limit:
        return None
    return MemoryBreakdown(
        anon_bytes=anon,
        file_bytes=file,
        shmem_bytes=shmem,
        kernel_bytes=kmem,
        source="the killed process's rss (the record has no cgroup stats)",
    )


def record_facts(record: OomKillRecord) -> RecordFacts:
    limit = _counter_bytes(record, "memory", "limit_kb")
    usage = _counter_bytes(record, "memory", "usage_kb")
    counter = record.counters.get("memory")
    kmem = _counter_bytes(record, "kmem", "usage_kb")
    block = _limit_block(record)
    breakdown: MemoryBreakdown | None
    page_size = infer_page_size(record)
    node_wide = (block is None and bool(record.mem_info)
                 and record.global_evidence and not record.memcg_evidence)
    if node_wide:
        breakdown = breakdown_mem_info(record.mem_info, page_size=page_size)
    elif block is None:
        breakdown = _victim_stand_in(record, limit, kmem)
    elif block.version == 1 and not block.hierarchical:
        breakdown = _sum_local_v1(record, block, kmem)
    else:
        breakdown = block.breakdown(kmem_bytes=kmem)
    return RecordFacts(
        limit_bytes=limit,
        usage_bytes=usage,
        failcnt=counter.failcnt if counter else None,
        kmem_bytes=kmem,
        page_size=page_size,
        stat_block=block,
        breakdown=breakdown,
        node_wide=node_wide and breakdown is not None,
    )
