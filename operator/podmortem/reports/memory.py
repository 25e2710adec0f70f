"""Cgroup and process memory as evidence: one model for v1 and v2 ``memory.stat``, and per-process use.

The kernel prints ``memory.stat`` inside OOM records, and the node agent reads the
same file from live cgroups. Both end up here with the kernel's original keys, so
nothing is lost in translation; the derived numbers the diagnosis needs (the categories
anon, shmem, kernel, sock, file, hugetlb, and their parts such as slab or dirty page cache)
are computed from whichever keys the version has, each charged byte counted once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from podmortem.reports import memory_classes
from podmortem.reports.memory_classes import CgroupVersion

#: A category or class dominates when it holds at least this share of the cgroup's memory.
DOMINANT_SHARE = 0.5

#: The coarse categories, in the order they are listed. Together they are the memory charged to the
#: cgroup, each byte once: v2 ``anon`` + ``file`` (which holds ``shmem``) + ``kernel`` + ``sock`` (+
#: ``hugetlb`` where memory_hugetlb_accounting prints it); v1 ``rss`` + ``cache`` (holds ``shmem``) +
#: the ``kmem:`` line (v1 charges socket buffers to a counter of their own, tcpmem, not to memory).
CATEGORY_ORDER = ("anon", "shmem", "kernel", "sock", "file", "hugetlb")

#: Finer classes with a cure of their own → the category each is part of. ``file_dirty`` is
#: dirty page cache plus page cache under writeback (v1 ``dirty`` + ``writeback``).
CLASS_PARENT: dict[str, str] = {
    "slab": "kernel",
    "pagetables": "kernel",
    "percpu": "kernel",
    "kernel_stack": "kernel",
    "zswap": "kernel",
    "file_dirty": "file",
}


#: Breakdown fields written to JSON even when None (the ones its first version had).
_ALWAYS_DUMPED = frozenset({"anon_bytes", "file_bytes", "shmem_bytes", "kernel_bytes", "source"})


class MemoryBreakdown(BaseModel):
    """A cgroup's memory split into the categories the diagnosis reasons about, in bytes.

    The categories (``anon``, ``shmem``, ``kernel``, ``sock``, ``file``, ``hugetlb``) count each
    charged byte once. ``file_bytes`` excludes shmem (both v1 ``cache`` and v2 ``file`` include
    tmpfs and /dev/shm). The other fields are parts of one category, as the kernel prints them
    (``slab_bytes`` … ``zswap_bytes`` of kernel, ``file_*`` of file, ``anon_thp_bytes`` of anon), or
    memory beside the usage (``swap_bytes``, ``zswapped_bytes``) or across it (``swapcached_bytes``:
    swap cache pages, mapped ones also counted in anon). A field is None when the source does not say.
    """

    model_config = ConfigDict(frozen=True)

    anon_bytes: int | None = None
    file_bytes: int | None = None
    shmem_bytes: int | None = None
    kernel_bytes: int | None = None
    #: v2 socket buffers: charged to memory.current, not part of v2's ``kernel``.
    sock_bytes: int | None = None
    #: v2 hugetlb pages, printed (and charged) only with the memory_hugetlb_accounting mount option.
    hugetlb_bytes: int | None = None
    #: Parts of kernel memory (v2; v1's memory.stat has none of them).
    slab_bytes: int | None = None
    slab_reclaimable_bytes: int | None = None
    slab_unreclaimable_bytes: int | None = None
    kernel_stack_bytes: int | None = None
    pagetables_bytes: int | None = None
    sec_pagetables_bytes: int | None = None
    percpu_bytes: int | None = None
    vmalloc_bytes: int | None = None
    #: The compressed swap pool (v2, 5.19+), charged as kernel memory.
    zswap_bytes: int | None = None
    #: Parts of file memory: dirty, under writeback (v1 ``dirty``/``writeback``), mapped.
    file_dirty_bytes: int | None = None
    file_writeback_bytes: int | None = None
    file_mapped_bytes: int | None = None
    #: Part of anon: transparent huge pages (v1 ``rss_huge``).
    anon_thp_bytes: int | None = None
    #: Not charged memory, or counted across categories: the swap cache, the original size of what
    #: zswap holds, and v1's swap use (charged to memory+swap only).
    swapcached_bytes: int | None = None
    zswapped_bytes: int | None = None
    swap_bytes: int | None = None
    #: Memory in use that no category holds: on a whole node, RAM outside the LRU lists, slab and
    #: page tables (vmalloc, drivers, kernel stacks, huge pages). Counted in the total, so a category
    #: dominates only with half of all memory in use; never itself dominant.
    unattributed_bytes: int | None = None
    #: Where the numbers come from, in words: e.g. "memory.stat v2", "sum of v1 blocks", "victim rss".
    source: str = ""

    @model_serializer(mode="wrap")
    def _without_unknown_parts(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """JSON keeps the first four categories always (the contract) and the other fields where known:
        a report's size is budgeted in a TrainingJob's status."""
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if v is not None or k in _ALWAYS_DUMPED}

    def categories(self) -> dict[str, int]:
        """The known categories, name → bytes, in a stable order; together each charged byte once."""
        values = {
            "anon": self.anon_bytes,
            "shmem": self.shmem_bytes,
            "kernel": self.kernel_bytes,
            "sock": self.sock_bytes,
            "file": self.file_bytes,
            "hugetlb": self.hugetlb_bytes,
        }
        return {name: value for name in CATEGORY_ORDER if (value := values[name]) is not None}

    def total_bytes(self) -> int:
        return sum(self.categories().values()) + (self.unattributed_bytes or 0)

    def classes(self) -> dict[str, tuple[str, int]]:
        """The known finer classes with a cure of their own: name → (its category, bytes)."""
        found: dict[str, tuple[str, int]] = {}
        for name, parent in CLASS_PARENT.items():
            if name == "file_dirty":
                if self.file_dirty_bytes is None and self.file_writeback_bytes is None:
                    continue
                value = (self.file_dirty_bytes or 0) + (self.file_writeback_bytes or 0)
                # NR_WRITEBACK also counts anon pages being swapped out: never more than the file pages
                if self.file_bytes is not None:
                    value = min(value, self.file_bytes)
            else:
                part: int | None = getattr(self, f"{name}_bytes")
                if part is None:
                    continue
                value = part
            found[name] = (parent, value)
        return found

    def dominant(self) -> str | None:
        """The category holding at least half of the cgroup's memory; None when mixed or unknown."""
        total = self.total_bytes()
        if total <= 0:
            return None
        name, value = max(self.categories().items(), key=lambda kv: kv[1])
        return name if value >= DOMINANT_SHARE * total else None

    def dominant_class(self) -> str | None:
        """The finest class holding at least half of the memory (``slab``, ``sock``…), else the category."""
        category = self.dominant()
        if category is None:
            return None
        total = self.total_bytes()
        held = [
            (value, name)
            for name, (parent, value) in self.classes().items()
            if parent == category and value >= DOMINANT_SHARE * total
        ]
        return max(held)[1] if held else category


