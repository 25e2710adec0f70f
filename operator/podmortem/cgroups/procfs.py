"""Per-process memory from the host's /proc: PSS and private memory, tolerant of races.

RSS counts a page shared by a forked DataLoader worker in both processes; PSS
splits it, and private memory shows what a copy-on-write fork really duplicated.
``/proc/PID/smaps_rollup`` gives both in one cheap read (Linux 4.14+). Reading
another user's process needs CAP_SYS_PTRACE. A process can exit between listing
the cgroup and reading its files; that is normal and not an error.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path

from podmortem.errors import PodmortemError

KIB = 1024


@dataclass(frozen=True)
class ProcessReading:
    """One process's memory as read from smaps_rollup, in bytes."""

    pid: int
    comm: str
    rss_bytes: int
    pss_bytes: int
    private_bytes: int
    anon_bytes: int
    swap_bytes: int


def parse_smaps_rollup(text: str) -> dict[str, int]:
    """``Key: N kB`` lines of smaps_rollup → {key: bytes}. The header line and odd lines are skipped."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if not sep or " " in key:
            continue
        fields = rest.split()
        if not fields or not fields[0].isdigit():
            continue
        scale = KIB if len(fields) > 1 and fields[1] == "kB" else 1
        values[key] = int(fields[0]) * scale
    return values


class ProcessGone(PodmortemError):
    """The process exited (or was never visible) while it was being read."""


class ProcessUnreadable(PodmortemError):
    """The process exists but its smaps_rollup cannot be read (no CAP_SYS_PTRACE, or a kernel thread)."""


def read_process(proc_root: Path, pid: int) -> ProcessReading:
    """Read one process; raise `ProcessGone` or `ProcessUnreadable` instead of OSError."""
    base = proc_root / str(pid)
    try:
        rollup = (base / "smaps_rollup").read_text()
        comm = (base / "comm").read_text(errors="replace").strip()
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise ProcessGone(pid) from exc
    except PermissionError as exc:
        raise ProcessUnreadable(f"pid {pid}: {exc.strerror} (needs CAP_SYS_PTRACE)") from exc
    except OSError as exc:
        if exc.errno == errno.ESRCH:
            raise ProcessGone(pid) from exc
        raise ProcessUnreadable(f"pid {pid}: {exc}") from exc
    values = parse_smaps_rollup(rollup)
    if "Pss" not in values:
        # A kernel thread, or a zombie: smaps_rollup is empty. Nothing to measure.
        raise ProcessUnreadable(f"pid {pid}: smaps_rollup has no Pss (kernel thread or zombie)")
    return ProcessReading(
        pid=pid,
        comm=comm,
        rss_bytes=values.get("Rss", 0),
        pss_bytes=values["Pss"],
        private_bytes=values.get("Private_Clean", 0) + values.get("Private_Dirty", 0),
        anon_bytes=values.get("Anonymous", 0),
        swap_bytes=values.get("Swap", 0),
    )
