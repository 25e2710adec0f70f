"""A report's timeline as files next to the pod's logs: ``report-timeline.json`` and ``timeline.svg``.

The stored report (status or annotation) is too small for the agent's samples with their
per-process PSS, so when the Reporter writes or updates a report it also files the timeline
(`podmortem.reports.stored_timeline`) in the pod's log-store directory,
``<store>/<namespace>/<job>/<pod>/``, where the store files the pod's logs (``LogStore.pod_dir``,
the one place that knows the layout): each pod of a
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
from typing import Any

from podmortem.diagnosis.termination import Termination
from podmortem.files import read_nofollow
from podmortem.logs.storage.store import LogStore
from podmortem.render import page, timeline_svg
from podmortem.reports import stored_timeline
from podmortem.reports import timeline_model as tm
from podmortem.reports.document import ReportDocument
from podmortem.reports.memory import MemorySample

logger = logging.getLogger(__name__)


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
    report: ReportDocument,
    samples: Sequence[MemorySample],
    *,
    restarts: Sequence[datetime] = (),
    projection: tm.Projection | None = None,
) -> tuple[dict[str, Any], str]:
    """The JSON document (naming the report's pod) and the SVG the page would draw from it."""
    doc = stored_timeline.compact(samples, restarts=restarts, projection=projection)
    pod = report.pod
    doc["pod"] = {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid}
    got, got_restarts, got_projection = stored_timeline.expand(doc)
    tl, _ = page.timeline_of(
        page.PageInput(title="", report=report, samples=got, restarts=got_restarts, projection=got_projection)
    )
    title = f"memory timeline of {pod.namespace}/{pod.name}"
    return doc, timeline_svg.svg(tl, title=title)


def belongs_to(doc: Mapping[str, Any], report: ReportDocument) -> bool:
    """The stored timeline (our own file) is of the report's pod (not an earlier pod of the same name)."""
    mine = doc.get("pod") if isinstance(doc.get("pod"), Mapping) else None
    if not isinstance(mine, Mapping):
        return False
    theirs = report.pod
    if mine.get("uid") and theirs.uid:
        return bool(mine.get("uid") == theirs.uid)
    return bool(mine.get("name") and mine.get("name") == theirs.name)


def _save(log_store: LogStore, where: tuple[str, str, str], report: ReportDocument,
          samples: Sequence[MemorySample], restarts: Sequence[datetime],
          projection: tm.Projection | None) -> bool:
    namespace, job, pod = where
    directory = log_store.pod_dir(namespace=namespace, job=job, pod=pod)
    if directory is None:
        # No log of this pod in the store (never followed, expired, a link): nothing would delete them.
        logger.info("no log-store directory of %s/%s (pod %s): the report's timeline is not filed",
                    namespace, job, pod)
        return False
    doc, svg = build(report, samples, restarts=restarts, projection=projection)
    stored_timeline.write(directory, doc, svg)
    return True


async def save(
    log_store: LogStore,
    *,
    namespace: str,
    job: str,
    pod: str,
    report: ReportDocument,
    samples: Sequence[MemorySample],
    restarts: Sequence[datetime] = (),
    projection: tm.Projection | None = None,
) -> bool:
    """Build and write both files in a worker thread; False (logged) when they were not written."""
    try:
        return await asyncio.to_thread(_save, log_store, (namespace, job, pod), report, list(samples),
                                       list(restarts), projection)
    except (OSError, ValueError) as exc:
        logger.warning("filing the report timeline of %s/%s (pod %s) failed: %s", namespace, job, pod, exc)
        return False


def load(log_store: LogStore, *, namespace: str, job: str, pod: str) -> dict[str, Any] | None:
    """The stored document, or None when there is none or it cannot be read (blocking: run off the loop)."""
    text = read(log_store, namespace=namespace, job=job, pod=pod, name=stored_timeline.JSON_NAME)
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        logger.warning("reading the stored timeline of %s/%s (pod %s) failed: %s", namespace, job, pod, exc)
        return None
    return doc if isinstance(doc, dict) else None


def read(log_store: LogStore, *, namespace: str, job: str, pod: str, name: str) -> str | None:
    """One file filed beside the pod's logs, never through a link; None when missing or unreadable."""
    try:
        directory = log_store.pod_dir(namespace=namespace, job=job, pod=pod)
    except ValueError:
        return None
    if directory is None:
        return None
    path = directory / name
    try:
        return read_nofollow(path).decode("utf-8", "replace")
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.warning("reading %s failed: %s", path, exc)
        return None
