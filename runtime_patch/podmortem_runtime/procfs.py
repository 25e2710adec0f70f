"""Readers for the few /proc files the memory line needs.

Kept apart from the line's formatting so each reader can be fed recorded file
text in tests, and so the cgroup and process views stay separate: the main
process's VmRSS cannot show a fork copy held by its workers, their PSS can.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessMemory:
    """One process's resident memory from ``/proc/PID/status``, in bytes."""

    rss_bytes: int
    """VmRSS: resident now."""
    peak_bytes: int
    """VmHWM: the most that was ever resident at once (the kernel's high-water mark)."""
    anon_bytes: int | None
    """RssAnon: private anonymous memory, what a fork can copy; None on kernels without it."""


def parse_status(text: str) -> ProcessMemory:
    """Read VmRSS, VmHWM and RssAnon (printed in kB) out of ``/proc/PID/status`` text."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon"):
            number, _, unit = rest.strip().partition(" ")
            values[key] = int(number) * (1024 if unit.strip() == "kB" else 1)
    if "VmRSS" not in values:
        raise ValueError("no VmRSS in /proc/PID/status (a kernel thread, or not a status file)")
    return ProcessMemory(
        rss_bytes=values["VmRSS"],
        peak_bytes=values.get("VmHWM", values["VmRSS"]),
        anon_bytes=values.get("RssAnon"),
    )


def read_status(pid: int | str = "self", *, proc: Path = PROC) -> ProcessMemory:
    return parse_status((proc / str(pid) / "status").read_text())


def parse_smaps_rollup_pss(text: str) -> int:
    """The ``Pss:`` total (kB in the file) from ``/proc/PID/smaps_rollup`` text, in bytes."""
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    raise ValueError("no Pss: line in smaps_rollup text")


def read_pss(pid: int, *, proc: Path = PROC) -> int | None:
    """A process's PSS in bytes, or None if it is gone or not ours to read."""
    try:
        return parse_smaps_rollup_pss((proc / str(pid) / "smaps_rollup").read_text())
    except (OSError, ValueError):
        return None


def parse_ppid(stat_text: str) -> int:
    """The parent pid from ``/proc/PID/stat`` (the command name may hold spaces and parentheses)."""
    return int(stat_text[stat_text.rindex(")") + 2 :].split()[1])


def descendant_pids(pid: int | None = None, *, proc: Path = PROC) -> list[int]:
    """Every live descendant of ``pid`` (default: this process), children before grandchildren.

    Descendants and not just children, because forkserver workers are children
    of the fork server, itself a child of the trainer.
    """
    root = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    try:
        entries = list(proc.iterdir())
    except OSError:
        return []
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            ppid = parse_ppid((entry / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue  # exited while we looked
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    frontier = [root]
    while frontier:
        nxt: list[int] = []
        for parent in frontier:
            for child in sorted(children.get(parent, ())):
                found.append(child)
                nxt.append(child)
        frontier = nxt
    return found
