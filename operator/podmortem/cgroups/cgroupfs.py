"""Reading a pod's memory cgroup on the host, for cgroup v1 and v2 alike.

The agent sees the host's cgroup mount (``/host/sys/fs/cgroup``). On v1 the
memory controller has its own hierarchy (``memory/``); on v2 one unified tree
carries it. Pod cgroup paths are given as the kernel prints them in OOM
records: relative to the root of the memory hierarchy. A pod's processes live
in its container sub-cgroups, so pids are collected from the whole subtree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from podmortem.errors import PodmortemError

CgroupVersion = Literal[1, 2]

#: cgroup v1 writes "no limit" as the largest page-aligned 64-bit value.
V1_UNLIMITED_THRESHOLD = 2**62


class HierarchyMissing(PodmortemError):
    """No memory cgroup hierarchy under the configured root; ``str(exc)`` says what was looked for."""


class CgroupMissing(PodmortemError):
    """The pod's cgroup directory does not exist (not started yet, or already removed)."""


@dataclass(frozen=True)
class MemoryHierarchy:
    """Where the memory controller's tree is mounted, and which interface its files speak."""

    root: Path
    version: CgroupVersion

    def directory(self, cgroup_path: str) -> Path:
        return self.root / cgroup_path.strip("/")


def detect(cgroup_root: Path) -> MemoryHierarchy:
    """Find the memory hierarchy below a cgroup mount (v2 unified first, then v1 ``memory/``)."""
    try:
        controllers = (cgroup_root / "cgroup.controllers").read_text().split()
    except OSError:
        controllers = []
    if "memory" in controllers:
        return MemoryHierarchy(cgroup_root, 2)
    for candidate in (cgroup_root / "memory", cgroup_root):
        if (candidate / "memory.usage_in_bytes").exists() or (candidate / "memory.stat").exists():
            return MemoryHierarchy(candidate, 1)
    raise HierarchyMissing(
        f"no memory cgroup hierarchy at {cgroup_root} (no 'memory' in cgroup.controllers, "
        f"no {cgroup_root / 'memory'}/memory.stat)"
    )


@dataclass(frozen=True)
class CgroupReading:
    """One read of a cgroup's memory files. Bytes; ``None`` where this kernel has no such file."""

    usage_bytes: int | None
    peak_bytes: int | None
    limit_bytes: int | None
    stat_text: str
    oom_kill_count: int | None
    #: pid → the cgroup path (relative to the hierarchy root) the process is in.
    pids: dict[int, str] = field(default_factory=dict)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None


def _int_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    value = text.strip()
    return int(value) if value.lstrip("-").isdigit() else None


def _limit(text: str | None, version: CgroupVersion) -> int | None:
    if text is None or text.strip() == "max":
        return None
    value = _int_or_none(text)
    if value is None or (version == 1 and value >= V1_UNLIMITED_THRESHOLD):
        return None
    return value


def _key_value(text: str | None, key: str) -> int | None:
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return _int_or_none(value)
    return None


def subtree_pids(hierarchy: MemoryHierarchy, cgroup_path: str) -> dict[int, str]:
    """Every pid in the cgroup and its descendants → the cgroup path it sits in.

    The pids are as this process's pid namespace sees them: the DaemonSet needs ``hostPID: true``,
    or the kernel lists other namespaces' processes as 0 (v2) or leaves them out (v1).
    """
    top = hierarchy.directory(cgroup_path)
    base = "/" + cgroup_path.strip("/")
    result: dict[int, str] = {}
    for dirpath, _dirnames, filenames in os.walk(top):
        if "cgroup.procs" not in filenames:
            continue
        text = _read(Path(dirpath) / "cgroup.procs")
        if text is None:
            continue
        rel = os.path.relpath(dirpath, top)
        where = base if rel == "." else f"{base}/{rel}"
        for token in text.split():
            if token.isdigit() and int(token) > 0:
                result[int(token)] = where
    return result


def read_cgroup(hierarchy: MemoryHierarchy, cgroup_path: str) -> CgroupReading:
    """Read usage, peak, limit, memory.stat, the OOM-kill count and the pids; raise `CgroupMissing`."""
    directory = hierarchy.directory(cgroup_path)
    stat = _read(directory / "memory.stat")
    if stat is None:
        raise CgroupMissing(f"{directory} does not exist or has no memory.stat")
    if hierarchy.version == 1:
        usage = _int_or_none(_read(directory / "memory.usage_in_bytes"))
        peak = _int_or_none(_read(directory / "memory.max_usage_in_bytes"))
        limit = _limit(_read(directory / "memory.limit_in_bytes"), 1)
        oom_kills = _key_value(_read(directory / "memory.oom_control"), "oom_kill")
    else:
        usage = _int_or_none(_read(directory / "memory.current"))
        peak = _int_or_none(_read(directory / "memory.peak"))
        limit = _limit(_read(directory / "memory.max"), 2)
        oom_kills = _key_value(_read(directory / "memory.events"), "oom_kill")
    return CgroupReading(
        usage_bytes=usage,
        peak_bytes=peak,
        limit_bytes=limit,
        stat_text=stat,
        oom_kill_count=oom_kills,
        pids=subtree_pids(hierarchy, cgroup_path),
    )
