"""One sample of the trainer container: its cgroup's numbers and each process's PSS, trainer or worker.

The same reads as the node agent's sampler (``cgroups.cgroupfs``, ``memory.stat``,
``procfs``), from inside the pod: the cgroup through the directory the sidecar
holds open, the processes through the shared /proc. PSS, not RSS, because a
DataLoader worker forked from a grown trainer maps the trainer's pages too; PSS
splits them, so the sum is what the cgroup is charged. A sample never raises: a
process that exits mid-read is left out, an unreadable one kept without PSS, a
cgroup that cannot be read leaves its numbers None.

The trainer chooses how many processes it has, so a sample is bounded whatever that count:
`LargestProcesses` picks at most ``keep`` of them (the trainer, then the largest by resident size
from ``/proc/<pid>/statm``, a read with no page-table walk), reading statm of at most
``reads_per_sample`` processes a sample, round robin, and remembering only the largest few; only the
picked ones have their PSS read. No descriptor is held for any process.
"""

from __future__ import annotations

import bisect
import collections
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from podmortem.cgroups import cgroupfs, procfs
from podmortem.reports import memory_classes
from podmortem.reports.sidecar_document import Role
from podmortem.sidecar.cgroup import OpenCgroup
from podmortem.sidecar.container import Container, parent_if_running, read_proc_file


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
    #: The classes of memory.stat (`memory_classes.classes`: ``anon_bytes``, ``file_bytes``...).
    classes: memory_classes.Classes | None = None
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
    #: Processes the container had (``processes`` holds the sampled ones: at most ``sampled``).
    count: int = 0


def read_numbers(cgroup: OpenCgroup | None) -> CgroupNumbers:
    """Read the cgroup now; a removed or unreadable cgroup gives numbers None and the reason."""
    if cgroup is None:
        return CgroupNumbers(error="no cgroup open")
    try:
        reading = cgroup.read()
    except (cgroupfs.CgroupMissing, OSError) as exc:
        return CgroupNumbers(error=f"{cgroup.path}: {exc}")
    return CgroupNumbers(
        usage_bytes=reading.usage_bytes,
        limit_bytes=reading.limit_bytes,
        peak_bytes=reading.peak_bytes,
        oom_kills=reading.oom_kill_count,
        limit_hits=cgroup.limit_hits(),
        classes=memory_classes.classes(memory_classes.stat_values(reading.stat_text), cgroup.version),
    )


def resident_pages(proc_root: Path, pid: int) -> int | None:
    """The resident size of ``pid`` in pages (``/proc/<pid>/statm``'s second field); None once gone."""
    text = read_proc_file(proc_root, pid, "statm")
    fields = text.split() if text is not None else []
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


class LargestProcesses:
    """Which of the container's processes a sample reads: the trainer, then the largest by resident size.

    ``keep`` are picked. With more processes than that, statm is read for the largest remembered
    (at most ``4 * keep``) and for up to ``reads_per_sample`` others, round robin from where the last
    sample stopped, within ``budget_s``: every process is looked at within ``count / reads_per_sample``
    samples, and a sample costs the same at 20,000 processes as at 2,000.
    """

    def __init__(self, *, keep: int, reads_per_sample: int = 1024, budget_s: float = 0.05,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.keep = max(1, keep)
        self.reads_per_sample = reads_per_sample
        self.budget_s = budget_s
        self._clock = clock
        self._rss: dict[int, int] = {}
        self._cursor = 0

    def choose(self, proc_root: Path, pids: tuple[int, ...]) -> tuple[int, ...]:
        """At most ``keep`` of ``pids`` (sorted, lowest first), the lowest always among them."""
        if len(pids) <= self.keep:
            return pids
        ordered = pids  # sorted, as the container lists them
        deadline = self._clock() + self.budget_s
        sizes: dict[int, int] = {}
        for pid in list(self._rss):
            pages = resident_pages(proc_root, pid)
            if pages is not None:
                sizes[pid] = pages
        start = bisect.bisect_right(ordered, self._cursor)
        reads = 0
        for offset in range(len(ordered)):
            if reads >= self.reads_per_sample or (reads % 32 == 31 and self._clock() > deadline):
                break
            pid = ordered[(start + offset) % len(ordered)]
            self._cursor = pid
            if pid in sizes:
                continue
            reads += 1
            pages = resident_pages(proc_root, pid)
            if pages is not None:
                sizes[pid] = pages
        largest = sorted(sizes, key=lambda p: (-sizes[p], p))[: 4 * self.keep]
        self._rss = {pid: sizes[pid] for pid in largest}
        picked = [ordered[0], *(p for p in largest if p != ordered[0])][: self.keep]
        return tuple(sorted(picked))


def read_processes(
    proc_root: Path, pids: tuple[int, ...], comms: dict[int, str], parents: dict[int, int]
) -> tuple[list[ProcessSample], int]:
    """PSS of each pid, lowest first; the lowest running one is the trainer, the others workers.

    A parent not in ``parents`` is read from the process's stat."""
    processes: list[ProcessSample] = []
    unreadable = 0
    for pid in sorted(pids):
        if pid not in parents:
            parent = parent_if_running(proc_root, pid)
            if parent is None:
                continue
            parents[pid] = parent  # the caller's copy
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


def take_sample(
    *, cgroup: OpenCgroup | None, proc_root: Path, found: Container, now: float,
    picker: LargestProcesses | None = None,
) -> Sample:
    """The cgroup, then the container's processes (those ``picker`` picks; all without one), now."""
    numbers = read_numbers(cgroup)
    pids = picker.choose(proc_root, found.pids) if picker is not None else found.pids
    processes, unreadable = read_processes(proc_root, pids, found.comms, dict(found.parents))
    return Sample(at=now, cgroup=numbers, processes=tuple(processes), unreadable=unreadable,
                  count=len(found.pids))


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
