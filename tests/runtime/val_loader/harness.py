"""Runs the workload in a memory cgroup and records what the kernel charged to it.

Shared by the kernel tests and ``bench/val_loader.py``. The peak anonymous
memory (``memory.stat`` rss on v1, anon on v2) has no kernel high-water mark,
so a thread polls it every few milliseconds while the run lasts.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from podmortem_demo import sandbox

WORKLOAD = Path(__file__).with_name("workload.py")
ROOT = Path(__file__).resolve().parents[3]
ANON_KEYS = ("total_rss", "rss", "anon")  # v1 hierarchical, v1 own, v2


def anon_bytes(cg: sandbox.MemoryCgroup) -> int:
    stat = cg.stat()
    for key in ANON_KEYS:
        if key in stat:
            return stat[key]
    raise KeyError(f"no anonymous-memory key in {cg.path}/memory.stat")


@dataclass
class Run:
    variant: str
    returncode: int
    anon_peak_bytes: int
    cgroup_peak_bytes: int | None
    """The kernel's own counter, read while the workload was still alive (after its last line)."""
    oom_kills: int
    wall_s: float
    lines: list[str] = field(default_factory=list)
    stderr: str = ""

    @property
    def memory_lines(self) -> list[str]:
        return [line for line in self.lines if line.startswith("-> memory epoch")]

    @property
    def heap_lines(self) -> list[str]:
        """The trainer's glibc heap after each evaluation (workload.heap_line)."""
        return [line for line in self.lines if line.startswith("heap arena")]


def run_variant(
    cg: sandbox.MemoryCgroup,
    variant: str,
    *,
    args: tuple[str, ...] = (),
    timeout_s: float = 120.0,
    poll_s: float = 0.005,
) -> Run:
    env = {"PYTHONPATH": f"{ROOT / 'runtime_patch'}", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    peak = [0]
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            with contextlib.suppress(OSError, KeyError):
                peak[0] = max(peak[0], anon_bytes(cg))
            done.wait(poll_s)

    poller = threading.Thread(target=poll, daemon=True)
    started = time.monotonic()
    proc = cg.popen(
        [sys.executable, str(WORKLOAD), variant, "--hold", *args],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    poller.start()
    assert proc.stdout is not None and proc.stdin is not None and proc.stderr is not None
    lines: list[str] = []
    cgroup_peak: int | None = None
    wall = 0.0
    try:
        deadline = started + timeout_s
        for raw in proc.stdout:
            line = raw.decode().rstrip("\n")
            lines.append(line)
            if line.startswith("wall "):
                wall = time.monotonic() - started
                cgroup_peak = cg.peak_bytes()
                break
            if time.monotonic() > deadline:
                break
        proc.stdin.close()
        stderr = proc.stderr.read().decode(errors="replace")
        returncode = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        done.set()
        poller.join()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            pipe.close()
    return Run(
        variant=variant,
        returncode=returncode,
        anon_peak_bytes=peak[0],
        cgroup_peak_bytes=cgroup_peak if cgroup_peak is not None else cg.peak_bytes(),
        oom_kills=cg.oom_kills(),
        wall_s=wall or time.monotonic() - started,
        lines=lines,
        stderr=stderr[-4000:],
    )
