"""Warn before the kill: project the per-epoch pod memory peak forward and see if it crosses the limit.

The failure this project exists for grew a little every epoch (a per-proposal
mask kept per validation scene, plus forked workers' copies) until the cgroup
limit was passed hours later. A straight line through the last few epochs'
peaks says, epochs ahead, when that will happen. Pure: no I/O.

The message names each figure for what it is (the epoch's own peak, which the
line is fitted to, and the pod's peak since it started, as ``status.memory``
shows it) in the binary units of ``status.memory.peakOfLimit`` (``227Mi``), so
the condition, its Event and the status agree digit for digit.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

#: Fewest epochs whose peaks must rise, one after another, before a line is drawn through them:
#: two points always make a line, three rising ones make a trend.
MIN_POINTS = 3
#: Most recent epochs the line is fitted to; older ones may predate a change in the job.
WINDOW = 6
GIB = 2**30
_UNITS = (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def short_size(value: float) -> str:
    """``31242766336 -> '29.1Gi'``: binary units, one decimal below 100 (what fits a printer column)."""
    for unit, size in _UNITS:
        if value >= size:
            scaled = value / size
            text = f"{scaled:.1f}".rstrip("0").rstrip(".") if scaled < 100 else f"{scaled:.0f}"
            return f"{text}{unit}"
    return f"{value:.0f}B"


def share(part: int, whole: int) -> str:
    """``'89%'``: the rounding ``status.memory.peakOfLimit`` uses."""
    return f"{part / whole:.0%}"


@dataclass(frozen=True)
class EpochPeak:
    epoch: int
    #: The peak the line is fitted to: the epoch's own peak where the memory line has one, else the
    #: pod's peak since it started.
    peak_bytes: int
    #: The pod's peak since it started (``status.memory.podPeakBytes``), when ``peak_bytes`` is the
    #: epoch's own peak; None when ``peak_bytes`` is that pod peak itself.
    pod_peak_bytes: int | None = None


@dataclass(frozen=True)
class MemoryPressure:
    """Why the condition is raised, with the numbers a person needs to act."""

    epoch: int
    peak_bytes: int
    limit_bytes: int
    #: Least-squares growth of the peak per epoch over the fitted window; 0 when it is not growing.
    growth_bytes_per_epoch: float
    #: Epochs until the peak reaches the limit at that growth; ``None`` when not growing.
    epochs_to_limit: float | None
    #: Raised because the peak already passed ``warning_ratio`` of the limit (not the projection).
    over_ratio: bool
    warning_ratio: float
    #: The pod's peak since it started, from the same memory line (see `EpochPeak.pod_peak_bytes`).
    pod_peak_bytes: int | None = None

    @property
    def crossing_epoch(self) -> int | None:
        if self.epochs_to_limit is None:
            return None
        return self.epoch + max(1, int(-(-self.epochs_to_limit // 1)))

    def message(self) -> str:
        """``epoch 2: epoch peak 220Mi of the 256Mi limit (86%), pod peak so far 227Mi (89%), growing
        80Mi/epoch; projected to cross the limit at epoch 3 (in 0.5 epochs)``."""
        limit = self.limit_bytes
        what = "pod peak" if self.pod_peak_bytes is None else "epoch peak"
        used = (
            f"{what} {short_size(self.peak_bytes)} of the {short_size(limit)} limit "
            f"({share(self.peak_bytes, limit)})"
        )
        pod = self.pod_peak_bytes
        if pod is not None:
            used += f", pod peak so far {short_size(pod)} ({share(pod, limit)})"
        if self.epochs_to_limit is not None:
            return (
                f"epoch {self.epoch}: {used}, growing {short_size(self.growth_bytes_per_epoch)}/epoch; "
                f"projected to cross the limit at epoch {self.crossing_epoch} "
                f"(in {self.epochs_to_limit:.1f} epochs)"
            )
        return f"epoch {self.epoch}: {used}, above the warning ratio {self.warning_ratio:g}"


def assess(
    peaks: Sequence[EpochPeak], *, limit_bytes: int | None, within_epochs: int, warning_ratio: float
) -> MemoryPressure | None:
    """MemoryPressure when the steady growth crosses the limit within ``within_epochs``, or the
    last peak is already above ``warning_ratio`` of the limit; ``None`` otherwise.

    ``peaks`` are in epoch order; repeated epochs keep their last value.
    """
    if not peaks or not limit_bytes or limit_bytes <= 0:
        return None
    by_epoch: dict[int, EpochPeak] = {}
    for p in peaks:
        by_epoch[p.epoch] = p
    points = sorted((epoch, p.peak_bytes) for epoch, p in by_epoch.items())[-WINDOW:]
    last_epoch, last_peak = points[-1]
    slope = _growth(points)
    epochs_left: float | None = None
    if slope > 0:
        epochs_left = max(0.0, (limit_bytes - last_peak) / slope)
    over_ratio = last_peak >= warning_ratio * limit_bytes
    projected = epochs_left is not None and epochs_left <= within_epochs
    if not (projected or over_ratio):
        return None
    return MemoryPressure(
        epoch=last_epoch,
        peak_bytes=last_peak,
        limit_bytes=limit_bytes,
        growth_bytes_per_epoch=max(slope, 0.0),
        epochs_to_limit=epochs_left,
        over_ratio=over_ratio and not projected,
        warning_ratio=warning_ratio,
        pod_peak_bytes=by_epoch[last_epoch].pod_peak_bytes,
    )


def _growth(points: Sequence[tuple[int, int]]) -> float:
    """Slope of the peak per epoch when the last MIN_POINTS peaks rise strictly; else 0."""
    if len(points) < MIN_POINTS:
        return 0.0
    recent = points[-MIN_POINTS:]
    if any(b[1] <= a[1] or b[0] <= a[0] for a, b in itertools.pairwise(recent)):
        return 0.0
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((x - mean_x) ** 2 for x, _ in points)
    if var == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / var
