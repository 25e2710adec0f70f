"""Cgroup and process memory as evidence: one model for v1 and v2 ``memory.stat``, and per-process use.

The kernel prints ``memory.stat`` inside OOM records, and the node agent reads the
same file from live cgroups. Both end up here with the kernel's original keys, so
nothing is lost in translation; the few derived numbers the diagnosis needs
(anon, file, shmem, kernel) are computed from whichever keys the version has.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

CgroupVersion = Literal[1, 2]

#: v2 keys that only v2 prints (v1 says rss/cache instead).
_V2_MARKERS = ("anon", "file", "kernel", "kernel_stack", "sock", "file_mapped")
_V1_MARKERS = ("rss", "cache", "mapped_file", "total_rss", "total_cache", "hierarchical_memory_limit")
#: v2 parts of kernel memory, summed when an older v2 kernel has no ``kernel`` key.
_V2_KERNEL_PARTS = ("kernel_stack", "pagetables", "sec_pagetables", "percpu", "sock", "vmalloc")


def detect_version(keys: dict[str, int] | list[str]) -> CgroupVersion | None:
    """Tell v1 from v2 by the keys only one of them prints; None when the keys do not say."""
    if any(k in keys for k in _V2_MARKERS):
        return 2
    if any(k in keys for k in _V1_MARKERS):
        return 1
    return None


class MemoryBreakdown(BaseModel):
    """A cgroup's memory split into the categories the diagnosis reasons about, in bytes.

    ``file_bytes`` excludes shmem (both v1 ``cache`` and v2 ``file`` include tmpfs and
    /dev/shm); a category is None when the source does not say.
    """

    model_config = ConfigDict(frozen=True)

    anon_bytes: int | None = None
    file_bytes: int | None = None
    shmem_bytes: int | None = None
    kernel_bytes: int | None = None
    #: Where the numbers come from, in words: e.g. "memory.stat v2", "sum of v1 blocks", "victim rss".
    source: str = ""

    def categories(self) -> dict[str, int]:
        """The known categories, name → bytes, in a stable order."""
        pairs = (
            ("anon", self.anon_bytes),
            ("shmem", self.shmem_bytes),
            ("kernel", self.kernel_bytes),
            ("file", self.file_bytes),
        )
        return {name: value for name, value in pairs if value is not None}

    def total_bytes(self) -> int:
        return sum(self.categories().values())


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

    def _get(self, key: str) -> int | None:
        return self.stat.get(key)

    @property
    def hierarchical(self) -> bool:
        """True when these numbers include child cgroups (v2 always; v1 via ``total_*`` keys)."""
        return self.version == 2 or "total_rss" in self.stat or "total_cache" in self.stat

    def breakdown(self, *, kmem_bytes: int | None = None) -> MemoryBreakdown:
        """anon/file/shmem/kernel of this cgroup; v1 kernel memory comes from the ``kmem:`` line if given."""
        if self.version == 2:
            anon = self._get("anon")
            shmem = self._get("shmem")
            file_total = self._get("file")
            kernel = self._get("kernel")
            if kernel is None:
                parts = [self.stat[k] for k in _V2_KERNEL_PARTS if k in self.stat]
                slab = self._get("slab")
                if slab is None and ("slab_reclaimable" in self.stat or "slab_unreclaimable" in self.stat):
                    slab = self.stat.get("slab_reclaimable", 0) + self.stat.get("slab_unreclaimable", 0)
                if slab is not None:
                    parts.append(slab)
                kernel = sum(parts) if parts else None
            source = "memory.stat v2"
        else:
            prefix = "total_" if self.hierarchical else ""
            anon = self._get(prefix + "rss")
            shmem = self._get(prefix + "shmem")
            file_total = self._get(prefix + "cache")
            kernel = kmem_bytes
            source = f"memory.stat v1 ({'hierarchical total_*' if prefix else 'local'} keys)"
        file_only = None
        if file_total is not None:
            file_only = max(0, file_total - (shmem or 0))
        return MemoryBreakdown(
            anon_bytes=anon, file_bytes=file_only, shmem_bytes=shmem, kernel_bytes=kernel, source=source
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
