"""The report's timeline in a compact, bounded form that can be stored and drawn again later.

The agent's samples (with per-process PSS), the pod's restart times and the early
warning's projection live only in the operator's memory when a report is made;
the stored report (TrainingJob status, capped at ``status_report_max_bytes``)
keeps none of them, so a page served later drew no process bands. This module
turns them into a JSON document of at most ``MAX_POINTS`` points with two PSS
groups per point (``trainer``: the pod's lowest pid, the process that forks;
``workers``: the sum of the others), and back into what the page renders.
At 360 points the document is ~30 KiB: too big for the status or a 4 KiB
annotation, so it is meant for a file next to the job's logs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from podmortem.files import write_json_atomic, write_text_atomic
from podmortem.reports.memory import MemorySample, ProcessMemory
from podmortem.reports.timeline_model import Projection
from podmortem.reports.times import rfc3339

MAX_POINTS = 360
VERSION = 1
JSON_NAME = "report-timeline.json"
SVG_NAME = "timeline.svg"
#: The pid of an expanded PSS group (``trainer``, ``workers``): not a process, shown by name.
GROUP_PID = 0


def downsample(samples: Sequence[MemorySample], max_points: int = MAX_POINTS) -> list[MemorySample]:
    """Evenly spaced samples, at most ``max_points``, the first and the last always kept."""
    if max_points < 2 or len(samples) <= max_points:
        return list(samples[-max_points:]) if max_points < 2 else list(samples)
    last = len(samples) - 1
    picks = sorted({round(i * last / (max_points - 1)) for i in range(max_points)})
    return [samples[i] for i in picks]


def _groups(processes: Sequence[ProcessMemory]) -> dict[str, int]:
    with_pss = [p for p in processes if p.pss_bytes]
    if not with_pss:
        return {}
    trainer = min(with_pss, key=lambda p: p.pid)
    out = {"trainer": int(trainer.pss_bytes or 0)}
    workers = sum(int(p.pss_bytes or 0) for p in with_pss if p is not trainer)
    if workers:
        out["workers"] = workers
    return out


def compact(
    samples: Sequence[MemorySample],
    *,
    restarts: Sequence[datetime] = (),
    projection: Projection | None = None,
    max_points: int = MAX_POINTS,
) -> dict[str, Any]:
    """The JSON document: ``points`` as ``[time, usage, limit, {group: pss}]``, restarts, projection."""
    points = [
        [rfc3339(s.at), s.usage_bytes, s.limit_bytes, _groups(s.processes)]
        for s in downsample(samples, max_points)
    ]
    doc: dict[str, Any] = {
        "version": VERSION,
        "samples": len(samples),
        "points": points,
        "restarts": [rfc3339(t) for t in restarts],
    }
    if projection is not None:
        doc["projection"] = {
            "start": rfc3339(projection.start),
            "startBytes": projection.start_bytes,
            "end": rfc3339(projection.end),
            "endBytes": projection.end_bytes,
            "text": projection.text,
        }
    return doc


def _time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def expand(doc: Mapping[str, Any]) -> tuple[list[MemorySample], list[datetime], Projection | None]:
    """What :func:`compact` kept, as the page's inputs; anything malformed is skipped, not raised."""
    samples: list[MemorySample] = []
    for point in doc.get("points") or []:
        if not isinstance(point, list) or len(point) != 4:
            continue
        at = _time(point[0])
        if at is None:
            continue
        groups = point[3] if isinstance(point[3], Mapping) else {}
        # pid 0 (no process has it) marks a group: the page labels it by its name alone.
        procs = [
            ProcessMemory(pid=GROUP_PID, name=str(name), pss_bytes=pss)
            for name, value in groups.items()
            if (pss := _int(value))
        ]
        samples.append(
            MemorySample(at=at, usage_bytes=_int(point[1]), limit_bytes=_int(point[2]), processes=procs)
        )
    restarts = [t for t in (_time(v) for v in doc.get("restarts") or []) if t is not None]
    projection = None
    p = doc.get("projection")
    if isinstance(p, Mapping):
        start, end = _time(p.get("start")), _time(p.get("end"))
        sb, eb = _int(p.get("startBytes")), _int(p.get("endBytes"))
        if start and end and sb is not None and eb is not None:
            projection = Projection(
                start=start, start_bytes=sb, end=end, end_bytes=eb, text=str(p.get("text", ""))
            )
    return samples, restarts, projection


def write(job_dir: Path, doc: Mapping[str, Any], svg_text: str | None = None) -> None:
    """The document (and the drawn SVG) in the job's log-store directory, each replaced atomically."""
    write_json_atomic(job_dir / JSON_NAME, dict(doc))
    if svg_text is not None:
        write_text_atomic(job_dir / SVG_NAME, svg_text)
