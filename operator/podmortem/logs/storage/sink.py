"""The ``LogSink`` of one pod in the store: what a follower writes lines, gaps and ends into."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import GapMarker, LogEnd, LogLine

if TYPE_CHECKING:
    from podmortem.logs.storage.pods import Pod
    from podmortem.logs.storage.store import LogStore


class PodLogSink:
    """The ``LogSink`` of one pod: what the follower writes lines, gaps and ends into."""

    def __init__(self, store: LogStore, pod: Pod) -> None:
        self._store = store
        self._pod = pod

    @property
    def namespace(self) -> str:
        return self._pod.namespace

    @property
    def pod(self) -> str:
        return self._pod.name

    @property
    def job(self) -> str:
        return self._pod.job

    async def load_cursor(self, container: str) -> LogCursor | None:
        return await self._store.load_cursor(self._pod, container)

    async def write(self, container: str, lines: Sequence[LogLine], cursor: LogCursor) -> None:
        await self._store.write(self._pod, container, lines, cursor)

    async def gap(self, marker: GapMarker) -> None:
        await self._store.gap(self._pod, marker)

    async def end(self, end: LogEnd) -> None:
        await self._store.end(self._pod, end)
