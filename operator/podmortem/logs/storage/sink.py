"""The ``LogSink`` of one pod in the store: what a follower writes lines, gaps and ends into.

The store hands these out (`podmortem.logs.storage.store.LogStore.sink`), so this module names only
what a sink asks of the store (`PodWriter`), which the store is: the store imports the sink, never
the other way round.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import GapMarker, LogEnd, LogLine
from podmortem.logs.storage.pods import Pod


class PodWriter(Protocol):
    """What a pod's sink asks of the store: each call names the pod it writes."""

    def pod_for_write(self, released: Pod) -> Pod: ...

    async def load_cursor(self, pod: Pod, container: str) -> LogCursor | None: ...

    async def write(self, pod: Pod, container: str, lines: Sequence[LogLine], cursor: LogCursor) -> None: ...

    async def gap(self, pod: Pod, marker: GapMarker) -> None: ...

    async def end(self, pod: Pod, end: LogEnd) -> None: ...


class PodLogSink:
    """The ``LogSink`` of one pod: what the follower writes lines, gaps and ends into."""

    def __init__(self, store: PodWriter, pod: Pod) -> None:
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
