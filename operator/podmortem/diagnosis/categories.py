"""Which kind of memory filled the cgroup: a category (anon, shmem, kernel, sock, file, hugetlb)
or, finer, a part of one with a cure of its own (slab, page tables, per-CPU, kernel stacks, the
zswap pool, dirty page cache).

Each has a different cure, so the finding names the finest class that holds at least half of
the cgroup's memory (`MemoryBreakdown.dominant_class`), else the category, and says what
usually puts memory there. Its evidence holds the categories and the parts of the one named.
"""

from __future__ import annotations

from podmortem.diagnosis.facts import RecordFacts
from podmortem.reports.findings import EvidenceValue, Finding, Severity
from podmortem.reports.memory import CLASS_PARENT, DOMINANT_SHARE, MemoryBreakdown
from podmortem.reports.units import human_bytes

__all__ = ["CATEGORIES", "DOMINANT_SHARE", "dominant_category", "dominant_class_name", "dominant_name"]

_TEXT = {
    "anon": (
        "anonymous memory (process heaps: Python objects, tensors, arrays)",
        "Look for what grows across epochs (caches, per-sample results kept for evaluation) "
        "and for forked workers holding copies; a per-epoch memory line shows when it grew.",
    ),
    "shmem": (
        "shared memory (/dev/shm and tmpfs, often DataLoader worker batches)",
        "Lower DataLoader num_workers or prefetch_factor, make sure /dev/shm files are removed, "
        "and remember an emptyDir with medium: Memory counts against this limit.",
    ),
    "kernel": (
        "kernel memory (slab caches, kernel stacks, page tables, per-CPU data)",
        "Look for many threads or processes, many open files, or a runtime leaking "
        "kernel objects; kernel memory is charged to the cgroup like any other.",
    ),
    "file": (
        "page cache (file data read or written)",
        "Page cache is normally reclaimed before an OOM kill; a file-dominated kill points at "
        "dirty pages that could not be written back fast enough, or at files on a tmpfs.",
    ),
    "sock": (
        "socket buffers (data queued in the kernel on the container's sockets: received but not yet "
        "read by the application, or sent and not yet acknowledged)",
        "Look for a reader that stopped reading (a stuck consumer or event loop: Recv-Q grows in "
        "`ss -tmn` run in the container's network namespace) and for very many connections; drain or close "
        "them, and bound the buffers with the net.ipv4.tcp_rmem / net.ipv4.tcp_wmem sysctls (per "
        "network namespace). On cgroup v2 socket buffers are charged to the container's limit.",
    ),
    "hugetlb": (
        "huge pages from hugetlbfs (charged to the cgroup because memory_hugetlb_accounting is on)",
        "Huge pages are taken explicitly (files on a hugetlbfs mount, MAP_HUGETLB, a hugepages-* "
        "resource): remove unused hugetlbfs files and size the memory limit to include them.",
    ),
    "slab": (
        "slab caches (kernel objects: dentries and inodes, sockets, file handles)",
        "Reclaimable slab (dentries and inodes) grows with the files the container creates or looks "
        "up: very many small files, directory walks, lookups of missing paths; unreclaimable slab that "
        "keeps growing is a kernel-object leak (sockets, pipes, inotify watches, BPF maps). `slabtop` "
        "or /proc/slabinfo on the node names the cache.",
    ),
    "pagetables": (
        "page tables (the kernel's maps of the processes' address spaces)",
        "Page tables grow with mapped memory times the processes that map it: many processes (forked "
        "workers) each mapping a large heap or shared region, or huge sparse address spaces. Use "
        "fewer processes, and back large regions with huge pages (THP or hugetlbfs), which need far "
        "fewer entries.",
    ),
    "percpu": (
        "per-CPU kernel data (allocated once per CPU for each cgroup, BPF map or network namespace)",
        "Per-CPU memory scales with the CPUs times the objects: look for very many cgroups created and "
        "removed (dying ones keep their per-CPU stats: nr_dying_descendants in cgroup.stat), per-CPU "
        "BPF maps, or many network namespaces, and what creates them.",
    ),
    "kernel_stack": (
        "kernel stacks (one per thread, 16 KiB each on x86-64)",
        "Kernel stacks grow with the number of threads: look for a thread leak or an unbounded "
        "thread pool (Threads: in /proc/PID/status), and cap threads with pids.max or the pool size.",
    ),
    "zswap": (
        "the compressed swap pool (zswap: pages swapped out stay in memory, compressed, and count "
        "against the limit)",
        "The container swapped heavily into a pool that still uses RAM: find what grew (usually "
        "anonymous memory, whose cure applies), limit the pool with memory.zswap.max, or let zswap "
        "write back to a swap device (memory.zswap.writeback).",
    ),
    "file_dirty": (
        "dirty page cache (file data written but not yet on disk, or being written back), which "
        "cannot be reclaimed until written",
        "Writes outran the storage: a slow disk or a network filesystem (NFS, a FUSE or CSI mount) "
        "took the data slower than it was written. Write in smaller steps and fsync as you go, use "
        "faster or local storage, and lower vm.dirty_bytes / vm.dirty_background_bytes so writeback "
        "starts earlier.",
    ),
}

