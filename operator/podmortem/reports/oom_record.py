"""What one kernel OOM-kill record says, field by field, as the kernel printed it.

The parser (``podmortem.kernel.oom_parser``) fills this from text; the diagnosis
reads it. Values keep the kernel's units (kB, pages) where the kernel chose them,
and anything derived, like the effective constraint, is a property that says
whether it was printed or inferred.
"""

from __future__ import annotations

import itertools
from typing import Literal

from pydantic import BaseModel, Field

from podmortem.reports.memory import CgroupMemoryStat
from podmortem.reports.memory_classes import CgroupVersion

CONSTRAINT_MEMCG = "CONSTRAINT_MEMCG"
CONSTRAINT_NONE = "CONSTRAINT_NONE"
#: mm/oom_kill.c's enum oom_constraint (2.6.35+). A patched kernel may print its own (a BPF OOM
#: handler's "CONSTRAINT_BPF_PSI_MEM"): then the other lines of the record say whose memory it was.
KNOWN_CONSTRAINTS = frozenset(
    {CONSTRAINT_NONE, "CONSTRAINT_CPUSET", "CONSTRAINT_MEMORY_POLICY", CONSTRAINT_MEMCG}
)

#: How the text around the kernel message looked.
LineFormat = Literal["kmsg", "dmesg", "dmesg-T", "iso", "syslog", "plain"]


class MemoryCounter(BaseModel):
    """A ``memory:``/``memory+swap:``/``kmem:``/``swap:`` line: usage, limit and failcnt, in kB."""

    usage_kb: int
    limit_kb: int
    failcnt: int


class OomTask(BaseModel):
    """One row of the task table. Memory values are in pages, as printed; None when the column is absent.

    Old kernels print ``rss`` only (anon+file+shmem together); since 5.x a row also
    has ``rss_anon``, ``rss_file`` and ``rss_shmem``.
    """

    pid: int
    name: str
    uid: int | None = None
    tgid: int | None = None
    total_vm_pages: int | None = None
    rss_pages: int | None = None
    rss_anon_pages: int | None = None
    rss_file_pages: int | None = None
    rss_shmem_pages: int | None = None
    pgtables_bytes: int | None = None
    #: Pre-4.15 tables print page-table pages (nr_ptes) instead of pgtables_bytes.
    nr_ptes: int | None = None
    swapents_pages: int | None = None
    oom_score_adj: int | None = None


class KilledProcess(BaseModel):
    """A ``Killed process PID (comm) total-vm:…kB, anon-rss:…kB, …`` line; sizes in kB."""

    pid: int
    comm: str
    total_vm_kb: int | None = None
    anon_rss_kb: int | None = None
    file_rss_kb: int | None = None
    shmem_rss_kb: int | None = None
    uid: int | None = None
    pgtables_kb: int | None = None
    oom_score_adj: int | None = None


class ReapedProcess(BaseModel):
    """An ``oom_reaper: reaped process …, now anon-rss:…kB, …`` line: what was left after the reap."""

    pid: int
    comm: str
    anon_rss_kb: int | None = None
    file_rss_kb: int | None = None
    shmem_rss_kb: int | None = None


class OomKillLine(BaseModel):
    """The one-line summary ``oom-kill:constraint=…,oom_memcg=…,task_memcg=…,task=…,pid=…,uid=…`` (4.19+)."""

    #: As printed; "" when a vendor kernel printed ``oom-kill:,cpuset=…`` with the field empty.
    constraint: str = ""
    nodemask: str | None = None
    cpuset: str | None = None
    mems_allowed: str | None = None
    oom_memcg: str | None = None
    task_memcg: str | None = None
    task: str | None = None
    pid: int | None = None
    uid: int | None = None
    global_oom: bool = False


class ChosenVictim(BaseModel):
    """Old kernels' ``… out of memory: Kill process PID (comm) score N or sacrifice child``."""

    pid: int
    comm: str
    score: int | None = None


