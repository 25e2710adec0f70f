"""One sample of the trainer container: its cgroup's numbers and each process's PSS, trainer or worker.

The same reads as the node agent's sampler (``cgroups.hostfs``, ``memory_stat``,
``procfs``), from inside the pod: the cgroup through the directory the sidecar
holds open, the processes through the shared /proc. PSS, not RSS, because a
DataLoader worker forked from a grown trainer maps the trainer's pages too; PSS
splits them, so the sum is what the cgroup is charged. A sample never raises: a
process that exits mid-read is left out, an unreadable one kept without PSS, a
cgroup that cannot be read leaves its numbers None.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from pathlib import Path

from podmortem.cgroups import hostfs, memory_stat, procfs
from podmortem.reports.memory import MemoryBreakdown
from podmortem.sidecar.cgroup import OpenCgroup
from podmortem.sidecar.container import Container
from podmortem.sidecar.evidence import Role


@dataclass(frozen=True)
class ProcessSample:
    """One process at one sample. ``pss_bytes`` is None where smaps_rollup could not be read."""

    pid: int
    comm: str
    pss_bytes: int | None
    role: Role
    #: The parent's pid (0 where the parent is outside the pid namespace or unknown).
    ppid: int = 0


@dataclass(frozen=True)
class CgroupNumbers:
    """One read of the container's memory cgroup, bytes (counts for the counters); None where unknown."""

    usage_bytes: int | None = None
    limit_bytes: int | None = None
    peak_bytes: int | None = None
    oom_kills: int | None = None
    limit_hits: int | None = None
    breakdown: MemoryBreakdown | None = None
    #: Why the cgroup could not be read, when it could not.
    error: str | None = None


@dataclass(frozen=True)
class Sample:
    """The cgroup and the processes at one moment (``at``: the monotonic clock, seconds)."""

    at: float
    cgroup: CgroupNumbers
    processes: tuple[ProcessSample, ...]
    #: Processes whose smaps_rollup could not be read (kept in ``processes`` without PSS).
    unreadable: int = 0


def read_numbers(cgroup: OpenCgroup | None) -> CgroupNumbers:
    """Read the cgroup now; a removed or unreadable cgroup gives numbers None and the reason."""
    if cgroup is None:
        return CgroupNumbers(error="no cgroup open")
    try:
        reading = cgroup.read()
    except (hostfs.CgroupMissing, OSError) as exc:
        return CgroupNumbers(error=f"{cgroup.path}: {exc}")
    stat = memory_stat.parse_memory_stat(reading.stat_text, version=cgroup.version)
    return CgroupNumbers(
        usage_bytes=reading.usage_bytes,
        limit_bytes=reading.limit_bytes,
        peak_bytes=reading.peak_bytes,
        oom_kills=reading.oom_kill_count,
        limit_hits=cgroup.limit_hits(),
        breakdown=stat.breakdown(),
    )


def read_processes(
    proc_root: Path, pids: tuple[int, ...], comms: dict[int, str], parents: dict[int, int]
) -> tuple[list[ProcessSample], int]:
    """PSS of each pid, lowest first; the lowest running one is the trainer, the others workers."""
    processes: list[ProcessSample] = []
    unreadable = 0
    for pid in sorted(pids):
        role: Role = "worker" if processes else "trainer"
        try:
            reading = procfs.read_process(proc_root, pid)
        except procfs.ProcessGone:
            continue
        except procfs.ProcessUnreadable:
            unreadable += 1
            processes.append(ProcessSample(pid, comms.get(pid, "?"), None, role, parents.get(pid, 0)))
            continue
        processes.append(ProcessSample(pid, reading.comm, reading.pss_bytes, role, parents.get(pid, 0)))
    return processes, unreadable


def take_sample(*, cgroup: OpenCgroup | None, proc_root: Path, found: Container, now: float) -> Sample:
    """The cgroup, then each of the container's processes, now."""
    numbers = read_numbers(cgroup)
    processes, unreadable = read_processes(proc_root, found.pids, found.comms, found.parents)
    return Sample(at=now, cgroup=numbers, processes=tuple(processes), unreadable=unreadable)


class SampleRing:
    """The last ``size`` samples, oldest first; ``dropped`` counts those that fell out."""

    def __init__(self, size: int) -> None:
        self._samples: collections.deque[Sample] = collections.deque(maxlen=size)
        self.dropped = 0
        self.taken = 0

    def add(self, sample: Sample) -> None:
        if len(self._samples) == self._samples.maxlen:
            self.dropped += 1
        self._samples.append(sample)
        self.taken += 1

    def last(self) -> Sample | None:
        return self._samples[-1] if self._samples else None

    def up_to(self, at: float) -> list[Sample]:
        """The samples taken at or before ``at``, oldest first."""
        return [s for s in self._samples if s.at <= at]
