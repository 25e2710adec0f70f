"""A cgroup's ``memory.stat`` numbers and their classes as plain dicts: the part of the memory model
the sidecar needs, without pydantic.

The sidecar runs in the training pod within 32 MiB (issue 36) and reads the classes of its
container's ``memory.stat``; `podmortem.reports.memory.MemoryBreakdown` is the same classes as a
model, built from these functions, so there is one way of counting them. Each charged byte is
counted once. Pure: no I/O.
"""

from __future__ import annotations

from typing import Literal

CgroupVersion = Literal[1, 2]

#: v2 keys that only v2 prints (v1 says rss/cache instead).
_V2_MARKERS = ("anon", "file", "kernel", "kernel_stack", "sock", "file_mapped")
_V1_MARKERS = ("rss", "cache", "mapped_file", "total_rss", "total_cache", "hierarchical_memory_limit")
#: v2 parts of ``kernel`` (MEMCG_KMEM: everything charged through obj_cgroup_charge_pages or
#: __memcg_kmem_charge_page), summed when a kernel before 5.18 prints no ``kernel`` key. ``sock`` is
#: not one: mem_cgroup_charge_skmem charges the memory counter and MEMCG_SOCK only.
_V2_KERNEL_PARTS = ("kernel_stack", "pagetables", "sec_pagetables", "percpu", "vmalloc", "zswap")

#: A class's name (a field of `MemoryBreakdown`) -> bytes, None where the source does not say.
Classes = dict[str, int | None]


def detect_version(keys: dict[str, int] | list[str]) -> CgroupVersion | None:
    """Tell v1 from v2 by the keys only one of them prints; None when the keys do not say."""
    if any(k in keys for k in _V2_MARKERS):
        return 2
    if any(k in keys for k in _V1_MARKERS):
        return 1
    return None


def stat_values(text: str) -> dict[str, int]:
    """A ``memory.stat`` file's ``key value`` lines; lines that are not ``key integer`` are skipped."""
    stat: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        value = value.strip()
        if not key or not value:
            continue
        try:
            stat[key] = int(value)
        except ValueError:
            continue
    return stat


def hierarchical(stat: dict[str, int], version: CgroupVersion | None) -> bool:
    """True when the numbers include child cgroups (v2 always; v1 via ``total_*`` keys)."""
    return version == 2 or "total_rss" in stat or "total_cache" in stat


def _slab(stat: dict[str, int], prefix: str = "") -> int | None:
    slab = stat.get(prefix + "slab")
    if slab is None and (prefix + "slab_reclaimable" in stat or prefix + "slab_unreclaimable" in stat):
        slab = stat.get(prefix + "slab_reclaimable", 0) + stat.get(prefix + "slab_unreclaimable", 0)
    return slab


def classes_v2(stat: dict[str, int]) -> Classes:
    """Classes of a v2 memory.stat (mm/memcontrol.c ``memory_stats[]``); see `MemoryBreakdown`."""
    shmem = stat.get("shmem")
    file_total = stat.get("file")
    slab = _slab(stat)
    kernel = stat.get("kernel")
    if kernel is None:
        parts = [stat[k] for k in _V2_KERNEL_PARTS if k in stat]
        if slab is not None:
            parts.append(slab)
        kernel = sum(parts) if parts else None
    return {
        "anon_bytes": stat.get("anon"),
        "file_bytes": max(0, file_total - (shmem or 0)) if file_total is not None else None,
        "shmem_bytes": shmem,
        "kernel_bytes": kernel,
        "sock_bytes": stat.get("sock"),
        "hugetlb_bytes": stat.get("hugetlb"),
        "slab_bytes": slab,
        "slab_reclaimable_bytes": stat.get("slab_reclaimable"),
        "slab_unreclaimable_bytes": stat.get("slab_unreclaimable"),
        "kernel_stack_bytes": stat.get("kernel_stack"),
        "pagetables_bytes": stat.get("pagetables"),
        "sec_pagetables_bytes": stat.get("sec_pagetables"),
        "percpu_bytes": stat.get("percpu"),
        "vmalloc_bytes": stat.get("vmalloc"),
        "zswap_bytes": stat.get("zswap"),
        "file_dirty_bytes": stat.get("file_dirty"),
        "file_writeback_bytes": stat.get("file_writeback"),
        "file_mapped_bytes": stat.get("file_mapped"),
        "anon_thp_bytes": stat.get("anon_thp"),
        "swapcached_bytes": stat.get("swapcached"),
        "zswapped_bytes": stat.get("zswapped"),
    }


def classes_v1(stat: dict[str, int], *, prefix: str = "", kmem_bytes: int | None = None) -> Classes:
    """Classes of a v1 memory.stat (``memcg1_stat_names[]``), with ``prefix`` "total_" for its totals.

    ``cache`` holds shmem, mapped_file, dirty and writeback; ``rss`` holds rss_huge; ``swap`` is
    charged to memory+swap only; kernel memory is the ``kmem:`` line, where printed.
    """
    shmem = stat.get(prefix + "shmem")
    cache = stat.get(prefix + "cache")
    return {
        "anon_bytes": stat.get(prefix + "rss"),
        "file_bytes": max(0, cache - (shmem or 0)) if cache is not None else None,
        "shmem_bytes": shmem,
        "kernel_bytes": kmem_bytes,
        "file_dirty_bytes": stat.get(prefix + "dirty"),
        "file_writeback_bytes": stat.get(prefix + "writeback"),
        "file_mapped_bytes": stat.get(prefix + "mapped_file"),
        "anon_thp_bytes": stat.get(prefix + "rss_huge"),
        "swapcached_bytes": stat.get(prefix + "swapcached"),
        "swap_bytes": stat.get(prefix + "swap"),
    }


def classes(stat: dict[str, int], version: CgroupVersion | None, *, kmem_bytes: int | None = None) -> Classes:
    """The classes of one cgroup's memory.stat: v2's, else v1's (its ``total_*`` keys where printed)."""
    if version == 2:
        return classes_v2(stat)
    return classes_v1(stat, prefix="total_" if hierarchical(stat, version) else "", kmem_bytes=kmem_bytes)
