"""The memory timeline of a failure report as one inline SVG: usage, limit, epochs, processes, the kill.

Pure: series in, SVG text out, so the report page, ``podmortem report`` and a file next to
the store draw the same picture. The x axis is UTC time and the y axis bytes with ticks at
binary units (MiB, GiB). Every marker carries its time in ``data-t`` and the plot its own
mapping (``data-t0``/``data-t1`` to ``data-x0``/``data-x1``), so a test (or a person with
the page's source) can check that the kill marker sits at the kill time.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from podmortem.reports.timeline_model import ProcessPoint, Timeline
from podmortem.reports.times import rfc3339
from podmortem.reports.units import human_bytes

WIDTH = 760
HEIGHT = 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 40
#: Colours of the stacked per-process bands (the trainer first, then its workers).
BAND_COLOURS = ("#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#b279a2", "#9d755d", "#bab0ac")


def axis_label(value: int) -> str:
    """``3221225472`` → ``"3 GiB"``: a tick label in the largest binary unit, one decimal at most."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            text = f"{value / size:.1f}".removesuffix(".0")
            return f"{text} {unit}"
    return f"{value} B"


def _nice_step(top: int, ticks: int = 5) -> int:
    """A tick step of 1, 2, 4 or 8 times a power of 1024 (and 16 ... 512 between), so labels read whole."""
    raw = max(top / ticks, 1)
    step = 1
    while step < raw:
        step *= 2
    return step


def _time_step(span_s: float) -> float:
    for step in (1, 5, 10, 30, 60, 300, 600, 1800, 3600, 7200, 21600, 43200, 86400):
        if span_s / step <= 6:
            return step
    return 86400 * max(1, int(span_s / 86400 / 6) + 1)


@dataclass(frozen=True)
class Scale:
    """Maps times and bytes to SVG coordinates."""

    t0: float
    t1: float
    top_bytes: int

    def x(self, at: datetime) -> float:
        span = (self.t1 - self.t0) or 1.0
        return LEFT + (at.timestamp() - self.t0) / span * (WIDTH - LEFT - RIGHT)

    def y(self, value: float) -> float:
        return TOP + (1 - value / (self.top_bytes or 1)) * (HEIGHT - TOP - BOTTOM)


