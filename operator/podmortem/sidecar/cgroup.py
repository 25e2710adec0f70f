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

The directory is opened once and its files are opened relative to it from then on:
after the trainer's last process exits, ``/proc/<pid>/root`` is gone, but the open
directory still reads the cgroup's final numbers until the runtime removes it.

That mount is the trainer's, and a trainer able to make a user namespace controls it
(docs/sidecar.md, "Trust model"). So on the real /proc (``verify``) the directory must be on a
cgroup filesystem and list the trainer's pid in its ``cgroup.procs`` (a process is in exactly one
cgroup of a hierarchy, so that is the trainer's own cgroup, not the sidecar's nor a made-up one),
and every file is read by `podmortem.sidecar.untrusted_files`: a regular file on a cgroup
filesystem, on the directory's own mount, non-blocking, within `MAX_FILE_BYTES`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from podmortem.cgroups import cgroupfs
from podmortem.errors import PodmortemError
from podmortem.sidecar import untrusted_files
from podmortem.sidecar.container import MemoryCgroupLine

#: Where container runtimes mount the cgroup tree (v1: one directory per controller below it).
DEFAULT_MOUNTS = {1: "/sys/fs/cgroup/memory", 2: "/sys/fs/cgroup"}
_OCTAL = re.compile(r"\\([0-7]{3})")
#: Bytes read of one cgroup file: memory.stat is about 1.5 KiB, the others a line or a few.
MAX_FILE_BYTES = 16 * 1024
#: Bytes read of cgroup.procs to find the trainer's pid in it (8 bytes a pid: 130,000 pids).
MAX_PROCS_BYTES = 1024 * 1024
#: Bytes read of a process's mountinfo (a mount namespace the trainer may fill with mounts).
MAX_MOUNTINFO_BYTES = 1024 * 1024
V1_UNLIMITED = 1 << 62


class CgroupUnreachable(PodmortemError):
    """The trainer's memory cgroup cannot be opened; ``str(exc)`` says what was tried and why."""


@dataclass(frozen=True)
class CgroupMount:
    """One cgroup mount of a process, from its mountinfo."""

    #: The cgroup the mount shows at its top, relative to the reader's cgroup namespace.
    root: str
    #: Where it is mounted, in the process's own mount namespace.
    mount_point: str
    version: cgroupfs.CgroupVersion


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
        with open(proc_root / str(pid) / "mountinfo", "rb") as info:
            mounts = parse_mountinfo(info.read(MAX_MOUNTINFO_BYTES).decode("utf-8", "replace"))
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


def _int(text: str | None) -> int | None:
    value = (text or "").strip()
    return int(value) if value.isdigit() else None


def _limit(text: str | None, version: cgroupfs.CgroupVersion) -> int | None:
    value = _int(text)
    return None if value is None or (version == 1 and value >= V1_UNLIMITED) else value


def _key(text: str | None, key: str) -> int | None:
    for row in (text or "").splitlines():
        name, _, value = row.partition(" ")
        if name == key:
            return _int(value)
    return None


class OpenCgroup:
    """The trainer's memory cgroup, held open as a directory; read with `read` until it is removed."""

    def __init__(
        self, fd: int, version: cgroupfs.CgroupVersion, path: str, where: Path, *, verify: bool = False
    ) -> None:
        self._fd = fd
        self.version: cgroupfs.CgroupVersion = version
        #: As the sidecar saw it in /proc/<pid>/cgroup.
        self.path = path
        #: Where it was opened (for messages).
        self.where = where
        #: Files must be the kernel's cgroup files (the real /proc; off for test trees of plain files).
        self.verify = verify
        self._mount = untrusted_files.mount_id(fd) if verify else None

    @classmethod
    def open(cls, proc_root: Path, pid: int, line: MemoryCgroupLine, *, verify: bool = False) -> OpenCgroup:
        """Open ``pid``'s memory cgroup; raise `CgroupUnreachable` with the reason.

        ``verify``: the directory must be on a cgroup filesystem and list ``pid`` in cgroup.procs.
        """
        where = locate(proc_root, pid, line)
        try:
            fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except PermissionError as exc:
            raise CgroupUnreachable(
                f"{where}: {exc.strerror} (the sidecar must run as the trainer's user, and the trainer "
                f"must hold no capability the sidecar lacks)"
            ) from exc
        except OSError as exc:
            raise CgroupUnreachable(f"{where}: {exc.strerror or exc}") from exc
        opened = cls(fd, line.version, line.path, where, verify=verify)
        try:
            if verify:
                untrusted_files.check_directory(fd)
                if opened._mount is None:
                    raise CgroupUnreachable(f"{where}: its mount is unknown (no mnt_id in /proc/self/fdinfo)")
                procs = opened._text("cgroup.procs", MAX_PROCS_BYTES)
                if str(pid) not in procs.split():
                    raise CgroupUnreachable(
                        f"{where}: its cgroup.procs does not list pid {pid}: not the trainer's cgroup")
            if opened._maybe("memory.stat") is None:
                raise CgroupUnreachable(f"{where} has no memory.stat: not a memory cgroup")
        except CgroupUnreachable:
            opened.close()
            raise
        except OSError as exc:
            opened.close()
            raise CgroupUnreachable(f"{where}: {exc}") from exc
        return opened

    def _text(self, name: str, max_bytes: int = MAX_FILE_BYTES) -> str:
        """One file of the cgroup; OSError (`untrusted_files.FileRefused` too) when it cannot be read."""
        return untrusted_files.read_bounded(
            self._fd, name, max_bytes=max_bytes, cgroupfs=self.verify, dir_mount=self._mount
        )

    def _maybe(self, name: str) -> str | None:
        """One file, None where this kernel has none; refusals and other errors raise."""
        try:
            return self._text(name)
        except FileNotFoundError:
            return None

    def read(self) -> cgroupfs.CgroupReading:
        """usage, peak, limit, memory.stat and the OOM-kill counter; raises OSError once it is removed
        (or a file is refused: `untrusted_files.FileRefused`)."""
        stat = self._text("memory.stat")
        if self.version == 1:
            usage, peak = self._maybe("memory.usage_in_bytes"), self._maybe("memory.max_usage_in_bytes")
            limit, oom = self._maybe("memory.limit_in_bytes"), self._maybe("memory.oom_control")
        else:
            usage, peak = self._maybe("memory.current"), self._maybe("memory.peak")
            limit, oom = self._maybe("memory.max"), self._maybe("memory.events")
        return cgroupfs.CgroupReading(
            usage_bytes=_int(usage),
            peak_bytes=_int(peak),
            limit_bytes=_limit(limit, self.version),
            stat_text=stat,
            oom_kill_count=_key(oom, "oom_kill"),
        )

    def oom_kills(self) -> int | None:
        """The OOM-kill counter alone (one small file, read first when an exit wakes the sidecar: the
        runtime may remove the cgroup soon after); None once removed or unreadable."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            return _key(self._text(name), "oom_kill")
        except OSError:
            return None

    def limit_hits(self) -> int | None:
        """How often a charge hit the limit: memory.failcnt (v1), ``max`` of memory.events (v2)."""
        try:
            if self.version == 1:
                return _int(self._text("memory.failcnt"))
            return _key(self._text("memory.events"), "max")
        except OSError:
            return None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
