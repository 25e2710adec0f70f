"""Which processes in the shared PID namespace are the trainer container's, from /proc alone.

With ``shareProcessNamespace: true`` the sidecar sees every process of its pod: the
pause process (pid 1), itself, and the other containers'. Each container has a
memory cgroup of its own, and ``/proc/<pid>/cgroup`` names it, so the trainer's
processes are found by their cgroup. The rule (`Selection`) is explicit:

1. a given ``container_cgroup``: the processes in that cgroup (or below it);
2. else a given ``comm`` pattern: the cgroup of the lowest pid whose name matches it;
3. else the cgroup of the lowest pid that is neither the sidecar, nor in the sidecar's own cgroup,
   nor pid 1 named ``pause``.

Paths are compared as the kernel shows them to the sidecar: relative to the sidecar's own cgroup
namespace (``/../<container>`` when each container has one), which is the same for every process read.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from podmortem.cgroups.hostfs import CgroupVersion

logger = logging.getLogger("podmortem.sidecar")

#: The name of the pod sandbox's pid 1 (the kubelet's pause image).
PAUSE_COMM = "pause"


@dataclass(frozen=True)
class MemoryCgroupLine:
    """The memory cgroup a process is in, from one line of ``/proc/<pid>/cgroup``."""

    version: CgroupVersion
    path: str


def memory_cgroup_line(text: str) -> MemoryCgroupLine | None:
    """The v1 ``memory`` line, else the v2 ``0::`` line (a hybrid host has both; v1 holds the memory)."""
    unified: MemoryCgroupLine | None = None
    for line in text.splitlines():
        hierarchy, sep, rest = line.partition(":")
        controllers, sep2, path = rest.partition(":")
        if not sep or not sep2 or not path.startswith("/"):
            continue
        if "memory" in controllers.split(","):
            return MemoryCgroupLine(1, path)
        if hierarchy == "0" and controllers == "":
            unified = MemoryCgroupLine(2, path)
    return unified


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def process_cgroup(proc_root: Path, pid: int) -> MemoryCgroupLine | None:
    """The memory cgroup of ``pid``; None when it has exited or its file says none."""
    text = _read(proc_root / str(pid) / "cgroup")
    return None if text is None else memory_cgroup_line(text)


def comm_of(proc_root: Path, pid: int) -> str:
    text = _read(proc_root / str(pid) / "comm")
    return "?" if text is None else text.rstrip("\n")


def parent_if_running(proc_root: Path, pid: int) -> int | None:
    """The parent pid of a running process; None once it has exited, also while it is an unreaped zombie."""
    stat = _read(proc_root / str(pid) / "stat")
    if stat is None:
        return None
    # "pid (comm) S ppid ...": the comm may hold spaces and parentheses; the state follows the last ')'.
    fields = stat[stat.rfind(")") + 1 :].split()
    if len(fields) < 2 or fields[0] in ("Z", "X", "x") or not fields[1].isdigit():
        return None
    return int(fields[1])


def list_pids(proc_root: Path) -> list[int]:
    try:
        names = os.listdir(proc_root)
    except OSError:
        return []
    return sorted(int(name) for name in names if name.isdigit())


@dataclass(frozen=True)
class Selection:
    """The rule that picks the trainer container's cgroup; see the module docstring."""

    #: This process's own pid, left out; its cgroup is the sidecar container's.
    own_pid: int
    #: The trainer container's cgroup, as ``/proc/<pid>/cgroup`` shows it to the sidecar.
    container_cgroup: str | None = None
    #: A pattern the whole name (``comm``) of one of the trainer's processes matches.
    comm: re.Pattern[str] | None = None


@dataclass(frozen=True)
class Container:
    """The trainer container as found: its memory cgroup and its running processes, lowest pid first."""

    cgroup: MemoryCgroupLine
    pids: tuple[int, ...]
    #: Running processes of the pod that are in neither this cgroup nor the sidecar's (other containers).
    others: int = 0
    comms: dict[int, str] = field(default_factory=dict, compare=False)
    #: pid -> its parent's pid.
    parents: dict[int, int] = field(default_factory=dict, compare=False)


def _inside(path: str, cgroup: str) -> bool:
    return path == cgroup or path.startswith(cgroup.rstrip("/") + "/")


def find_container(proc_root: Path, selection: Selection, *, cgroup: str | None = None) -> Container | None:
    """The trainer container now, by the `Selection` rule; None while none of its processes runs.

    ``cgroup`` fixes the container once it has been found, so that a new container in the pod does
    not move the watch to another cgroup. Only processes in the wanted cgroup are read further.
    """
    own = process_cgroup(proc_root, selection.own_pid)
    wanted = cgroup if cgroup is not None else selection.container_cgroup
    candidates: list[tuple[int, MemoryCgroupLine]] = []
    comms: dict[int, str] = {}
    parents: dict[int, int] = {}
    others = 0
    for pid in list_pids(proc_root):
        if pid == selection.own_pid:
            continue
        line = process_cgroup(proc_root, pid)
        if line is None or (own is not None and line.path == own.path):
            continue
        if wanted is not None and not _inside(line.path, wanted):
            others += pid != 1  # pid 1: the pause process, not a container of the pod's own
            continue
        comm = comm_of(proc_root, pid)
        parent = parent_if_running(proc_root, pid)
        if (pid == 1 and comm == PAUSE_COMM) or parent is None:
            continue
        candidates.append((pid, line))
        comms[pid] = comm
        parents[pid] = parent
    target: MemoryCgroupLine | None = None
    if wanted is not None:
        if candidates:
            target = MemoryCgroupLine(candidates[0][1].version, wanted)
    elif selection.comm is not None:
        target = next((line for pid, line in candidates if selection.comm.fullmatch(comms[pid])), None)
    elif candidates:
        target = candidates[0][1]
    if target is None:
        return None
    pids = tuple(pid for pid, line in candidates if _inside(line.path, target.path))
    return Container(
        cgroup=target,
        pids=pids,
        others=others + len(candidates) - len(pids),
        comms={pid: comms[pid] for pid in pids},
        parents={pid: parents[pid] for pid in pids},
    )
