"""The sidecar's state between looks: the container, its cgroup, the samples, the kills, and the evidence.

`ContainerWatch.look` is one look at the pod: find the trainer container's running
processes, sample them when a sample is due, read the cgroup's counter, and pair a
rise with what vanished. It does no waiting and owns no clock, so tests step it on
fake /proc and cgroup trees; `podmortem.sidecar.main` calls it on a timer and at
every exit. `ContainerWatch.evidence` turns what it has into the document the
operator reads.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from podmortem import __version__
from podmortem.reports import sidecar_document as ev
from podmortem.sidecar import container as containers
from podmortem.sidecar.cgroup import CgroupUnreachable, OpenCgroup
from podmortem.sidecar.kill_watch import Kill, KillWatch
from podmortem.sidecar.sampling import (
    CgroupNumbers,
    LargestProcesses,
    ProcessSample,
    Sample,
    SampleRing,
    read_numbers,
    take_sample,
)
from podmortem.sidecar.settings import SidecarSettings

logger = logging.getLogger("podmortem.sidecar")

Reason = Literal["trainer-gone", "sigterm", "failed"]


@dataclass(frozen=True)
class AtKill:
    """A kill, with the cgroup as read when it was noticed (peak, counter, limit hits after the kill)."""

    kill: Kill
    numbers: CgroupNumbers


class ContainerWatch:
    """One sidecar's view of the trainer container, built up one `look` at a time."""

    def __init__(self, settings: SidecarSettings) -> None:
        self.settings = settings
        self.selection = containers.Selection(
            own_pid=settings.own_pid, container_cgroup=settings.container_cgroup, comm=settings.comm
        )
        self.ring = SampleRing(settings.ring_size)
        self.index = containers.PidIndex(budget_s=settings.look_budget_s)
        self.picker = LargestProcesses(
            keep=max(settings.sampled, settings.top), budget_s=settings.look_budget_s
        )
        #: The processes the last sample read (the trainer and the largest): the ones whose exits
        #: are waited on (a bounded number of pidfds, never one per process).
        self.watched: tuple[int, ...] = ()
        self.kills = KillWatch()
        self.cgroup: OpenCgroup | None = None
        #: The container's cgroup once found (fixed from then on), and its running pids at the last look.
        self.found: containers.MemoryCgroupLine | None = None
        self.pids: tuple[int, ...] = ()
        self.first_kill: AtKill | None = None
        #: The last cgroup reading that worked (the end's numbers, when there was no kill).
        self.latest: CgroupNumbers | None = None
        self.notes: dict[str, str] = {}

    @property
    def seen(self) -> bool:
        """Whether the trainer container has been found (its processes running at some look)."""
        return self.found is not None

    def look(self, *, now: float, sample: bool) -> bool:
        """Look at the pod once; False when the trainer container was found before and nothing of it runs.

        False only from evidence: a /proc listing that was read, every pid in it classified, and none
        of them the container's. A listing that fails (EMFILE, ENOMEM...) concludes nothing.
        """
        try:
            found = containers.find_container(
                self.settings.proc_root, self.selection, cgroup=self.found, index=self.index
            )
        except containers.ListingFailed as exc:
            self.notes["listing"] = f"{exc.strerror}: the trainer's processes unknown at some looks"
            logger.warning("%s", exc.strerror)
            if self.found is not None:
                running = _running(self.kills.known, self.pids)
                self._observe(running=running, numbers=read_numbers(self.cgroup), now=now)
            return True
        if found is not None and not found.complete:
            self.notes["pending"] = "too many new processes at some looks to classify them all at once"
        if found is None:
            self.pids = ()
            if self.found is None:
                return True  # not started yet: a native sidecar starts before the trainer
            self._observe(running=set(), numbers=read_numbers(self.cgroup), now=now)
            return False
        if self.found is None:
            if not found.pids:
                return True
            self._start(found)
        if found.others:
            self.notes["others"] = f"{found.others} processes of other containers left out"
        self.pids = found.pids
        if sample:
            taken = take_sample(cgroup=self.cgroup, proc_root=self.settings.proc_root, found=found, now=now,
                                picker=self.picker)
            self.watched = tuple(p.pid for p in taken.processes)
            if len(found.pids) > len(taken.processes):
                self.notes["sampled"] = (f"{len(found.pids)} processes: the PSS of the largest "
                                         f"{len(taken.processes)} by resident size read")
            self.ring.add(taken)
            self.kills.saw(taken.processes)
            if taken.unreadable:
                self.notes["unreadable"] = f"{taken.unreadable} processes' smaps_rollup unreadable"
            numbers = taken.cgroup
        else:
            numbers = read_numbers(self.cgroup)
        self._observe(running=_running(self.kills.known, found.pids), numbers=numbers, now=now)
        return True

    def glance(self) -> None:
        """Read the OOM-kill counter alone, at once: an exit woke the sidecar, and the look that follows
        may come after the runtime has removed the cgroup (`KillWatch.counter_read`)."""
        if self.cgroup is not None:
            self.kills.counter_read(self.cgroup.oom_kills())

    def _start(self, found: containers.Container) -> None:
        self.found = found.cgroup
        try:
            self.cgroup = OpenCgroup.open(
                self.settings.proc_root, found.pids[0], found.cgroup, verify=self.settings.real_proc
            )
        except CgroupUnreachable as exc:
            self.notes["cgroup"] = f"cgroup unreadable: {exc}"
            logger.warning("trainer container's memory cgroup unreadable, sampling processes only: %s", exc)
        more = len(found.pids) - 8
        shown = ", ".join(map(str, found.pids[:8])) + (f" and {more} more" if more > 0 else "")
        logger.info(
            "trainer container found: cgroup v%d %s, processes %s%s",
            found.cgroup.version, found.cgroup.path, f"[{shown}]",
            f", read at {self.cgroup.where}" if self.cgroup is not None else "",
        )

    def _observe(self, *, running: set[int], numbers: CgroupNumbers, now: float) -> None:
        if numbers.error is None:
            self.latest = numbers
        elif self.cgroup is not None:
            self.notes["read"] = numbers.error
        kill = self.kills.observe(running=running, counter=numbers.oom_kills, now=now)
        if kill is None:
            return
        victim = kill.victim
        logger.warning(
            "OOM kill: pid %d (%s, %s) PSS %s bytes; OOM-kill counter %d -> %d; gone %s",
            victim.pid, victim.comm, victim.role, victim.pss_bytes, kill.counter_before, kill.counter_after,
            list(kill.gone),
        )
        if self.first_kill is None:
            self.first_kill = AtKill(kill, numbers)

    def close(self) -> None:
        if self.cgroup is not None:
            self.cgroup.close()

    # -- the document --------------------------------------------------------------------------------

    def _base_sample(self) -> Sample | None:
        """The sample the evidence shows: the last one that still had the victim, else the last one."""
        samples = self.ring.up_to(float("inf"))
        if self.first_kill is not None:
            victim = self.first_kill.kill.victim.pid
            for sample in reversed(samples):
                if any(p.pid == victim for p in sample.processes):
                    return sample
        return samples[-1] if samples else None

    def evidence(self, *, reason: Reason, now: float, at: datetime | None = None) -> ev.SidecarDocument:
        """The evidence document for what has been seen so far."""
        s = self.settings
        at = at if at is not None else datetime.now(UTC)
        base = self._base_sample()
        kill = self.first_kill
        after = kill.numbers if kill is not None else self.latest
        mem: ev.Memory | None = None
        top: list[ev.Process] = []
        trend: list[int] = []
        procs = 0
        if base is not None:
            mem = _memory(base, after, age_s=(kill.kill.noticed_at if kill is not None else now) - base.at)
            ranked = sorted(base.processes, key=lambda p: (-(p.pss_bytes or 0), p.pid))
            top = [_process(p) for p in ranked[: min(s.top, ev.MAX_PROCESSES)]]
            procs = max(base.count, len(base.processes))
            usages = [x.cgroup.usage_bytes for x in self.ring.up_to(base.at)]
            trend = [u for u in usages if u is not None][-min(s.trend, ev.MAX_TREND) :] if s.trend else []
        notes = list(self.notes.values())
        if self.found is None:
            notes.insert(0, "no process of the trainer container seen")
        if self.ring.dropped:
            notes.append(f"{self.ring.dropped} older samples dropped")
        return ev.SidecarDocument(
            podmortem=ev.clean_text(__version__, ev.MAX_VERSION),
            reason=reason,
            at=at,
            cgroup=(
                ev.Cgroup(version=self.found.version, path=ev.clean_text(self.found.path, ev.MAX_PATH))
                if self.found is not None else None
            ),
            mem=mem,
            oom=ev.OomCounter(
                before=kill.kill.counter_before if kill is not None else self.kills.first_counter,
                after=self.kills.counter,
            ),
            kill=(
                ev.Kill(
                    victim=_process(kill.kill.victim),
                    gone=list(kill.kill.gone[: ev.MAX_GONE]),
                    at=_wall(at, now, kill.kill.noticed_at),
                )
                if kill is not None else None
            ),
            later_kills=max(0, len(self.kills.kills) - 1),
            top=top,
            procs=procs,
            samples=self.ring.taken,
            interval_s=min(s.interval_s, ev.MAX_SECONDS),
            trend=trend,
            notes=[ev.clean_text(n, ev.MAX_TEXT) for n in notes[: ev.MAX_NOTES]],
        )


