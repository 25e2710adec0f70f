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

    def _current(self) -> Pod:
        """The index's object for this pod. A sink handed out before the store released the pod
        (a new follower of a same-named pod, in the same milliseconds) must not write through the
        released object while a reader or another sink loads a second one for the same directory."""
        if self._pod.released:
            self._pod = self._store.pod_for_write(self._pod)
        return self._pod

    async def load_cursor(self, container: str) -> LogCursor | None:
        return await self._store.load_cursor(self._current(), container)

    async def write(self, container: str, lines: Sequence[LogLine], cursor: LogCursor) -> None:
        await self._store.write(self._current(), container, lines, cursor)

    async def gap(self, marker: GapMarker) -> None:
        await self._store.gap(self._current(), marker)

    async def end(self, end: LogEnd) -> None:
        await self._store.end(self._current(), end)