class OomKillRecord(BaseModel):
    """One OOM kill, as reconstructed from a kernel log. See ``missing`` for what the text lacked."""

    # -- where the text came from -------------------------------------------------------------
    line_format: LineFormat = "plain"
    #: The syslog/journal host name, where the lines carried one.
    host: str | None = None
    #: Kernel monotonic seconds of the record's first line ([   2993.661240] or kmsg usec).
    monotonic_s: float | None = None
    #: A human timestamp exactly as printed (dmesg -T, syslog, ISO). dmesg -T drifts: trust monotonic_s.
    time_text: str | None = None
    #: /dev/kmsg sequence number of the record's first line.
    kmsg_seq: int | None = None
    #: Where the record came from when it is not this node's kernel log, in words (``podmortem demo``
    #: replays a recorded one: "RECORDED, not from this run: ..."); None for a record the agent read.
    #: The report carries it as ``record_source`` and puts it in front of its headline.
    source: str | None = None

    # -- the header: who asked for memory -------------------------------------------------------
    trigger_comm: str | None = None
    trigger_pid: int | None = None
    gfp_mask: str | None = None
    order: int | None = None
    trigger_oom_score_adj: int | None = None
    #: The header's ``oom_adj=``, which kernels up to 3.6 printed (before oom_score_adj took over).
    trigger_oom_adj: int | None = None
    kernel_version: str | None = None
    #: Old kernels print ``comm cpuset=… mems_allowed=…`` on its own line.
    cpuset: str | None = None

    # -- the memory cgroup ----------------------------------------------------------------------
    #: ``memory``, ``memory+swap``, ``kmem`` (v1) or ``swap`` (v2) usage/limit/failcnt lines.
    counters: dict[str, MemoryCounter] = Field(default_factory=dict)
    #: Every ``Memory cgroup stats for PATH`` block, in order (v1 old kernels print one per child).
    cgroup_stats: list[CgroupMemoryStat] = Field(default_factory=list)
    #: Old kernels' ``Task in TASK_MEMCG killed as a result of limit of OOM_MEMCG``.
    task_in_memcg: str | None = None
    limit_of_memcg: str | None = None

    # -- the task table -------------------------------------------------------------------------
    task_table_format: Literal["old", "new"] | None = None
    #: Column names from the header, as printed after ``[ pid ]`` (e.g. uid tgid total_vm rss … name).
    task_columns: list[str] = Field(default_factory=list)
    tasks: list[OomTask] = Field(default_factory=list)

    # -- the decision and the kill --------------------------------------------------------------
    oom_kill: OomKillLine | None = None
    chosen: ChosenVictim | None = None
    #: ``Memory cgroup out of memory`` → "memcg"; ``Out of memory`` → "global".
    scope: Literal["memcg", "global"] | None = None
    #: Killed processes, one per pid (memory.oom.group kills repeat lines; they are deduplicated).
    killed: list[KilledProcess] = Field(default_factory=list)
    #: ``Tasks in PATH are going to be killed due to memory.oom.group set``.
    oom_group_memcg: str | None = None
    reaped: list[ReapedProcess] = Field(default_factory=list)
    #: ``Out of memory and no killable processes...``: the kernel found nothing it could kill.
    no_killable: bool = False
    #: The call trace went through the memory cgroup OOM path (``mem_cgroup_out_of_memory``,
    #: ``mem_cgroup_oom_synchronize``): a memcg OOM even when no other line says so.
    trace_memcg: bool = False
    #: The call trace went through the page allocator's way to the OOM killer
    #: (``__alloc_pages_slowpath`` -> ``__alloc_pages_may_oom`` -> ``out_of_memory``): the node ran out,
    #: when no memory cgroup frame or line says otherwise.
    trace_page_alloc: bool = False
    #: ``Mem-Info:`` (show_mem) was printed: the kernel prints it only for OOMs outside a memory cgroup.
    show_mem: bool = False
    #: The node-wide counters of show_mem's summary after ``Mem-Info:`` (``active_anon:``,
    #: ``inactive_file:``, ``slab_unreclaimable:``, ``shmem:``, ``free:``…), in pages, as printed,
    #: and its ``%lu pages RAM`` / ``%lu pages reserved`` as ``pages_ram`` / ``pages_reserved``.
    mem_info: dict[str, int] = Field(default_factory=dict)

    # -- completeness ---------------------------------------------------------------------------
    #: What the text did not have: "header", "kill", "cgroup-stats", "task-rows", "elided",
    #: "truncated-line", "kmsg-gap". Empty for a complete record.
    missing: list[str] = Field(default_factory=list)
    lines: int = 0

    @property
    def partial(self) -> bool:
        return bool(self.missing)

    # -- derived, each says whether it was printed or inferred ----------------------------------

    @property
    def constraint_printed(self) -> str | None:
        """The constraint exactly as printed; None when the record has no ``oom-kill:`` line."""
        return self.oom_kill.constraint if self.oom_kill is not None else None

    @property
    def memcg_evidence(self) -> bool:
        """The record itself says a memory cgroup limit was hit, whatever the constraint field says.

        Besides the words, dump_header prints the memcg counters and ``Memory cgroup stats`` only for
        memcg OOMs (3.x to 6.x), and the memcg OOM path shows in the call trace.
        """
        if self.scope == "memcg" or self.limit_of_memcg is not None or self.oom_group_memcg is not None:
            return True
        line = self.oom_kill
        if line is not None:
            return not line.global_oom and line.oom_memcg is not None
        if self.scope == "global" or self.show_mem:
            return False
        return bool(self.counters) or any(b.stat for b in self.cgroup_stats) or self.trace_memcg

    @property
    def global_evidence(self) -> bool:
        line = self.oom_kill
        return self.scope == "global" or self.show_mem or (line is not None and line.global_oom) or (
            self.trace_page_alloc and not self.trace_memcg)

    @property
    def constraint_effective(self) -> str | None:
        """The constraint that applied. Pre-5.2 kernels print CONSTRAINT_NONE for memcg kills."""
        printed = self.constraint_printed
        if printed in KNOWN_CONSTRAINTS and printed != CONSTRAINT_NONE:
            return printed
        if self.memcg_evidence:
            return CONSTRAINT_MEMCG
        if printed == CONSTRAINT_NONE or self.global_evidence:
            return CONSTRAINT_NONE
        return printed or None

    @property
    def constraint_inferred(self) -> bool:
        effective = self.constraint_effective
        return effective is not None and effective != self.constraint_printed

    @property
    def constraint_note(self) -> str | None:
        """Why the effective constraint differs from the printed one, in one sentence."""
        if not self.constraint_inferred:
            return None
        printed = self.constraint_printed
        said = (
            "no oom-kill: line"
            if printed is None
            else "an empty constraint field"
            if printed == ""
            else f"{printed}"
            if printed in KNOWN_CONSTRAINTS
            else f"{printed}, a constraint mainline kernels do not have"
        )
        why = (
            "'Memory cgroup out of memory'"
            if self.scope == "memcg"
            else "'killed as a result of limit of'"
            if self.limit_of_memcg
            else "oom_memcg in the oom-kill line"
            if self.oom_kill is not None and self.memcg_evidence
            else "the memory cgroup's usage lines, which the kernel prints only for memcg OOMs"
            if self.memcg_evidence and (self.counters or self.cgroup_stats)
            else "the memory cgroup OOM path in the call trace"
            if self.memcg_evidence
            else "'Mem-Info', which the kernel prints only for OOMs outside a memory cgroup"
            if self.show_mem and self.scope is None
            else "the page allocator's way to the OOM killer in the call trace (__alloc_pages_slowpath, "
            "no memory cgroup frame)"
            if self.trace_page_alloc and self.scope is None
            else "'Out of memory' (a node-wide kill)"
        )
        return f"inferred {self.constraint_effective} from {why}; the kernel printed {said}"

    @property
    def oom_memcg(self) -> str | None:
        """The cgroup whose limit was hit (None for a global OOM)."""
        if self.oom_kill is not None and self.oom_kill.oom_memcg is not None:
            return self.oom_kill.oom_memcg
        if self.limit_of_memcg is not None:
            return self.limit_of_memcg
        if self.memcg_evidence and self.cgroup_stats:
            # The first block is the limited cgroup's when the counters printed just before it are in the
            # text, or on cgroup v2, which prints that one cgroup only; else the head may be cut.
            first = self.cgroup_stats[0]
            if self.counters or first.version == 2:
                return first.path
        return None

    @property
    def task_memcg(self) -> str | None:
        if self.oom_kill is not None and self.oom_kill.task_memcg is not None:
            return self.oom_kill.task_memcg
        return self.task_in_memcg

    @property
    def victim(self) -> KilledProcess | None:
        return self.killed[0] if self.killed else None

    @property
    def victim_pid(self) -> int | None:
        """The killed pid: the ``Killed process`` line's (a tgid) over the oom-kill line's (maybe a tid).

        Else the reaper's (raw /dev/kmsg readers may keep only that line). Never the ``Kill process …
        or sacrifice child`` choice: the kernel may kill a child instead, so without the Killed line
        the victim is unknown.
        """
        if self.killed:
            return self.killed[0].pid
        if self.oom_kill is not None and self.oom_kill.pid is not None:
            return self.oom_kill.pid
        return self.reaped[0].pid if self.reaped else None

    @property
    def victim_comm(self) -> str | None:
        if self.killed:
            return self.killed[0].comm
        if self.oom_kill is not None and self.oom_kill.task is not None:
            return self.oom_kill.task
        return self.reaped[0].comm if self.reaped else None

    @property
    def cgroup_version(self) -> CgroupVersion | None:
        """v2 prints ``swap:``, v1 ``memory+swap:``/``kmem:``; else the stat keys tell.

        memory.oom.group exists only in cgroup v2, so a group kill says v2 too.
        """
        if "swap" in self.counters or self.oom_group_memcg is not None:
            return 2
        if "memory+swap" in self.counters or "kmem" in self.counters:
            return 1
        for block in self.cgroup_stats:
            if block.version is not None:
                return block.version
        if self.task_in_memcg is not None and (self.before_cgroup2 or "kubepods" in self.task_in_memcg):
            # A memcg OOM on a kernel without cgroup2's memory controller; or the "Task in" line
            # (up to 4.18) under the kubelet, whose cgroup v2 support needs a 5.8+ kernel.
            return 1
        return None

    @property
    def before_cgroup2(self) -> bool:
        """The record was printed by a kernel older than 4.5, which had no cgroup2 memory controller.

        Told by the version where printed, else by the header: ``oom_adj=`` (up to 3.6), or a
        ``gfp_mask`` without the flag names that 4.5 began to print (``0xd0``, not ``0xd0(GFP_KERNEL)``).
        """
        version = _major_minor(self.kernel_version)
        if version is not None:
            return version < (4, 5)
        if self.trigger_oom_adj is not None:
            return True
        return self.gfp_mask is not None and self.order is not None and "(" not in self.gfp_mask

    def stat_for(self, path: str | None) -> CgroupMemoryStat | None:
        """The stat block printed for ``path`` (exact match), if any."""
        for block in self.cgroup_stats:
            if block.path == path:
                return block
        return None


def _major_minor(version: str | None) -> tuple[int, int] | None:
    if version is None:
        return None
    parts = version.split(".")
    if len(parts) < 2 or not parts[0].isdigit():
        return None
    minor = "".join(itertools.takewhile(str.isdigit, parts[1]))
    return (int(parts[0]), int(minor)) if minor else None
