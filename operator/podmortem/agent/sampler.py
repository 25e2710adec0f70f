"""One memory sample of one pod: its cgroup's numbers plus every process's PSS and private memory.

A sample is what a person on the node would have looked at with ``cat
memory.stat`` and ``smaps_rollup``, taken every 10 s so that it exists before
the kill. Reads are plain file reads (tens of microseconds each); processes
that exit mid-read are skipped, unreadable ones are kept with their pid and
name only, and a missing cgroup gives a `SampleGap`, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from podmortem.agent.pods import WatchedPod
from podmortem.cgroups import cgroupfs, memory_stat, procfs
from podmortem.reports.evidence import SampleGap
from podmortem.reports.memory import MemorySample, ProcessMemory


@dataclass(frozen=True)
class SampleResult:
    """The outcome of sampling one pod: a sample or a gap, and how many processes could not be read."""

    sample: MemorySample | None
    gap: SampleGap | None
    unreadable_processes: int = 0


def read_processes(proc_root: Path, pids: dict[int, str]) -> tuple[list[ProcessMemory], int]:
    """PSS/private memory of each pid, sorted by pid; processes that exited are left out."""
    processes: list[ProcessMemory] = []
    unreadable = 0
    for pid in sorted(pids):
        try:
            reading = procfs.read_process(proc_root, pid)
        except procfs.ProcessGone:
            continue
        except procfs.ProcessUnreadable:
            unreadable += 1
            processes.append(ProcessMemory(pid=pid, name=_comm(proc_root, pid)))
            continue
        processes.append(
            ProcessMemory(
                pid=pid,
                name=reading.comm,
                rss_bytes=reading.rss_bytes,
                anon_bytes=reading.anon_bytes,
                pss_bytes=reading.pss_bytes,
                private_bytes=reading.private_bytes,
                shared_bytes=max(0, reading.rss_bytes - reading.private_bytes),
                swap_bytes=reading.swap_bytes,
            )
        )
    return processes, unreadable


def _comm(proc_root: Path, pid: int) -> str:
    try:
        return (proc_root / str(pid) / "comm").read_text().strip()
    except OSError:
        return "?"


def sample_pod(
    *, hierarchy: cgroupfs.MemoryHierarchy, proc_root: Path, pod: WatchedPod, now: datetime
) -> SampleResult:
    """Sample one pod now. Never raises for a missing cgroup or raced process."""
    if pod.cgroup_path is None:
        return SampleResult(
            None,
            SampleGap(
                at=now,
                reason="cgroup-unknown",
                detail=f"no cgroup found for pod {pod.uid} under {hierarchy.root}",
            ),
        )
    try:
        reading = cgroupfs.read_cgroup(hierarchy, pod.cgroup_path)
    except cgroupfs.CgroupMissing as exc:
        return SampleResult(None, SampleGap(at=now, reason="cgroup-missing", detail=str(exc)))
    except OSError as exc:
        return SampleResult(None, SampleGap(at=now, reason="read-error", detail=f"{pod.cgroup_path}: {exc}"))
    stat = memory_stat.parse_memory_stat(reading.stat_text, path=pod.cgroup_path)
    if stat.version is None:
        stat = stat.model_copy(update={"version": hierarchy.version})
    processes, unreadable = read_processes(proc_root, reading.pids)
    sample = MemorySample(
        at=now,
        cgroup_path=pod.cgroup_path,
        usage_bytes=reading.usage_bytes,
        limit_bytes=reading.limit_bytes,
        peak_bytes=reading.peak_bytes,
        stat=stat,
        processes=processes,
    )
    return SampleResult(sample, None, unreadable)
