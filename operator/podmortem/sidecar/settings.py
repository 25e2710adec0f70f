"""Everything the sidecar can be told, in one documented place.

The sidecar runs in the training pod as the trainer's user, with the pod's
shared /proc and nothing from the host; tests point ``proc_root`` at a fake tree.
Each field says its unit and why its default is what it is.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

#: Where the kubelet reads a container's termination message unless ``terminationMessagePath`` says else.
DEFAULT_TERMINATION_LOG = Path("/dev/termination-log")


@dataclass(frozen=True)
class SidecarSettings:
    """How one sidecar finds the trainer container, samples it, and where it leaves its evidence."""

    #: The pod's /proc (shared with the other containers by ``shareProcessNamespace: true``).
    proc_root: Path = Path("/proc")

    #: The file the kubelet copies into ``state.terminated.message`` (the container's
    #: ``terminationMessagePath``); at most 4096 bytes are written to it, ever.
    termination_log: Path = DEFAULT_TERMINATION_LOG

    #: Seconds between two samples. 2 s: a DataLoader worker's copy-on-write growth or an epoch's
    #: evaluation takes longer than that, so the last sample before a kill is close to the kill; each
    #: sample is a few dozen small reads (well under 1% of a core). Exits are noticed at once, not at
    #: the next sample: the sidecar waits on the processes themselves (pidfds).
    interval_s: float = 2.0

    #: Samples kept (a ring; the oldest go first). 64 x 2 s: two minutes of trend, a few KiB.
    ring_size: int = 64

    #: The trainer container's cgroup as ``/proc/<pid>/cgroup`` shows it to the sidecar; None: found by
    #: ``comm``, else as the lowest pid outside the sidecar's own cgroup (see `podmortem.sidecar.container`).
    container_cgroup: str | None = None

    #: A pattern (whole name, Python ``re``) of one of the trainer's processes' names (``comm``, 15
    #: characters at most); None: any process outside the sidecar's own cgroup.
    comm: re.Pattern[str] | None = None

    #: Processes listed in the evidence, largest PSS first; the rest are counted.
    top: int = 8

    #: Usage samples given as the trend before the kill: 8 x 2 s, the last 16 seconds.
    trend: int = 8

    #: This process's pid as ``proc_root`` numbers it (tests with a fake tree give the fake one).
    own_pid: int = field(default_factory=os.getpid)

    #: Processes whose PSS a sample reads: the trainer and the largest by resident size (smaps_rollup
    #: walks a process's page tables; the trainer chooses how many processes it has). 16: twice `top`.
    sampled: int = 16

    #: Seconds one look may spend classifying new pids, and one sample choosing the largest: the
    #: sidecar's CPU stays bounded (goal: 5% of a core at 20,000 processes) whatever the count.
    look_budget_s: float = 0.05

    #: Seconds between two looks that exits (not a due sample) trigger, on average: 4 may come at once
    #: (a kill, then the workers going after it), then no more than one per gap, so a trainer whose
    #: processes exit by the thousand cannot make the sidecar look more than 4 times a second.
    min_look_gap_s: float = 0.25

    @property
    def real_proc(self) -> bool:
        """Whether ``proc_root`` is this kernel's /proc: pidfds and cgroup-filesystem checks apply
        (test trees of plain files are neither)."""
        return os.path.realpath(self.proc_root) == os.path.realpath("/proc")

    def __post_init__(self) -> None:
        if not self.interval_s > 0:
            raise ValueError(f"interval_s must be above 0, not {self.interval_s}")
        if self.ring_size < 1 or self.top < 0 or self.trend < 0 or self.sampled < 1:
            raise ValueError("ring_size must be at least 1, top and trend not negative")
