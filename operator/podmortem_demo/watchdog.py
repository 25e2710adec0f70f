"""A memory limit enforced from outside, for machines where the demo cannot create a memory cgroup.

Without a writable memory cgroup there is no kernel to OOM-kill the pod, yet
the demo still has to show a job that dies at its limit and one that does not.
This watchdog does what the kernel's memcg OOM killer would, coarsely: it sums
the anonymous PSS of the container's process tree every few milliseconds and,
once the sum passes the limit, SIGKILLs the process with the largest share.
Anonymous (plus shmem) PSS is what a pod's cgroup is charged for such a trainer;
the file pages of Python and its libraries are mostly charged to whoever read
them first, so counting them would kill earlier than the kernel does. The demo says
so in its output and labels the kernel record it then shows as recorded.

The kubelet tells the container so through ``PSS_LIMIT_ENV``: the demo's trainer
then prints the same sum as its pod's memory (not the host cgroup it happens to
sit in), and stops at an allocation that passes the limit until this watchdog
has acted, as a task waits in the kernel's charge path for the OOM killer. A
sampler alone can miss a peak that lasts a few milliseconds on a busy machine.
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path

from podmortem_runtime import procfs

PROC = Path("/proc")
#: Set in the container's environment where no memory cgroup holds it: the limit in bytes that this
#: watchdog enforces on the summed charged PSS of its process tree ("" when there is no limit).
PSS_LIMIT_ENV = "PODMORTEM_DEMO_PSS_LIMIT_BYTES"


def parse_charged_pss(text: str) -> int:
    """``Pss_Anon`` + ``Pss_Shmem`` from smaps_rollup text, in bytes; plain ``Pss`` on kernels before 5.7."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("Pss", "Pss_Anon", "Pss_Shmem"):
            fields[key] = int(rest.split()[0]) * 1024
    if "Pss_Anon" in fields:
        return fields["Pss_Anon"] + fields.get("Pss_Shmem", 0)
    if "Pss" in fields:
        return fields["Pss"]
    raise ValueError("no Pss: line in smaps_rollup text")


def read_charged_pss(pid: int, *, proc: Path = PROC) -> int | None:
    """A process's charged PSS, or None if it is gone (or a zombie) or not ours to read."""
    try:
        return parse_charged_pss((proc / str(pid) / "smaps_rollup").read_text())
    except (OSError, ValueError):
        return None


def tree_charged_pss(root_pid: int, *, proc: Path = PROC) -> dict[int, int]:
    """Charged PSS of ``root_pid`` and each live descendant, bytes (the sum is what the limit is on)."""
    pids = [root_pid, *procfs.descendant_pids(root_pid, proc=proc)]
    sizes = {pid: read_charged_pss(pid, proc=proc) for pid in pids}
    return {pid: size for pid, size in sizes.items() if size is not None}


@dataclass
class Kill:
    """What the watchdog killed, and the charged PSS sum that made it (bytes)."""

    pid: int
    total_pss_bytes: int
    victim_pss_bytes: int


@dataclass
class LimitWatchdog:
    """Polls a process tree's summed PSS against ``limit_bytes`` (a thread; `start`, then `stop`)."""

    root_pid: int
    limit_bytes: int
    #: Seconds between two sums. 20 ms: the trainer grows by at most a few MiB in that time.
    interval_s: float = 0.02
    kill: Kill | None = None
    peak_bytes: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> LimitWatchdog:
        self._thread = threading.Thread(target=self._run, name="podmortem-demo-watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def check_once(self) -> bool:
        """One sum; True once the tree is gone or a process was killed."""
        live = tree_charged_pss(self.root_pid)
        if not live:
            return True
        total = sum(live.values())
        self.peak_bytes = max(self.peak_bytes, total)
        if total <= self.limit_bytes:
            return False
        victim = max(live, key=lambda pid: live[pid])
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.kill = Kill(pid=victim, total_pss_bytes=total, victim_pss_bytes=live[victim])
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.check_once():
                return
            self._stop.wait(self.interval_s)