def breakdown_v2(stat: dict[str, int], *, source: str = "memory.stat v2") -> MemoryBreakdown:
    """Classes of a v2 memory.stat (`memory_classes.classes_v2`); see `MemoryBreakdown`."""
    return MemoryBreakdown(**memory_classes.classes_v2(stat), source=source)


def breakdown_v1(
    stat: dict[str, int], *, prefix: str = "", kmem_bytes: int | None = None, source: str = "memory.stat v1"
) -> MemoryBreakdown:
    """Classes of a v1 memory.stat (`memory_classes.classes_v1`), ``prefix`` "total_" for its totals."""
    classes = memory_classes.classes_v1(stat, prefix=prefix, kmem_bytes=kmem_bytes)
    return MemoryBreakdown(**classes, source=source)


def breakdown_mem_info(mem_info: dict[str, int], *, page_size: int) -> MemoryBreakdown | None:
    """The node's memory from show_mem's ``Mem-Info:`` summary (pages), for an OOM of the whole node.

    shmem and tmpfs pages sit on the anon LRU lists (swap-backed, since 2.6.28), so anon is the
    anon lists less ``shmem``; kernel is slab and page tables (kernel stacks are printed per zone
    only); ``unevictable`` (mlocked, ramfs) is left out: it could be any of them.
    """
    def pages(*keys: str) -> int | None:
        found = [mem_info[k] for k in keys if k in mem_info]
        return sum(found) * page_size if found else None

    anon_lru = pages("active_anon", "inactive_anon", "isolated_anon")
    ram, free = pages("pages_ram"), pages("free")
    if anon_lru is None or ram is None or free is None:
        return None  # without the RAM in use, no share can be told (vmalloc and drivers are in no counter)
    shmem = pages("shmem")
    slab = pages("slab_reclaimable", "slab_unreclaimable")
    kernel_parts = [v for v in (slab, pages("pagetables"), pages("sec_pagetables")) if v is not None]
    named = anon_lru + (pages("active_file", "inactive_file", "isolated_file") or 0) + sum(kernel_parts)
    in_use = ram - (pages("pages_reserved") or 0) - free
    return MemoryBreakdown(
        anon_bytes=max(0, anon_lru - (shmem or 0)),
        file_bytes=pages("active_file", "inactive_file", "isolated_file"),
        shmem_bytes=shmem,
        kernel_bytes=sum(kernel_parts) if kernel_parts else None,
        slab_bytes=slab,
        slab_reclaimable_bytes=pages("slab_reclaimable"),
        slab_unreclaimable_bytes=pages("slab_unreclaimable"),
        pagetables_bytes=pages("pagetables"),
        file_dirty_bytes=pages("dirty"),
        file_writeback_bytes=pages("writeback"),
        file_mapped_bytes=pages("mapped"),
        unattributed_bytes=max(0, in_use - named),
        source="the node's Mem-Info (show_mem): an OOM of the whole node, not of a cgroup",
    )


