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

import array
import bisect
import logging
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from podmortem.cgroups.cgroupfs import CgroupVersion

logger = logging.getLogger("podmortem.sidecar")

#: The name of the pod sandbox's pid 1 (the kubelet's pause image).
PAUSE_COMM = "pause"
#: Processes whose name and state are read at one look (to leave zombies out, to find the trainer by
#: name): beyond that, the cost of a look would grow with a count the trainer chooses.
DETAIL_MAX = 256


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


#: Bytes read of one small /proc file (cgroup, comm, stat): far more than any of them holds.
MAX_PROC_FILE_BYTES = 64 * 1024


def read_proc_file(proc_root: Path, pid: int, name: str) -> str | None:
    """``<proc_root>/<pid>/<name>``, at most `MAX_PROC_FILE_BYTES`; None when it cannot be read.

    Plain ``os`` calls on a string path: pathlib interns every part of a path it builds, so a
    ``Path`` per pid would keep one string per pid ever seen (0.9 MiB at 20,000), and take 3 times
    longer.
    """
    try:
        fd = os.open(f"{proc_root}/{pid}/{name}", os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return None
    try:
        return os.read(fd, MAX_PROC_FILE_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def process_cgroup(proc_root: Path, pid: int) -> MemoryCgroupLine | None:
    """The memory cgroup of ``pid``; None when it has exited or its file says none."""
    text = read_proc_file(proc_root, pid, "cgroup")
    return None if text is None else memory_cgroup_line(text)


def comm_of(proc_root: Path, pid: int) -> str:
    text = read_proc_file(proc_root, pid, "comm")
    return "?" if text is None else text.rstrip("\n")


def parent_if_running(proc_root: Path, pid: int) -> int | None:
    """The parent pid of a running process; None once it has exited, also while it is an unreaped zombie."""
    stat = read_proc_file(proc_root, pid, "stat")
    if stat is None:
        return None
    # "pid (comm) S ppid ...": the comm may hold spaces and parentheses; the state follows the last ')'.
    fields = stat[stat.rfind(")") + 1 :].split()
    if len(fields) < 2 or fields[0] in ("Z", "X", "x") or not fields[1].isdigit():
        return None
    return int(fields[1])


class ListingFailed(OSError):
    """The pod's /proc could not be listed: nothing may be concluded about which processes run."""


def list_pids(proc_root: Path) -> list[int]:
    """Every pid in ``proc_root``, lowest first; raises `ListingFailed` (never an empty list for an error:
    "no process runs" is concluded only from a listing that was read)."""
    try:
        names = os.listdir(proc_root)
    except OSError as exc:
        raise ListingFailed(exc.errno, f"cannot list {proc_root}: {exc.strerror or exc}") from exc
    return sorted(int(name) for name in names if name.isdigit())


class PidIndex:
    """pid → its memory cgroup, for the pids of the latest listing, kept from one look to the next.

    A process's cgroup is read once, not at every look: at 20,000 processes that is the difference
    between 20,000 reads a look and the few new pids since the last. At most ``per_look`` new pids are
    read in one look, and none once ``budget_s`` has passed; the rest are `pending` (not known yet), and
    while any is pending the container is not concluded gone. Memory: two C arrays, 8 bytes a pid
    (the pids, sorted, and each one's cgroup as an index into the distinct cgroups seen), not a dict
    of Python ints (about 50 bytes a pid).
    """

    def __init__(self, *, per_look: int = 4096, budget_s: float = 0.05,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_look = per_look
        self.budget_s = budget_s
        self._clock = clock
        self._pids = array.array("i")
        #: Index into ``_kinds``; -1: the process has no memory cgroup line (or had exited).
        self._codes = array.array("i")
        self._kinds: list[MemoryCgroupLine] = []
        self._kind_of: dict[MemoryCgroupLine, int] = {}
        #: Pids of the latest listing whose cgroup was not read yet (over the bound).
        self.pending = 0

    def _code(self, line: MemoryCgroupLine | None) -> int:
        if line is None:
            return -1
        if line not in self._kind_of:
            self._kind_of[line] = len(self._kinds)
            self._kinds.append(line)
        return self._kind_of[line]

    def update(self, proc_root: Path, pids: Sequence[int]) -> None:
        """The latest listing (sorted): known pids keep their cgroup, new ones are read (bounded)."""
        old_pids, old_codes = self._pids, self._codes
        pids_, codes = array.array("i"), array.array("i")
        deadline = self._clock() + self.budget_s
        read = pending = j = 0
        for pid in pids:
            j = bisect.bisect_left(old_pids, pid, j)
            if j < len(old_pids) and old_pids[j] == pid:
                pids_.append(pid)
                codes.append(old_codes[j])
                continue
            if read >= self.per_look or (read % 32 == 31 and self._clock() > deadline):
                pending += 1
                continue
            read += 1
            pids_.append(pid)
            codes.append(self._code(process_cgroup(proc_root, pid)))
        self._pids, self._codes = pids_, codes  # the pids no longer listed are gone with the old ones
        self.pending = pending

    def entries(self) -> Iterator[tuple[int, MemoryCgroupLine | None]]:
        """Every classified pid of the latest listing, lowest first, with its cgroup."""
        kinds = self._kinds
        for pid, code in zip(self._pids, self._codes, strict=True):
            yield pid, (kinds[code] if code >= 0 else None)

    def line(self, pid: int) -> MemoryCgroupLine | None:
        at = bisect.bisect_left(self._pids, pid)
        if at < len(self._pids) and self._pids[at] == pid and self._codes[at] >= 0:
            return self._kinds[self._codes[at]]
        return None

    def __len__(self) -> int:
        return len(self._pids)


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
    #: Whether every pid of the listing was classified (none `PidIndex.pending`): only then does an empty
    #: ``pids`` mean that none of the container's processes runs.
    complete: bool = True
    #: Whether zombies were told apart (``pids`` then holds running processes only): at most
    #: `DETAIL_MAX` processes have their state read at a look.
    detailed: bool = True


def _inside(path: str, cgroup: str) -> bool:
    return path == cgroup or path.startswith(cgroup.rstrip("/") + "/")


def find_container(
    proc_root: Path,
    selection: Selection,
    *,
    cgroup: str | MemoryCgroupLine | None = None,
    index: PidIndex | None = None,
) -> Container | None:
    """The trainer container now, by the `Selection` rule; None while none of its processes runs.

    ``cgroup`` fixes the container once it has been found, so that a new container in the pod does
    not move the watch to another cgroup. ``index`` keeps the pids' cgroups from look to look. Raises
    `ListingFailed` when /proc cannot be listed. With some pids not classified yet (the index's bound),
    a found container with no known process is returned with ``complete`` False, never None.
    At most `DETAIL_MAX` processes have their name and state read: with more, zombies count as running.
    """
    pids = list_pids(proc_root)
    index = index if index is not None else PidIndex(per_look=len(pids) + 1, budget_s=float("inf"))
    index.update(proc_root, pids)
    own = index.line(selection.own_pid) or process_cgroup(proc_root, selection.own_pid)
    known = cgroup if isinstance(cgroup, MemoryCgroupLine) else None
    wanted: str | None = (
        known.path if known is not None else cgroup if isinstance(cgroup, str) else selection.container_cgroup
    )
    target: MemoryCgroupLine | None = known
    if wanted is None:
        assert target is None
        checked = 0
        for pid, line in index.entries():
            if pid == selection.own_pid or line is None or (own is not None and line.path == own.path):
                continue
            if checked >= DETAIL_MAX:
                break
            checked += 1
            comm = comm_of(proc_root, pid) if pid == 1 or selection.comm is not None else ""
            if (pid == 1 and comm == PAUSE_COMM) or parent_if_running(proc_root, pid) is None:
                continue
            if selection.comm is None or selection.comm.fullmatch(comm):
                target = line
                break
        if target is None:
            return None
        wanted = target.path
    members: list[int] = []
    others = 0
    version: CgroupVersion | None = target.version if target is not None else None
    for pid, line in index.entries():
        if pid == selection.own_pid or line is None or (own is not None and line.path == own.path):
            continue
        if not _inside(line.path, wanted):
            others += pid != 1  # pid 1: the pause process, not a container of the pod's own
            continue
        version = line.version
        members.append(pid)
    comms: dict[int, str] = {}
    parents: dict[int, int] = {}
    detailed = len(members) <= DETAIL_MAX
    if detailed:
        running: list[int] = []
        for pid in members:
            comm = comm_of(proc_root, pid)
            parent = parent_if_running(proc_root, pid)
            if (pid == 1 and comm == PAUSE_COMM) or parent is None:
                continue
            running.append(pid)
            comms[pid], parents[pid] = comm, parent
        members = running
    complete = index.pending == 0
    if not members and (complete or version is None):
        return None
    assert version is not None
    return Container(
        cgroup=MemoryCgroupLine(version, wanted),
        pids=tuple(members),
        others=others,
        comms=comms,
        parents=parents,
        complete=complete,
        detailed=detailed,
    )
