"""A report's timeline as files next to the pod's logs: ``report-timeline.json`` and ``timeline.svg``.

The stored report (status or annotation) is too small for the agent's samples with their
per-process PSS, so when the Reporter writes or updates a report it also files the timeline
(`podmortem.reports.stored_timeline`) in the pod's log-store directory,
``<store>/<namespace>/<job>/<pod>/``, where the store files the pod's logs: each pod of a
multi-pod job keeps its own. The page (`report_page`) draws the PSS bands, restarts and
projection of the report's pod from it, and serves the SVG for tickets. Retention deletes the
pod's directory, and so these files, with its logs. Writing is best effort: a failure is
logged, never the report's.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from podmortem.diagnosis.termination import Termination
from podmortem.logs import store
from podmortem.reports import page, stored_timeline
from podmortem.reports import timeline as tl_mod
from podmortem.reports.memory import MemorySample

logger = logging.getLogger(__name__)


def pod_dir(store_dir: Path, *, namespace: str, job: str, pod: str) -> Path:
    """The pod's directory in the log store (``LogStore`` files a bare pod under its own name as the job)."""
    return (Path(store_dir) / store.check_name("namespace", namespace) / store.check_name("job", job)
            / store.check_name("pod", pod))


def pod_of(report: Mapping[str, Any]) -> str | None:
    """The name of the pod a stored report is about."""
    pod = report.get("pod")
    name = pod.get("name") if isinstance(pod, Mapping) else None
    return name if isinstance(name, str) and name else None


def restarts_of(t: Termination, earlier: Iterable[Termination]) -> list[datetime]:
    """When the same pod's containers ended before this termination (its earlier reports)."""
    return sorted(
        e.finished_at
        for e in earlier
        if e.pod_uid == t.pod_uid
        and e.finished_at is not None
        and (t.finished_at is None or e.finished_at < t.finished_at)
    )


def build(
    report: Mapping[str, Any],
    samples: Sequence[MemorySample],
    *,
    restarts: Sequence[datetime] = (),
    projection: tl_mod.Projection | None = None,
) -> tuple[dict[str, Any], str]:
    """The JSON document (naming the report's pod) and the SVG the page would draw from it."""
    doc = stored_timeline.compact(samples, restarts=restarts, projection=projection)
    pod = report.get("pod") if isinstance(report.get("pod"), Mapping) else {}
    assert isinstance(pod, Mapping)
    doc["pod"] = {"namespace": pod.get("namespace"), "name": pod.get("name"), "uid": pod.get("uid")}
    got, got_restarts, got_projection = stored_timeline.expand(doc)
    tl, _ = page.timeline_of(
        page.PageInput(title="", report=report, samples=got, restarts=got_restarts, projection=got_projection)
    )
    title = f"memory timeline of {pod.get('namespace')}/{pod.get('name')}"
    return doc, tl_mod.svg(tl, title=title)


def belongs_to(doc: Mapping[str, Any], report: Mapping[str, Any]) -> bool:
    """The stored timeline is of the report's pod (not an earlier pod of the same name)."""
    mine = doc.get("pod") if isinstance(doc.get("pod"), Mapping) else None
    theirs = report.get("pod") if isinstance(report.get("pod"), Mapping) else None
    if not isinstance(mine, Mapping) or not isinstance(theirs, Mapping):
        return False
    if mine.get("uid") and theirs.get("uid"):
        return bool(mine.get("uid") == theirs.get("uid"))
    return bool(mine.get("name") and mine.get("name") == theirs.get("name"))


def _save(directory: Path, report: Mapping[str, Any], samples: Sequence[MemorySample],
          restarts: Sequence[datetime], projection: tl_mod.Projection | None) -> bool:
    if not directory.is_dir():
        # No log of this job in the store (never followed, or expired): nothing would delete the files.
        logger.info("no log-store directory %s: the report's timeline is not filed", directory)
        return False
    doc, svg = build(report, samples, restarts=restarts, projection=projection)
    stored_timeline.write(directory, doc, svg)
    return True


async def save(
    store_dir: Path,
    *,
    namespace: str,
    job: str,
    pod: str,
    report: Mapping[str, Any],
    samples: Sequence[MemorySample],
    restarts: Sequence[datetime] = (),
    projection: tl_mod.Projection | None = None,
) -> bool:
    """Build and write both files in a worker thread; False (logged) when they were not written."""
    try:
        directory = pod_dir(store_dir, namespace=namespace, job=job, pod=pod)
        return await asyncio.to_thread(_save, directory, report, list(samples), list(restarts), projection)
    except (OSError, ValueError) as exc:
        logger.warning("filing the report timeline of %s/%s (pod %s) failed: %s", namespace, job, pod, exc)
        return False


def load(store_dir: Path, *, namespace: str, job: str, pod: str) -> dict[str, Any] | None:
    """The stored document, or None when there is none or it cannot be read (blocking: run off the loop)."""
    try:
        path = pod_dir(store_dir, namespace=namespace, job=job, pod=pod) / stored_timeline.JSON_NAME
    except ValueError:
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        logger.warning("reading %s failed: %s", path, exc)
        return None
    return doc if isinstance(doc, dict) else None