def _running(known: tuple[int, ...], pids: tuple[int, ...]) -> set[int]:
    """Those of ``known`` in ``pids`` (sorted): no set of every pid of a container of 20,000."""
    found = set()
    for pid in known:
        at = bisect.bisect_left(pids, pid)
        if at < len(pids) and pids[at] == pid:
            found.add(pid)
    return found


def _wall(at: datetime, now: float, then: float) -> datetime:
    """The wall-clock time of monotonic ``then``, given that monotonic ``now`` is wall-clock ``at``."""
    return at - timedelta(seconds=max(0.0, now - then))


def _process(p: ProcessSample) -> ev.Process:
    return ev.Process(
        pid=p.pid, comm=ev.clean_text(p.comm, ev.MAX_COMM), pss=_bytes(p.pss_bytes), role=p.role
    )


def _bytes(value: int | None) -> int | None:
    return None if value is None or value < 0 else min(value, ev.MAX_INT)


def _memory(base: Sample, after: CgroupNumbers | None, *, age_s: float) -> ev.Memory:
    """Usage and classes from the sample before the kill; peak, limit and hits from the read after it."""
    numbers = base.cgroup
    peaks = [x for x in (numbers.peak_bytes, after.peak_bytes if after else None) if x is not None]
    b = numbers.classes or {}
    return ev.Memory(
        usage=_bytes(numbers.usage_bytes),
        limit=_bytes(after.limit_bytes if after is not None and after.limit_bytes is not None
                     else numbers.limit_bytes),
        peak=_bytes(max(peaks)) if peaks else None,
        limit_hits=_bytes(after.limit_hits if after is not None and after.limit_hits is not None
                          else numbers.limit_hits),
        anon=_bytes(b.get("anon_bytes")),
        file=_bytes(b.get("file_bytes")),
        shmem=_bytes(b.get("shmem_bytes")),
        kernel=_bytes(b.get("kernel_bytes")),
        sock=_bytes(b.get("sock_bytes")),
        swap=_bytes(b.get("swap_bytes")),
        age_s=min(max(0.0, age_s), ev.MAX_SECONDS),
    )
