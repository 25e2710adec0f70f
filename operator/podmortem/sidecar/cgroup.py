"""Reaching the trainer container's memory cgroup through its own mount, and keeping it open.

The sidecar has no host mount. The trainer's cgroup is mounted in the trainer's
own root, which ``/proc/<pid>/root`` reaches for a process of the same user (no
capability needed). Where the cgroup sits under that mount depends on namespaces:
with a cgroup namespace the mount's root *is* the container's cgroup; without
one (cgroup v1 runtimes, a host) the mount is the whole hierarchy, or a bind of
the container's part of it. ``/proc/<pid>/mountinfo`` says which: it gives the
mount's root in the same terms (relative to the reader's cgroup namespace) as
``/proc/<pid>/cgroup`` gives the process's cgroup, so the cgroup's place under
the mount is the one path less the other.

The directory is opened once and read through ``/proc/self/fd/<fd>`` from then on:
after the trainer's last process exits, ``/proc/<pid>/root`` is gone, but the open
directory still reads the cgroup's final numbers until the runtime removes it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from podmortem.cgroups import hostfs
from podmortem.errors import PodmortemError
from podmortem.sidecar.container import MemoryCgroupLine

#: Where container runtimes mount the cgroup tree (v1: one directory per controller below it).
DEFAULT_MOUNTS = {1: "/sys/fs/cgroup/memory", 2: "/sys/fs/cgroup"}
_OCTAL = re.compile(r"\\([0-7]{3})")


class CgroupUnreachable(PodmortemError):
    """The trainer's memory cgroup cannot be opened; ``str(exc)`` says what was tried and why."""


@dataclass(frozen=True)
class CgroupMount:
    """One cgroup mount of a process, from its mountinfo."""

    #: The cgroup the mount shows at its top, relative to the reader's cgroup namespace.
    root: str
    #: Where it is mounted, in the process's own mount namespace.
    mount_point: str
    version: hostfs.CgroupVersion


def _unescape(field: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[CgroupMount]:
    """The mounts in a mountinfo text that can hold memory: v1 ``cgroup`` with ``memory``, ``cgroup2``."""
    mounts: list[CgroupMount] = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        if dash < 6 or len(fields) < dash + 4:
            continue
        fstype, options = fields[dash + 1], fields[dash + 3].split(",")
        root, mount_point = _unescape(fields[3]), _unescape(fields[4])
        if fstype == "cgroup2":
            mounts.append(CgroupMount(root, mount_point, 2))
        elif fstype == "cgroup" and "memory" in options:
            mounts.append(CgroupMount(root, mount_point, 1))
    return mounts


def relative_to_mount(cgroup: str, mount_root: str) -> str | None:
    """Where ``cgroup`` sits below a mount whose top is ``mount_root`` ("" at the top); None if not below.

    Plain string prefixes, never normalised: ``/../a`` is another namespace's cgroup, not ``/a``.
    """
    top = mount_root.rstrip("/")
    if cgroup.rstrip("/") == top:
        return ""
    if not cgroup.startswith(top + "/"):
        return None
    below = cgroup[len(top) + 1 :].strip("/")
    return None if ".." in below.split("/") else below


def locate(proc_root: Path, pid: int, line: MemoryCgroupLine) -> Path:
    """The directory of ``pid``'s memory cgroup, reached through ``/proc/<pid>/root``.

    From its mountinfo where it says; else (no mountinfo, or no matching mount) the runtime's usual
    mount point, with the cgroup at the mount's top when the path is ``/`` or another namespace's
    (``/..``), and at its full path below the mount when that exists.
    """
    root = proc_root / str(pid) / "root"
    try:
        mounts = parse_mountinfo((proc_root / str(pid) / "mountinfo").read_text(errors="replace"))
    except OSError:
        mounts = []
    for mount in mounts:
        if mount.version != line.version:
            continue
        below = relative_to_mount(line.path, mount.root)
        if below is not None:
            return root / mount.mount_point.lstrip("/") / below
    base = root / DEFAULT_MOUNTS[line.version].lstrip("/")
    if line.path == "/" or line.path.startswith("/.."):
        return base
    full = base / line.path.strip("/")
    return full if full.is_dir() else base


class OpenCgroup:
    """The trainer's memory cgroup, held open as a directory; read with `read` until it is removed."""

    def __init__(self, fd: int, version: hostfs.CgroupVersion, path: str, where: Path) -> None:
        self._fd = fd
        self.version: hostfs.CgroupVersion = version
        #: As the sidecar saw it in /proc/<pid>/cgroup.
        self.path = path
        #: Where it was opened (for messages).
        self.where = where
        self._hierarchy = hostfs.MemoryHierarchy(Path(f"/proc/self/fd/{fd}"), version)

    @classmethod
    def open(cls, proc_root: Path, pid: int, line: MemoryCgroupLine) -> OpenCgroup:
        """Open ``pid``'s memory cgroup; raise `CgroupUnreachable` with the reason."""
        where = locate(proc_root, pid, line)
        try:
            fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except PermissionError as exc:
            raise CgroupUnreachable(
                f"{where}: {exc.strerror} (the sidecar must run as the trainer's user, and the trainer "
                f"must hold no capability the sidecar lacks)"
            ) from exc
        except OSError as exc:
            raise CgroupUnreachable(f"{where}: {exc.strerror or exc}") from exc
        opened = cls(fd, line.version, line.path, where)
        if not opened.has_memory_files():
            opened.close()
            raise CgroupUnreachable(f"{where} has no memory.stat: not a memory cgroup")
        return opened

    def has_memory_files(self) -> bool:
        return os.path.exists(f"/proc/self/fd/{self._fd}/memory.stat")

    def read(self) -> hostfs.CgroupReading:
        """usage, peak, limit, memory.stat and the OOM-kill counter; raises OSError once it is removed."""
        return hostfs.read_cgroup(self._hierarchy, "/")

    def limit_hits(self) -> int | None:
        """How often a charge hit the limit: memory.failcnt (v1), ``max`` of memory.events (v2)."""
        name, key = ("memory.failcnt", None) if self.version == 1 else ("memory.events", "max")
        try:
            text = (self._hierarchy.root / name).read_text()
        except OSError:
            return None
        if key is None:
            value = text.strip()
            return int(value) if value.isdigit() else None
        for row in text.splitlines():
            name_, _, value = row.partition(" ")
            if name_ == key and value.strip().isdigit():
                return int(value)
        return None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