def scale_of(tl: Timeline) -> Scale | None:
    """The mapping, or None when nothing has bytes (only markers: a kill time, a last line)."""
    times = tl.times()
    if not times or not tl.has_bytes():
        return None
    t0 = min(t.timestamp() for t in times)
    t1 = max(t.timestamp() for t in times)
    if t1 - t0 < 1:
        t0, t1 = t0 - 30, t1 + 30
    values = [v for _, v in tl.usage] + [e.peak_bytes for e in tl.epochs]
    values += [sum(p.pss.values()) for p in tl.processes]
    if tl.limit_bytes:
        values.append(tl.limit_bytes)
    if tl.projection is not None:
        values.append(tl.projection.end_bytes)
    top = max(values, default=1) or 1
    step = _nice_step(top)
    return Scale(t0=t0, t1=t1, top_bytes=-(-int(top * 1.05) // step) * step)


def _f(v: float) -> str:
    return f"{v:.1f}"


def _marker(sc: Scale, at: datetime, cls: str, label: str, colour: str, dash: str = "", row: int = 0) -> str:
    x = _f(sc.x(at))
    d = f' stroke-dasharray="{dash}"' if dash else ""
    return (
        f'<g class="{cls}" data-t="{rfc3339(at)}"><line x1="{x}" x2="{x}" y1="{TOP}" y2="{HEIGHT - BOTTOM}" '
        f'stroke="{colour}" stroke-width="2"{d}/><text x="{x}" y="{TOP + 10 + 12 * row}" font-size="10" '
        f'fill="{colour}" text-anchor="end" dx="-3">{html.escape(label)}</text>'
        f"<title>{html.escape(label)} at {rfc3339(at)} UTC</title></g>"
    )


def _process_bands(sc: Scale, points: Sequence[ProcessPoint]) -> list[str]:
    """Stacked PSS bands: one polygon per process label, over the samples where it existed (0 elsewhere)."""
    labels: list[str] = []
    for p in points:
        for label in p.pss:
            if label not in labels:
                labels.append(label)
    out: list[str] = []
    below = [0] * len(points)
    for i, label in enumerate(labels):
        upper = [b + p.pss.get(label, 0) for b, p in zip(below, points, strict=True)]
        xs = [_f(sc.x(p.at)) for p in points]
        top_pts = " ".join(f"{x},{_f(sc.y(u))}" for x, u in zip(xs, upper, strict=True))
        low_pts = " ".join(f"{x},{_f(sc.y(b))}" for x, b in reversed(list(zip(xs, below, strict=True))))
        colour = BAND_COLOURS[i % len(BAND_COLOURS)]
        out.append(
            f'<polygon class="pss" data-process="{html.escape(label)}" points="{top_pts} {low_pts}" '
            f'fill="{colour}" fill-opacity="0.45" stroke="none"><title>PSS of {html.escape(label)}</title>'
            "</polygon>"
        )
        below = upper
    return out


def legend_of(tl: Timeline) -> list[tuple[str, str]]:
    """(colour, words) for each series shown, for the page's legend under the picture."""
    out: list[tuple[str, str]] = []
    if tl.usage:
        out.append(("#222", f"pod memory usage ({tl.usage_source or 'source not named'})"))
    if tl.limit_bytes:
        out.append(("#c00", f"limit {human_bytes(tl.limit_bytes)}"))
    if tl.epochs:
        out.append(("#6a3d9a", "per-epoch peak (memory lines)"))
    labels: list[str] = []
    for p in tl.processes:
        labels += [label for label in p.pss if label not in labels]
    for i, label in enumerate(labels):
        out.append((BAND_COLOURS[i % len(BAND_COLOURS)], f"PSS of {label}"))
    if tl.kill_at is not None:
        out.append(("#c00", f"kill at {rfc3339(tl.kill_at)} UTC"))
    if tl.last_line_at is not None:
        out.append(("#2a7", f"last log line at {rfc3339(tl.last_line_at)} UTC"))
    if tl.restarts:
        out.append(("#888", f"{len(tl.restarts)} restart(s)"))
    if tl.projection is not None:
        out.append(
            ("#e08", "early-warning projection" + (f": {tl.projection.text}" if tl.projection.text else ""))
        )
    return out


def svg(tl: Timeline, *, title: str = "memory timeline") -> str:
    """The whole ``<svg>`` element (responsive: it scales to the page width)."""
    sc = scale_of(tl)
    head = (
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-label="{html.escape(title)}" preserveAspectRatio="xMidYMid meet"'
    )
    if sc is None:
        return (
            head + f'><text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">no memory samples: '
            "nothing to draw</text></svg>"
        )
    parts = [
        head + f' data-t0="{sc.t0:.3f}" data-t1="{sc.t1:.3f}" data-x0="{LEFT}" data-x1="{WIDTH - RIGHT}">',
        f"<title>{html.escape(title)}</title>",
        f'<rect x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" height="{HEIGHT - TOP - BOTTOM}" '
        'fill="#fafafa" stroke="#ccc"/>',
    ]
    step = _nice_step(sc.top_bytes)
    value = 0
    while value <= sc.top_bytes:
        y = _f(sc.y(value))
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y}" y2="{y}" stroke="#e5e5e5"/>'
            f'<text x="{LEFT - 4}" y="{y}" font-size="10" text-anchor="end" dy="3">{axis_label(value)}</text>'
        )
        value += step
    tstep = _time_step(sc.t1 - sc.t0)
    tick = (int(sc.t0 // tstep) + 1) * tstep
    while tick <= sc.t1:
        at = datetime.fromtimestamp(tick, UTC)
        x = _f(sc.x(at))
        label = at.strftime("%H:%M:%S" if tstep < 60 else "%H:%M" if tstep < 86400 else "%m-%d")
        parts.append(
            f'<line x1="{x}" x2="{x}" y1="{HEIGHT - BOTTOM}" y2="{HEIGHT - BOTTOM + 4}" stroke="#888"/>'
            f'<text x="{x}" y="{HEIGHT - BOTTOM + 15}" font-size="10" text-anchor="middle">{label}</text>'
        )
        tick += tstep
    first = datetime.fromtimestamp(sc.t0, UTC)
    parts.append(
        f'<text x="{LEFT}" y="{HEIGHT - 6}" font-size="10">UTC, from {first.strftime("%Y-%m-%d %H:%M:%S")}'
        "</text>"
    )
    if tl.processes:
        parts += _process_bands(sc, tl.processes)
    if tl.limit_bytes:
        y = _f(sc.y(tl.limit_bytes))
        parts.append(
            f'<line class="limit" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y}" y2="{y}" stroke="#c00" '
            f'stroke-dasharray="6 3"><title>limit {human_bytes(tl.limit_bytes)}</title></line>'
        )
    if tl.usage:
        pts = " ".join(f"{_f(sc.x(t))},{_f(sc.y(v))}" for t, v in tl.usage)
        parts.append(f'<polyline class="usage" points="{pts}" fill="none" stroke="#222" stroke-width="1.5"/>')
    for e in tl.epochs:
        parts.append(
            f'<circle class="epoch" data-t="{rfc3339(e.at)}" cx="{_f(sc.x(e.at))}" '
            f'cy="{_f(sc.y(e.peak_bytes))}" '
            f'r="3.5" fill="#6a3d9a"><title>epoch {e.epoch}: peak {human_bytes(e.peak_bytes)}</title>'
            "</circle>"
        )
    if tl.projection is not None:
        p = tl.projection
        parts.append(
            f'<line class="projection" x1="{_f(sc.x(p.start))}" y1="{_f(sc.y(p.start_bytes))}" '
            f'x2="{_f(sc.x(p.end))}" y2="{_f(sc.y(p.end_bytes))}" stroke="#e08" stroke-dasharray="4 3">'
            f"<title>{html.escape(p.text or 'projection')}</title></line>"
        )
    for at in tl.restarts:
        parts.append(_marker(sc, at, "restart", "restart", "#888", "2 2", row=2))
    if tl.last_line_at is not None:
        parts.append(_marker(sc, tl.last_line_at, "last-line", "last line", "#2a7", "3 2", row=1))
    if tl.kill_at is not None:
        parts.append(_marker(sc, tl.kill_at, "kill", "kill", "#c00"))
    parts.append("</svg>")
    return "".join(parts)
