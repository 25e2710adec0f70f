"""The pod's working set over its whole life: from Prometheus when there is one, else the agent's samples.

``container_memory_working_set_bytes`` is what the kubelet compares with the
limit (usage minus inactive file cache). Prometheus keeps it for the pod's
whole life; the agent's ring keeps only the last hour or so. The agent's
samples are turned into the same series (usage - inactive_file), so a report
reads the same either way and says which source it used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

import aiohttp

from podmortem.errors import PodmortemError
from podmortem.operator.settings import PrometheusSettings
from podmortem.reports.memory import MemorySample

QUERY = (
    'sum(container_memory_working_set_bytes{{namespace="{ns}",pod="{pod}",container!="",container!="POD"}})'
)


@dataclass
class WorkingSet:
    """Points of (time, bytes), oldest first, and where they came from."""

    source: Literal["prometheus", "agent", "none"]
    points: list[tuple[datetime, int]] = field(default_factory=list)
    #: Why the preferred source was not used, when it was not.
    note: str = ""

    @property
    def peak(self) -> tuple[datetime, int] | None:
        return max(self.points, key=lambda p: p[1]) if self.points else None


class PrometheusError(PodmortemError):
    """Prometheus could not answer the query."""


async def query_working_set(
    *,
    session: aiohttp.ClientSession,
    settings: PrometheusSettings,
    namespace: str,
    pod: str,
    start: datetime,
    end: datetime,
) -> WorkingSet:
    """The pod's summed container working set from ``start`` to ``end``; raises PrometheusError."""
    if not settings.url:
        raise PrometheusError("no Prometheus URL configured")
    span = max((end - start).total_seconds(), 1.0)
    step = max(15.0, span / settings.max_points)
    params = {
        "query": QUERY.format(ns=_escape(namespace), pod=_escape(pod)),
        "start": f"{start.timestamp():.3f}",
        "end": f"{end.timestamp():.3f}",
        "step": f"{step:.0f}s",
    }
    url = settings.url.rstrip("/") + "/api/v1/query_range"
    try:
        timeout = aiohttp.ClientTimeout(total=settings.timeout_s)
        async with session.get(url, params=params, timeout=timeout) as resp:
            if resp.status >= 400:
                raise PrometheusError(f"Prometheus at {settings.url} answered HTTP {resp.status}")
            payload = await resp.json(content_type=None)
    except TimeoutError as exc:
        raise PrometheusError(
            f"Prometheus at {settings.url} did not answer within {settings.timeout_s:g} s"
        ) from exc
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        raise PrometheusError(f"Prometheus at {settings.url} is unreachable: {exc}") from exc
    if not isinstance(payload, dict) or payload.get("status") != "success":
        error = payload.get("error") if isinstance(payload, dict) else None
        raise PrometheusError(f"Prometheus query failed: {error or 'unexpected answer'}")
    results = (payload.get("data") or {}).get("result") or []
    points: list[tuple[datetime, int]] = []
    for series in results[:1]:
        for ts, value in series.get("values") or []:
            points.append((datetime.fromtimestamp(float(ts), tz=start.tzinfo), int(float(value))))
    if not points:
        return WorkingSet(source="prometheus", points=[], note="Prometheus has no samples of this pod")
    return WorkingSet(source="prometheus", points=points)


def from_samples(samples: Sequence[MemorySample], *, note: str = "") -> WorkingSet:
    """The agent's samples as a working-set series: usage minus inactive file pages."""
    points: list[tuple[datetime, int]] = []
    for s in samples:
        if s.usage_bytes is None:
            continue
        inactive = 0
        if s.stat is not None:
            inactive = s.stat.stat.get("inactive_file", s.stat.stat.get("total_inactive_file", 0))
        points.append((s.at, max(0, s.usage_bytes - inactive)))
    return WorkingSet(source="agent" if points else "none", points=points, note=note)


def life_span(
    started: datetime | None, finished: datetime | None, *, now: datetime
) -> tuple[datetime, datetime]:
    """The query range: the pod's life, or the last hour when its start is unknown."""
    end = finished or now
    start = started or (end - timedelta(hours=1))
    return start, end


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
