"""The early warning per rank, and the job's ``MemoryPressure`` from all of them.

Each pod (and container) that prints memory lines has its own peaks and its own projection: in a
multi-pod job the ranks' lines arrive interleaved, and one line fitted through all of them has the
slope of nothing (rank 0 at 10 GiB and rank 2 at 20 GiB alternating look like wild swings, or like
steady growth that no rank has). The job is under pressure while any rank projects over its limit;
the condition names the most urgent rank and counts the others. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from podmortem.memory_line import projection

#: Other pressing ranks named in the job's message after the most urgent one (the rest are counted).
MAX_NAMED = 3


@dataclass
class _Source:
    """One pod's container that prints memory lines."""

    pod: str
    container: str
    rank: int | None
    peaks: list[projection.EpochPeak] = field(default_factory=list)
    pressure: projection.MemoryPressure | None = None


@dataclass(frozen=True)
class Change:
    """What one memory line changed at the job level (None from `JobPressure.observe`: nothing)."""

    #: The job is under pressure after this line.
    on: bool
    #: ``PeakNearLimit`` / ``ProjectedToCrossLimit`` (on) or ``NoProjectedCrossing`` (off).
    reason: str
    #: The job's condition message: the most urgent rank's, with the others named or counted.
    message: str
    #: The rank that began to project over its limit with this line, and its own message (its Event).
    started: str | None = None


class JobPressure:
    """Per-source peaks and projections of one followed target; the job-level state from them."""

    def __init__(self) -> None:
        self._sources: dict[tuple[str, str], _Source] = {}
        self._message: str | None = None

    @property
    def on(self) -> bool:
        return self._message is not None

    def pressure_of(self, pod_uid: str, container: str) -> projection.MemoryPressure | None:
        """The source's current projection over its limit, if any."""
        source = self._sources.get((pod_uid, container))
        return source.pressure if source is not None else None

    def forget(self, pod_uid: str) -> None:
        """Drop a deleted pod's sources (a restarted rank is a new pod with its own peaks)."""
        for key in [k for k in self._sources if k[0] == pod_uid]:
            del self._sources[key]

    def observe(
        self,
        *,
        pod_uid: str,
        pod: str,
        container: str,
        rank: int | None,
        peak: projection.EpochPeak,
        limit_bytes: int | None,
        within_epochs: int,
        warning_ratio: float,
    ) -> Change | None:
        """Add one epoch peak of one source; the job-level change it makes, or None."""
        key = (pod_uid, container)
        source = self._sources.setdefault(key, _Source(pod=pod, container=container, rank=rank))
        source.rank = rank if rank is not None else source.rank
        source.peaks.append(peak)
        del source.peaks[: -projection.WINDOW * 2]
        was = source.pressure
        source.pressure = projection.assess(
            source.peaks, limit_bytes=limit_bytes, within_epochs=within_epochs, warning_ratio=warning_ratio
        )
        started = self._label(source) + ": " + source.pressure.message() if (
            source.pressure is not None and was is None
        ) else None
        if (was is None) == (source.pressure is None):
            return None  # this source's state did not change: neither does the job's
        pressing = sorted(
            (s for s in self._sources.values() if s.pressure is not None), key=_urgency
        )
        if not pressing:
            if self._message is None:
                return None
            self._message = None
            return Change(
                on=False,
                reason="NoProjectedCrossing",
                message=f"epoch {peak.epoch}: {self._no_longer(source)}",
            )
        first = pressing[0]
        assert first.pressure is not None
        message = f"{self._label(first)}: {first.pressure.message()}"
        others = [self._label(s) for s in pressing[1:]]
        if others:
            named = ", ".join(others[:MAX_NAMED])
            more = f" and {len(others) - MAX_NAMED} more" if len(others) > MAX_NAMED else ""
            message += f"; also projected over: {named}{more}"
        if message == self._message and started is None:
            return None
        self._message = message
        reason = "PeakNearLimit" if first.pressure.over_ratio else "ProjectedToCrossLimit"
        return Change(on=True, reason=reason, message=message, started=started)

    def _label(self, source: _Source) -> str:
        """``ddp-worker-1 (rank 2)``; the container too when its pod has more than one source."""
        containers = sum(1 for s in self._sources.values() if s.pod == source.pod)
        text = source.pod if containers < 2 else f"{source.pod}/{source.container}"
        return text if source.rank is None else f"{text} (rank {source.rank})"

    def _no_longer(self, last: _Source) -> str:
        """What ended, said for one pod or for a job of several."""
        if len({s.pod for s in self._sources.values()}) < 2:
            return "the peak is no longer projected to cross the limit"
        return f"{self._label(last)} is no longer projected to cross its limit, and no other rank is"


def _urgency(source: _Source) -> tuple[int, float, int]:
    """Already near the limit first, then the fewest epochs to it, then by rank."""
    p = source.pressure
    assert p is not None
    left = p.epochs_to_limit if p.epochs_to_limit is not None else float("inf")
    return (0 if p.over_ratio else 1, left, source.rank if source.rank is not None else 1 << 30)


#: A pod's projection line on its report's timeline: start ns, bytes, end ns, bytes, its label.
ProjectionLine = tuple[int, int, int, int, str]


def projection_line(
    pressure: projection.MemoryPressure, *, at_ns: int, epoch_s: float | None
) -> ProjectionLine | None:
    """The projection as a line for the timeline: (start ns, start bytes, end ns, end bytes, text).

    From the last epoch's peak (printed at ``at_ns``) to the limit, ``epochs_to_limit`` epochs of
    ``epoch_s`` seconds later; None when the peak is not growing or the epoch length is unknown.
    """
    if pressure.epochs_to_limit is None or not epoch_s or epoch_s <= 0:
        return None
    end_ns = at_ns + int(pressure.epochs_to_limit * epoch_s * 1e9)
    text = (f"projected to reach the limit in {pressure.epochs_to_limit:.1f} epochs "
            f"(epoch {pressure.crossing_epoch})")
    return at_ns, pressure.peak_bytes, end_ns, pressure.limit_bytes, text


def epoch_seconds(seen: list[tuple[int, int]]) -> float | None:
    """Seconds per epoch from the (epoch, ns) of the last memory lines of one source."""
    if len(seen) < 2:
        return None
    (e1, t1), (e2, t2) = seen[-2], seen[-1]
    if e2 <= e1 or t2 <= t1:
        return None
    return (t2 - t1) / 1e9 / (e2 - e1)