#: The classes a record can be dominated by, as named in their codes (each a ``<name>-dominant``
#: finding: ``kernel-stack-dominant`` for ``kernel_stack``, ``file-dirty-dominant`` for ``file_dirty``).
CATEGORIES: tuple[str, ...] = tuple(name.replace("_", "-") for name in _TEXT)

#: The breakdown fields that are parts of each category, put in the evidence of its findings.
_PARTS = {
    "kernel": (
        "slab",
        "slab_reclaimable",
        "slab_unreclaimable",
        "kernel_stack",
        "pagetables",
        "sec_pagetables",
        "percpu",
        "vmalloc",
        "zswap",
        "zswapped",
    ),
    "file": ("file_dirty", "file_writeback", "file_mapped"),
    "anon": ("anon_thp", "swapcached", "swap"),
}


def dominant_category(facts: RecordFacts) -> Finding | None:
    """``<class>-dominant`` for the class that filled the cgroup (`dominant_class_name`); None when mixed."""
    breakdown = facts.breakdown
    name = dominant_class_name(facts)
    if name is None or breakdown is None:
        return None
    categories = breakdown.categories()
    total = breakdown.total_bytes()
    parent = CLASS_PARENT.get(name, name)
    value = breakdown.classes()[name][1] if name in CLASS_PARENT else categories[name]
    what, action = _TEXT[name]
    share = value / total
    evidence: dict[str, EvidenceValue] = {f"{k}_bytes": v for k, v in categories.items()}
    evidence |= _parts(breakdown, parent)
    evidence |= {"share": round(share, 3), "source": breakdown.source, "limit_bytes": facts.limit_bytes}
    if name in CLASS_PARENT:
        evidence |= {"class": name, "class_bytes": value, "category": parent}
    whose = "the node's" if facts.node_wide else "the cgroup's"
    message = f"{human_bytes(value)} ({share:.0%}) of {whose} memory was {what}."
    if name == "slab" and breakdown.slab_reclaimable_bytes is not None:
        message += (
            f" {human_bytes(breakdown.slab_reclaimable_bytes)} of it reclaimable (dentries, inodes), "
            f"{human_bytes(breakdown.slab_unreclaimable_bytes)} unreclaimable."
        )
    elif name == "zswap" and breakdown.zswapped_bytes is not None:
        message += f" It holds {human_bytes(breakdown.zswapped_bytes)} of swapped-out pages, compressed."
    return Finding(
        code=f"{name.replace('_', '-')}-dominant",
        severity=Severity.WARNING,
        message=message,
        evidence=evidence,
        action=action,
    )


def _parts(breakdown: MemoryBreakdown, category: str) -> dict[str, EvidenceValue]:
    found: dict[str, EvidenceValue] = {}
    for part in _PARTS.get(category, ()):
        value = getattr(breakdown, f"{part}_bytes")
        if value is not None:
            found[f"{part}_bytes"] = value
    return found


def dominant_name(facts: RecordFacts) -> str | None:
    """The category (anon, shmem, kernel, sock, file, hugetlb) holding at least half; None when mixed."""
    return facts.breakdown.dominant() if facts.breakdown is not None else None


def dominant_class_name(facts: RecordFacts) -> str | None:
    """The finest class holding at least half (``slab``, ``file_dirty``…), else the category; or None."""
    return facts.breakdown.dominant_class() if facts.breakdown is not None else None
