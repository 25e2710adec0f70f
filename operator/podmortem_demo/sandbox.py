"""Throwaway memory cgroups, for running a process under a real kernel limit.

Tests, benchmarks and ``podmortem demo`` need the kernel to do a real OOM kill.
The child joins the cgroup itself (a tiny ``sh`` writes its own pid to
``cgroup.procs`` and then ``exec``s the command), so the calling process, such as
pytest, is never moved into the capped cgroup. Removal kills whatever is left
in the cgroup and retries ``rmdir`` until the kernel lets it go.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

from podmortem.errors import PodmortemError

V1_ROOT = Path("/sys/fs/cgroup/memory")
CgroupVersion = Literal[1, 2]

#: cgroup v1 writes "unlimited" as the largest page-aligned 64-bit value; anything above this is no limit.
V1_UNLIMITED_THRESHOLD = 2**62


class CgroupUnavailable(PodmortemError, RuntimeError):
    """No writable memory cgroup on this machine; ``str(exc)`` says why, for skip messages."""


@dataclass(frozen=True)
class CgroupRoot:
    """Where new memory cgroups can be made, and which interface they speak."""

    path: Path
    version: CgroupVersion


def _v2_roots(mounts_text: str) -> list[Path]:
    roots = []
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            roots.append(Path(fields[1]))
    return roots


def find_root(*, mounts_path: Path = Path("/proc/self/mounts")) -> CgroupRoot:
    """Pick a place to create memory cgroups, preferring v2; raise `CgroupUnavailable` with the reason."""
    reasons: list[str] = []
    try:
        mounts = mounts_path.read_text()
    except OSError as exc:
        raise CgroupUnavailable(f"cannot read {mounts_path}: {exc}") from exc
    for root in _v2_roots(mounts):
        controllers = (root / "cgroup.subtree_control")
        try:
            enabled = controllers.read_text().split()
        except OSError as exc:
            reasons.append(f"cgroup2 at {root}: {exc}")
            continue
        if "memory" in enabled and os.access(root, os.W_OK):
            return CgroupRoot(root, 2)
        reasons.append(f"cgroup2 at {root} has no memory controller enabled for children")
    if (V1_ROOT / "memory.limit_in_bytes").exists():
        if os.access(V1_ROOT, os.W_OK):
            return CgroupRoot(V1_ROOT, 1)
        reasons.append(f"{V1_ROOT} is not writable (not root, or mounted read-only)")
    else:
        reasons.append(f"no cgroup v1 memory hierarchy at {V1_ROOT}")
    raise CgroupUnavailable("; ".join(reasons))


class MemoryCgroup:
    """A memory cgroup made for one run and removed afterwards (a context manager).

    ``limit_bytes=None`` leaves it uncapped, which is still useful for measuring a
    run's peak. Swap is disabled where the interface allows, so that a limit
    means an OOM kill and not a slow swap storm.
    """

    def __init__(self, *, limit_bytes: int | None = None, prefix: str = "podmortem",
                 root: CgroupRoot | None = None) -> None:
        self.root = root if root is not None else find_root()
        self.name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.path = self.root.path / self.name
        self.limit_bytes = limit_bytes

    @property
    def version(self) -> CgroupVersion:
        return self.root.version

    # -- life cycle -------------------------------------------------------------------------------

    def create(self) -> MemoryCgroup:
        try:
            self.path.mkdir()
        except OSError as exc:
            raise CgroupUnavailable(f"cannot create {self.path}: {exc}") from exc
        try:
            if self.version == 1:
                # No swappiness write: newer kernels log a warning for it, and a limit
                # without memsw still ends in an OOM kill once swap is full or absent.
                if self.limit_bytes is not None:
                    self._write("memory.limit_in_bytes", str(self.limit_bytes))
            else:
                self._write("memory.swap.max", "0", optional=True)
                if self.limit_bytes is not None:
                    self._write("memory.max", str(self.limit_bytes))
        except BaseException:
            self.remove()
            raise
        return self

    def remove(self, *, timeout: float = 10.0) -> None:
        """Kill what is left inside, then remove the directory (retrying while the kernel drains it)."""
        if not self.path.exists():
            return
        deadline = time.monotonic() + timeout
        while True:
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def __enter__(self) -> MemoryCgroup:
        return self.create()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.remove()

    # -- running ----------------------------------------------------------------------------------

    def popen(self, args: Sequence[str], *, env: Mapping[str, str] | None = None,
              **kwargs: object) -> subprocess.Popen[bytes]:
        """Start ``args`` inside this cgroup. Only the child joins it, never the caller."""
        procs = self.path / "cgroup.procs"
        wrapper = ['/bin/sh', '-c', 'echo $$ > "$0" && exec "$@"', str(procs), *args]
        return subprocess.Popen(wrapper, env=dict(env) if env is not None else None, **kwargs)  # type: ignore[call-overload,no-any-return]

    # -- reading ----------------------------------------------------------------------------------

    def pids(self) -> list[int]:
        try:
            text = (self.path / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(tok) for tok in text.split()]

    def usage_bytes(self) -> int:
        return self._read_int("memory.usage_in_bytes" if self.version == 1 else "memory.current")

    def peak_bytes(self) -> int | None:
        """The cgroup's own high-water mark; None on v2 kernels before 5.19 (no memory.peak)."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        try:
            return self._read_int(name)
        except FileNotFoundError:
            return None

    def limit(self) -> int | None:
        raw = self._read("memory.limit_in_bytes" if self.version == 1 else "memory.max").strip()
        if raw == "max":
            return None
        value = int(raw)
        return None if value >= V1_UNLIMITED_THRESHOLD else value

    def stat(self) -> dict[str, int]:
        """``memory.stat`` as the kernel writes it: original keys, values as printed."""
        result: dict[str, int] = {}
        for line in self._read("memory.stat").splitlines():
            key, _, value = line.partition(" ")
            if value.strip().lstrip("-").isdigit():
                result[key] = int(value)
        return result

    def oom_kills(self) -> int:
        """How many processes the kernel OOM-killed in this cgroup (v1: oom_control, v2: memory.events)."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        for line in self._read(name).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def _read(self, name: str) -> str:
        return (self.path / name).read_text()

    def _read_int(self, name: str) -> int:
        return int(self._read(name).strip())

    def _write(self, name: str, value: str, *, optional: bool = False) -> None:
        try:
            (self.path / name).write_text(value)
        except OSError:
            if not optional:
                raise
