"""The memory cgroup this process is charged to, found from inside it.

A pod dies when its cgroup passes its limit, and that charge includes page
copies held by workers that the trainer's own VmRSS never shows. So the memory
line reads the cgroup, located through ``/proc/self/cgroup`` and the cgroup
mounts in ``/proc/self/mountinfo`` (which also covers containers whose cgroup
is mounted at ``/sys/fs/cgroup`` with a non-root mount root). cgroup v1's
memory controller is preferred when mounted (hybrid hosts have an empty
cgroup2 beside it), else cgroup v2.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

#: cgroup v1 writes "no limit" as the largest page-aligned 64-bit number; anything this big is no limit.
V1_UNLIMITED_THRESHOLD = 2**62


@dataclass(frozen=True)
class CgroupMount:
    """One cgroup filesystem mount from ``/proc/self/mountinfo``."""

    mount_point: PurePosixPath
    root: PurePosixPath
    """Which cgroup of the hierarchy is mounted at ``mount_point`` (not ``/`` in many containers)."""
    version: Literal[1, 2]
    controllers: frozenset[str]


def parse_mountinfo(text: str) -> list[CgroupMount]:
    mounts: list[CgroupMount] = []
    for line in text.splitlines():
        pre, sep, post = line.partition(" - ")
        if not sep:
            continue
        fields, tail = pre.split(), post.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        fstype, options = tail[0], tail[2]
        if fstype == "cgroup":
            mounts.append(
                CgroupMount(
                    PurePosixPath(fields[4]), PurePosixPath(fields[3]), 1, frozenset(options.split(","))
                )
            )
        elif fstype == "cgroup2":
            mounts.append(CgroupMount(PurePosixPath(fields[4]), PurePosixPath(fields[3]), 2, frozenset()))
    return mounts


def parse_proc_cgroup(text: str) -> tuple[PurePosixPath | None, PurePosixPath | None]:
    """This process's (v1 memory, v2) cgroup paths from ``/proc/self/cgroup`` text."""
    v1: PurePosixPath | None = None
    v2: PurePosixPath | None = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2 = PurePosixPath(path)
        elif "memory" in controllers.split(","):
            v1 = PurePosixPath(path)
    return v1, v2


def candidate_dirs(proc_cgroup_text: str, mountinfo_text: str) -> list[tuple[Path, Path, Literal[1, 2]]]:
    """Where this process's memory cgroup may be, best first: (directory, mount point, version).

    Pure: the caller keeps the first one whose files exist.
    """
    v1_path, v2_path = parse_proc_cgroup(proc_cgroup_text)
    found: list[tuple[Path, Path, Literal[1, 2]]] = []
    for version, own in ((1, v1_path), (2, v2_path)):
        if own is None:
            continue
        for mount in parse_mountinfo(mountinfo_text):
            if mount.version != version or (version == 1 and "memory" not in mount.controllers):
                continue
            try:
                rel = own.relative_to(mount.root)
            except ValueError:
                # Outside the mounted subtree: a cgroup namespace shows paths from its own root.
                rel = PurePosixPath(str(own).lstrip("/"))
            found.append((Path(mount.mount_point / rel), Path(mount.mount_point), version))
    return found


class OwnCgroup:
    """Reads one memory cgroup's usage, effective limit and the kernel's own peak, in bytes."""

    def __init__(self, path: Path, *, version: Literal[1, 2], mount_point: Path) -> None:
        self.path = path
        self.version: Literal[1, 2] = version
        self.mount_point = mount_point

    def __repr__(self) -> str:
        return f"OwnCgroup({str(self.path)!r}, version={self.version})"

    def usage(self) -> int:
        return self._read_int("memory.usage_in_bytes" if self.version == 1 else "memory.current")

    def peak(self) -> int | None:
        """The kernel's high-water mark; None on cgroup v2 before Linux 5.19 (no ``memory.peak``)."""
        try:
            return self._read_int("memory.max_usage_in_bytes" if self.version == 1 else "memory.peak")
        except (OSError, ValueError):
            return None

    def limit(self) -> int | None:
        """The limit that really applies (the smallest up the tree), or None for unlimited."""
        limits: list[int] = []
        if self.version == 1:
            limits.append(self._read_int("memory.limit_in_bytes"))
            hierarchical = self.stat().get("hierarchical_memory_limit")
            if hierarchical is not None:
                limits.append(hierarchical)
        else:
            directory = self.path
            while True:
                try:
                    raw = (directory / "memory.max").read_text().strip()
                except OSError:
                    break
                if raw != "max":
                    limits.append(int(raw))
                if directory == self.mount_point or directory.parent == directory:
                    break
                directory = directory.parent
        real = [value for value in limits if value < V1_UNLIMITED_THRESHOLD]
        return min(real) if real else None

    def stat(self) -> dict[str, int]:
        result: dict[str, int] = {}
        for line in (self.path / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                result[key] = int(value)
        return result

    def _read_int(self, name: str) -> int:
        return int((self.path / name).read_text().strip())


def find_own_cgroup(*, proc_self: Path = Path("/proc/self")) -> OwnCgroup | None:
    """This process's memory cgroup, or None where there is none to read (no mount, root cgroup v2)."""
    try:
        proc_cgroup = (proc_self / "cgroup").read_text()
        mountinfo = (proc_self / "mountinfo").read_text()
    except OSError:
        return None
    for directory, mount_point, version in candidate_dirs(proc_cgroup, mountinfo):
        usage_file = "memory.usage_in_bytes" if version == 1 else "memory.current"
        if (directory / usage_file).is_file():
            return OwnCgroup(directory, version=version, mount_point=mount_point)
    return None
