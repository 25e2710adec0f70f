"""Noticing an OOM kill from inside the pod: the OOM-kill counter rises and a process vanishes.

The sidecar cannot read the kernel's OOM record (that needs the host's kernel
log), but the container's own cgroup counts its kills, and the shared /proc shows
which process went. The kernel counts a kill before the victim exits, so a watch
that looks at the processes first and the counter second never sees a victim gone
with the counter not yet risen; the other way round (the counter up, nothing gone
yet) is normal for the few milliseconds the victim takes to exit, and is paired
with the next process that vanishes. Processes that exit with no kill counted are
remembered for `PAIRING_WINDOW_S`, in case the counter is read late.

The victim is the largest (by its last PSS) of those gone, leaving out any that went
together with their parent: a DataLoader worker dies with its trainer (PR_SET_PDEATHSIG, the
runtime killing the rest of the container), and a forked worker's PSS holds half of the
trainer's pages, so on PSS alone it would be named for the trainer the kernel really killed.
A worker that the kernel kills goes alone: its trainer notices and exits later, after a look
that has already paired the kill. Pure: the caller reads /proc and the cgroup.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from podmortem.sidecar.sampling import ProcessSample

#: Seconds a vanished process stays a possible victim of a kill counted after it went.
PAIRING_WINDOW_S = 10.0


@dataclass(frozen=True)
class Kill:
    """One kill as the sidecar saw it: who went, the counter around it, when it was noticed (monotonic s)."""

    victim: ProcessSample
    #: Every pid that vanished with it, the victim included, smallest first.
    gone: tuple[int, ...]
    counter_before: int
    counter_after: int
    noticed_at: float


@dataclass
class KillWatch:
    """Pairs rises of the OOM-kill counter with vanished processes; `observe` after each look."""

    #: The counter at the first reading, and at the last one before the latest rise.
    first_counter: int | None = None
    counter: int | None = None
    kills: list[Kill] = field(default_factory=list)
    #: pid → the process as the last sample that had it saw it.
    _known: dict[int, ProcessSample] = field(default_factory=dict)
    #: Vanished, no kill counted yet: pid → (last seen, when it was found gone).
    _gone: dict[int, tuple[ProcessSample, float]] = field(default_factory=dict)
    #: The counter rose with nothing gone yet: the counter before that rise.
    _rise_from: int | None = None

    def saw(self, processes: tuple[ProcessSample, ...]) -> None:
        """A sample's processes: the latest PSS of each (a victim is the largest by its last PSS)."""
        for process in processes:
            self._known[process.pid] = process

    @property
    def known(self) -> tuple[int, ...]:
        """The pids whose exit this watch would notice (those of the samples)."""
        return tuple(self._known)

    def counter_read(self, counter: int | None) -> None:
        """A reading of the counter alone, with no look at the processes: a rise it shows is paired
        with the processes the next `observe` finds gone, even where that one cannot read the counter.

        The runtime removes the container's cgroup soon after its last process exits, so the look that
        finds the victim gone may find no counter left to read; a reading taken when the exit woke the
        sidecar, before that look, has the rise (the kernel counts a kill before the victim exits).
        """
        if counter is None:
            return
        if self.first_counter is None:
            self.first_counter = self.counter = counter
            return
        assert self.counter is not None
        if counter > self.counter and self._rise_from is None:
            self._rise_from = self.counter
        self.counter = max(self.counter, counter)

    def observe(self, *, running: Collection[int], counter: int | None, now: float) -> Kill | None:
        """The running pids (read first), then the counter (read second); the kill this completes, if any.

        ``running`` need hold only the running ones among `known`. A counter of None (the cgroup gone
        or unreadable) still completes a kill whose rise an earlier reading saw."""
        for pid in [p for p in self._known if p not in running]:
            self._gone[pid] = (self._known.pop(pid), now)
        for pid in [p for p, (_, at) in self._gone.items() if now - at > PAIRING_WINDOW_S]:
            del self._gone[pid]
        if counter is None and self.first_counter is None:
            return None
        if self.first_counter is None:
            self.counter_read(counter)
            self._gone.clear()  # gone before the first reading: not paired with kills it did not see
            return None
        self.counter_read(counter)
        if self._rise_from is None or not self._gone:
            return None
        assert self.counter is not None
        gone = [process for process, _ in self._gone.values()]
        victim = choose_victim(gone)
        kill = Kill(
            victim=victim,
            gone=tuple(sorted(p.pid for p in gone)),
            counter_before=self._rise_from,
            counter_after=self.counter,
            noticed_at=now,
        )
        self.kills.append(kill)
        self._gone.clear()
        self._rise_from = None
        return kill


def choose_victim(gone: list[ProcessSample]) -> ProcessSample:
    """The largest by last PSS of the processes gone whose parent did not go with them (else of all)."""
    pids = {p.pid for p in gone}
    first = [p for p in gone if p.ppid not in pids] or gone
    return max(first, key=lambda p: (p.pss_bytes if p.pss_bytes is not None else -1, -p.pid))
