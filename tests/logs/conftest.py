"""Fixtures for the log follower tests: an emulated cluster, an API client, a recording sink."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Sequence

import pytest
from prometheus_client import CollectorRegistry

from podmortem.kube.config import ClusterAccess
from podmortem.logs import metrics
from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import GapMarker, LogEnd, LogLine
from podmortem.logs.following.pod_log_api import PodLogApi, SessionTransport
from podmortem.logs.settings import FollowSettings
from podmortem_demo.emulated import PodLogsApi, running_cluster

#: Small timeouts so faults resolve fast in real time (these tests use real sockets).
FAST = FollowSettings(read_timeout_s=0.3, connect_timeout_s=5, pod_read_timeout_s=5,
                      backoff_min_s=0.005, backoff_max_s=0.02)


class RecordingSink:
    """Keeps everything in memory; can resume from its own cursor like a durable store."""

    def __init__(self) -> None:
        self.lines: list[LogLine] = []
        self.gaps: list[GapMarker] = []
        self.ends: list[LogEnd] = []
        self.cursors: dict[str, LogCursor] = {}
        self.events: list[object] = []

    async def load_cursor(self, container: str) -> LogCursor | None:
        cursor = self.cursors.get(container)
        return cursor.copy() if cursor is not None else None

    async def write(self, container: str, lines: Sequence[LogLine], cursor: LogCursor) -> None:
        assert len(lines) > 0
        self.lines.extend(lines)
        self.events.extend(lines)
        self.cursors[container] = cursor.copy()

    async def gap(self, marker: GapMarker) -> None:
        self.gaps.append(marker)
        self.events.append(marker)

    async def end(self, end: LogEnd) -> None:
        self.ends.append(end)
        self.events.append(end)

    def texts(self, container: str | None = None) -> list[bytes]:
        return [line.text for line in self.lines if container is None or line.container == container]


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[PodLogsApi, str]]:
    async with running_cluster() as (api, url):
        yield api, url


@pytest.fixture
async def transport(cluster: tuple[PodLogsApi, str]) -> AsyncIterator[SessionTransport]:
    async with SessionTransport(ClusterAccess(server=cluster[1], authorization="Bearer test")) as transport:
        yield transport


@pytest.fixture
def pod_api(transport: SessionTransport) -> PodLogApi:
    return PodLogApi(transport, settings=FAST)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def log_metrics(registry: CollectorRegistry) -> metrics.LogMetrics:
    return metrics.for_registry(registry)


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
def rng() -> random.Random:
    return random.Random(1234)
