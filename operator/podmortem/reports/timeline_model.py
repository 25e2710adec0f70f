"""What a memory timeline shows, as plain data: the series, epoch peaks, processes, kill and projection.

The renderer (`podmortem.render.timeline_svg`) draws it; the stored timeline, the reporter and the
page's caller fill it. Kept apart from the renderer so that the report models never import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class EpochPeak:
    """One per-epoch memory line: when it was printed and the peak it reported."""

    at: datetime
    epoch: int
    peak_bytes: int


@dataclass(frozen=True)
class ProcessPoint:
    """One sample's per-process PSS (bytes), keyed by a stable label such as ``python3 (6054)``."""

    at: datetime
    pss: dict[str, int]


@dataclass(frozen=True)
class Projection:
    """The early warning's line: from the last epoch peak to where it reaches the limit."""

    start: datetime
    start_bytes: int
    end: datetime
    end_bytes: int
    text: str = ""


@dataclass
class Timeline:
    """What the picture shows; every part is optional, and the caption says what is missing."""

    usage: list[tuple[datetime, int]] = field(default_factory=list)
    usage_source: str = ""
    limit_bytes: int | None = None
    epochs: list[EpochPeak] = field(default_factory=list)
    processes: list[ProcessPoint] = field(default_factory=list)
    kill_at: datetime | None = None
    restarts: list[datetime] = field(default_factory=list)
    last_line_at: datetime | None = None
    projection: Projection | None = None

    def times(self) -> list[datetime]:
        out = [t for t, _ in self.usage] + [e.at for e in self.epochs] + [p.at for p in self.processes]
        out += [t for t in (self.kill_at, self.last_line_at) if t is not None] + list(self.restarts)
        if self.projection is not None:
            out += [self.projection.start, self.projection.end]
        return out

    def empty(self) -> bool:
        return not (self.usage or self.epochs or self.processes)

    def has_bytes(self) -> bool:
        """Whether anything gives the y axis a scale (a series, a peak, a projection); else no picture."""
        return not self.empty() or self.projection is not None