class CgroupMemoryStat(BaseModel):
    """One cgroup's ``memory.stat``, v1 or v2, with the kernel's keys kept as printed.

    Sizes are bytes: old kernels print ``rss:123552KB`` inside OOM records and those
    are converted; event counters (``pgfault``, ``workingset_*``, ``thp_*``) stay the
    counts the kernel printed.
    """

    #: 1 or 2; None when the keys present cannot tell (e.g. an all-counters excerpt).
    version: CgroupVersion | None = None
    #: The cgroup path as the kernel printed it (relative to the hierarchy root); None for a bare file.
    path: str | None = None
    #: Original keys → bytes (sizes) or counts (events).
    stat: dict[str, int] = Field(default_factory=dict)
    #: How sizes were printed: "bytes" (memory.stat, new kernels) or "KB" (old OOM records).
    printed_unit: Literal["bytes", "KB"] = "bytes"

    @property
    def hierarchical(self) -> bool:
        """True when these numbers include child cgroups (v2 always; v1 via ``total_*`` keys)."""
        return memory_classes.hierarchical(self.stat, self.version)

    def breakdown(self, *, kmem_bytes: int | None = None) -> MemoryBreakdown:
        """The classes of this cgroup's memory; v1 kernel memory comes from the ``kmem:`` line if given."""
        if self.version == 2:
            return breakdown_v2(self.stat)
        prefix = "total_" if self.hierarchical else ""
        return breakdown_v1(
            self.stat,
            prefix=prefix,
            kmem_bytes=kmem_bytes,
            source=f"memory.stat v1 ({'hierarchical total_*' if prefix else 'local'} keys)",
        )


class ProcessMemory(BaseModel):
    """One process's memory, in bytes. RSS counts shared pages once per process; PSS splits them."""

    pid: int
    name: str
    rss_bytes: int | None = None
    anon_bytes: int | None = None
    file_bytes: int | None = None
    shmem_bytes: int | None = None
    #: From /proc/PID/smaps_rollup where it was read: proportional, private and shared sizes.
    pss_bytes: int | None = None
    private_bytes: int | None = None
    shared_bytes: int | None = None
    swap_bytes: int | None = None


class MemorySample(BaseModel):
    """One look at a pod's cgroup at one moment: what the agent samples and a report's trend holds."""

    at: datetime
    cgroup_path: str | None = None
    usage_bytes: int | None = None
    limit_bytes: int | None = None
    peak_bytes: int | None = None
    stat: CgroupMemoryStat | None = None
    processes: list[ProcessMemory] = Field(default_factory=list)
