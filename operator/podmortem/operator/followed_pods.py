"""One log-following task per followed pod, and a look at every line as it passes into the store.

The follower (``podmortem.logs.following.follower``) does the hard part: no line lost or
repeated. This module decides which pods are followed, starts and stops their
tasks, and wraps the store's sink so that the operator sees the last line's
time and every per-epoch memory line on the way, without a second read.
"""

from __future__ import annotations

import asyncio
import builtins
import contextvars
import functools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from podmortem import memory_line, open_files
from podmortem.background import Background
from podmortem.kube.bodies import PodBody
from podmortem.logs import errors as log_errors
from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import GapMarker, LogEnd
from podmortem.logs.following import follower, podstate
from podmortem.logs.following.pod_log_api import PodLogApi
from podmortem.logs.following.sinks import LogSink
from podmortem.logs.lines import LineBatch
from podmortem.logs.settings import FollowSettings
from podmortem.loop_pacer import LoopPacer
from podmortem.operator import log_links, metrics
from podmortem.reports import log_tail

logger = logging.getLogger(__name__)

#: What every per-epoch memory line starts with, as the log's bytes carry it.
MEMORY_MARKER = memory_line.MARKER.encode()


@dataclass
class PodLogFacts:
    """What the operator learned from one pod's log stream so far."""

    namespace: str
    pod: str
    pod_uid: str
    #: Nanoseconds since the epoch of the newest line delivered, per container.
    last_line_ns: dict[str, int] = field(default_factory=dict)
    lines: int = 0
    bytes: int = 0
    #: Streams reopened for any reason but the log's normal end (cuts, timeouts, API errors, restarts).
    reconnects: int = 0
    gaps: list[GapMarker] = field(default_factory=list)
    ends: dict[str, LogEnd] = field(default_factory=dict)
    #: Set when the follower gave up (an unknown container, a refused request).
    error: str | None = None
    #: Containers whose lines cannot be kept now (the store's volume is full): paused, retrying.
    disk_full: set[str] = field(default_factory=set)
    #: The last lines per container, for the deaths only the log tells (a CUDA OOM, a traceback),
    #: bounded in lines and in bytes (see :class:`LineTail`).
    tail: dict[str, LineTail] = field(default_factory=dict)
    #: The pod (its containers only) as the watch delivered it last; its follower reads it (see
    #: :class:`podstate.WatchedPod`).
    watched: podstate.WatchedPod | None = None

    def last_lines(self, container: str) -> list[str]:
        return [line.decode("utf-8", "replace") for line in self.tail.get(container, ())]

    def last_line_at_ns(self, container: str | None = None) -> int | None:
        if container is not None and container in self.last_line_ns:
            return self.last_line_ns[container]
        return max(self.last_line_ns.values(), default=None)


def raw_tail_texts(raw: builtins.bytes, n: int) -> list[builtins.bytes]:
    """The texts of the last ``n`` lines of a ``<RFC3339> <text>\\n`` block, clipped (`log_tail.clip`).

    Walks back from the end of the block: a 16 MiB line costs one backward scan, not the
    three copies that building every line (and its timestamp) would.
    """
    out: list[builtins.bytes] = []
    end = len(raw) - 1 if raw.endswith(b"\n") else len(raw)
    while end >= 0 and len(out) < n:
        start = raw.rfind(b"\n", 0, end) + 1
        space = raw.find(b" ", start, min(end, start + 64))
        text_at = space + 1 if space >= 0 else end
        out.append(log_tail.clip(raw, end - text_at, text_at))
        end = start - 1
    out.reverse()
    return out


class LineTail:
    """The newest lines of one container: at most `log_tail.TAIL_LINES` lines and `log_tail.TAIL_BYTES`
    bytes."""

    __slots__ = ("held", "lines")

    def __init__(self) -> None:
        self.lines: deque[builtins.bytes] = deque()
        #: Bytes of the kept lines (their ``len``, markers included).
        self.held = 0

    def extend(self, texts: Iterable[builtins.bytes]) -> None:
        """Keep ``texts``, each already clipped (`log_tail.clip`, `raw_tail_texts`): clipped twice, a line's
        marker would count the first marker's bytes, not the line's."""
        lines = self.lines
        for text in texts:
            lines.append(text)
            self.held += len(text)
            while len(lines) > log_tail.TAIL_LINES or self.held > log_tail.TAIL_BYTES:
                self.held -= len(lines.popleft())

    def __iter__(self) -> Iterator[builtins.bytes]:
        return iter(self.lines)

    def __len__(self) -> int:
        return len(self.lines)


#: Called with (facts, container, ts_ns, text) for each memory line; must not block.
MemoryLineHook = Callable[[PodLogFacts, str, int, bytes], Awaitable[None]]
#: Makes the durable sink of one pod: (namespace, pod, pod_uid) -> LogSink.
SinkFactory = Callable[[str, str, str], Awaitable[LogSink]]
#: Followers that start (make their sink, build their state, ask for their first stream) in one
#: event-loop iteration, at most: about a millisecond each, so a list of 10,000 pods does not make
#: one iteration of seconds. The streams' connections are bounded apart (``FollowSettings.max_setups``).
STARTS_PER_TURN = 16


class WatchingSink:
    """A LogSink that passes everything on to the store and keeps :class:`PodLogFacts` on the way."""

    def __init__(self, *, inner: LogSink, facts: PodLogFacts, on_memory_line: MemoryLineHook | None) -> None:
        self.inner = inner
        self.facts = facts
        self.on_memory_line = on_memory_line

    async def load_cursor(self, container: str) -> LogCursor | None:
        return await self.inner.load_cursor(container)

    async def write(self, container: str, batch: LineBatch, cursor: LogCursor) -> None:
        await self.inner.write(container, batch, cursor)
        facts = self.facts
        facts.disk_full.discard(container)
        facts.lines += len(batch)
        facts.bytes += len(batch.raw)
        facts.last_line_ns[container] = batch.last_ts_ns
        tail = facts.tail.get(container)
        if tail is None:
            tail = facts.tail[container] = LineTail()
        tail.extend(raw_tail_texts(batch.raw, log_tail.TAIL_LINES))
        if self.on_memory_line is None:
            return
        # The cheap check first: one C-level scan of the block, per-line work only on a hit.
        if MEMORY_MARKER not in batch.raw:
            return
        for line in batch:
            if MEMORY_MARKER in line.text:
                try:
                    await self.on_memory_line(facts, container, line.ts_ns, line.text)
                except Exception:  # a status update must never break the log stream
                    logger.exception("handling a memory line of %s/%s failed", facts.namespace, facts.pod)

    async def gap(self, marker: GapMarker) -> None:
        await self.inner.gap(marker)
        self.facts.gaps.append(marker)

    async def end(self, end: LogEnd) -> None:
        await self.inner.end(end)
        self.facts.ends[end.container] = end


def _on_reconnect(facts: PodLogFacts, note: follower.Reconnect) -> None:
    if note.reason == "disk-full":
        if note.container not in facts.disk_full:
            logger.warning("%s/%s: the log store's volume is full; following %s is paused: %s",
                           facts.namespace, facts.pod, note.container, note.detail)
        facts.disk_full.add(note.container)
    elif note.reason == "disk-ok":
        facts.disk_full.discard(note.container)
        logger.info("%s/%s: the log store takes lines again; following %s resumed",
                    facts.namespace, facts.pod, note.container)
        return
    facts.reconnects += 1


class Following:
    """Starts one follower task per pod, at most once, and stops them all on a graceful stop."""

    def __init__(
        self,
        *,
        api: PodLogApi,
        make_sink: SinkFactory,
        settings: FollowSettings,
        on_memory_line: MemoryLineHook | None = None,
        release: Callable[[str, str], object] | None = None,
        starts_per_turn: int = STARTS_PER_TURN,
    ) -> None:
        self.api = api
        self.make_sink = make_sink
        self.settings = settings
        self.on_memory_line = on_memory_line
        #: Called with (namespace, pod) when a finished pod is forgotten: the store lets go of it too.
        self.release = release
        #: The follower task of each pod (a done one stays until `forget`, with its facts).
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._facts: dict[str, PodLogFacts] = {}
        #: Pods forgotten while their follower still ran: dropped when it ends (`_task_done`).
        self._forgotten: set[str] = set()
        #: Runs the follower tasks: named per pod, failures logged, all cancelled and awaited at `stop`.
        self._background = Background("follow")
        self._stopping = False
        #: Lets the followers' starts on `STARTS_PER_TURN` per loop iteration (`_run`).
        self._starts = LoopPacer(starts_per_turn)

    def facts(self, pod_uid: str) -> PodLogFacts | None:
        return self._facts.get(pod_uid)

    def is_following(self, pod_uid: str) -> bool:
        task = self._tasks.get(pod_uid)
        return task is not None and not task.done()

    def __len__(self) -> int:
        return len(self._background)

    def ensure(
        self, *, namespace: str, pod: str, pod_uid: str, containers: Sequence[str] | None,
        body: Mapping[str, Any] | None = None,
    ) -> bool:
        """Follow this pod unless followed now or finished cleanly; True when started now.

        ``body``: the pod as the watch delivered it; the follower starts from its containers' states
        instead of reading the pod again (at startup, one GET fewer per container and pod). A follower
        that stopped on an error (an API refusal, a store failure) is started again: it resumes from the
        stored cursor, so nothing is read twice.
        """
        if self._stopping:
            return False
        old = self._tasks.get(pod_uid)
        facts = self._facts.get(pod_uid)
        if facts is not None and body is not None:
            if facts.watched is None:
                facts.watched = podstate.WatchedPod(_containers_only(body))
            else:
                facts.watched.update(_containers_only(body))
        if old is not None and (not old.done() or facts is None or facts.error is None):
            return False
        if facts is None:
            facts = PodLogFacts(namespace=namespace, pod=pod, pod_uid=pod_uid,
                                watched=podstate.WatchedPod(_containers_only(body)) if body is not None
                                else None)
            self._facts[pod_uid] = facts
        elif facts.error is not None:
            logger.info("following %s/%s again after: %s", namespace, pod, facts.error)
            facts.error = None
        # An empty context: a follower started from a kopf handler would otherwise copy kopf's
        # context variables, whose cause object holds the pod's whole body for the follow's life.
        task = self._background.start(self._run(facts, containers), name=f"{namespace}/{pod}",
                                      context=contextvars.Context())
        self._tasks[pod_uid] = task
        task.add_done_callback(functools.partial(self._task_done, pod_uid))
        metrics.FOLLOWED_PODS.set(len(self._background))
        return True

    def _task_done(self, pod_uid: str, task: asyncio.Task[None]) -> None:
        metrics.FOLLOWED_PODS.set(len(self._background))  # it left the background before this runs
        if pod_uid in self._forgotten and self._tasks.get(pod_uid) is task:
            self._forgotten.discard(pod_uid)
            self.forget(pod_uid)

    async def _run(self, facts: PodLogFacts, containers: Sequence[str] | None) -> None:
        waits = 0
        first = True
        await self._starts.turn()
        while True:
            try:
                inner = await self.make_sink(facts.namespace, facts.pod, facts.pod_uid)
                sink = WatchingSink(inner=inner, facts=facts, on_memory_line=self.on_memory_line)
                # The first try only: a retry (after an error) reads the pod as it is then.
                watched, first = (facts.watched if first else None), False
                await follower.follow_pod(
                    watched=watched,
                    api=self.api,
                    namespace=facts.namespace,
                    pod=facts.pod,
                    sink=sink,
                    containers=list(containers) if containers else None,
                    settings=self.settings,
                    on_reconnect=lambda note: _on_reconnect(facts, note),
                )
                return
            except log_errors.PodGone:
                facts.error = "the pod was gone before its log could be read"
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not open_files.out_of_descriptors(exc):
                    facts.error = f"{type(exc).__name__}: {exc}"
                    logger.warning("following %s/%s stopped: %s", facts.namespace, facts.pod, facts.error)
                    return
                # Out of descriptors is the process's state, not this pod's: wait, then resume from
                # the stored cursor (nothing lost, nothing repeated), however long it lasts.
                delay = self.settings.backoff(waits)
                waits += 1
                metrics.DESCRIPTOR_WAITS.inc()
                used, limit = open_files.in_use()
                logger.warning(
                    "following %s/%s: no free file descriptor (%s; %d of %d open); resuming in %.1f s",
                    facts.namespace, facts.pod, exc, used, limit, delay,
                )
                await asyncio.sleep(delay)

    def forget(self, pod_uid: str) -> None:
        """Drop what is known of a finished or deleted pod (its log stays in the store).

        A follower still draining (a deleted pod's stream ends a moment after the deletion is seen)
        is forgotten when it ends: dropping only done ones left every such pod's facts behind.
        """
        task = self._tasks.get(pod_uid)
        if task is not None and not task.done():
            self._forgotten.add(pod_uid)
            return
        self._tasks.pop(pod_uid, None)
        facts = self._facts.pop(pod_uid, None)
        if facts is not None and self.release is not None:
            self.release(facts.namespace, facts.pod)

    async def wait(self, pod_uid: str, *, timeout_s: float) -> None:
        """Give a terminated pod's follower a moment to drain its tail."""
        task = self._tasks.get(pod_uid)
        if task is None or task.done():
            return
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(task)
        except TimeoutError:
            pass

    async def stop(self) -> None:
        """Cancel every follower. The store persisted each cursor with its lines, so nothing is lost."""
        self._stopping = True
        running = len(self._background)
        started = time.monotonic()
        await self._background.close()
        metrics.FOLLOWED_PODS.set(0)
        logger.info("stopped %d log followers in %.2f s", running, time.monotonic() - started)


def log_status_fields(facts: PodLogFacts, *, log_url: str) -> dict[str, Any]:
    """The status's ``log`` fields (where it is stored, its size, its gaps) and ``lastLogLineAt``."""
    last = facts.last_line_at_ns()
    fields: dict[str, Any] = {
        "log": {
            "location": f"{facts.namespace}/{facts.pod}",
            "lines": facts.lines,
            "bytes": facts.bytes,
            "reconnects": facts.reconnects,
            "gaps": len(facts.gaps),
        }
    }
    fields["log"]["url"] = log_links.log_url(log_url, namespace=facts.namespace, pod=facts.pod)
    if last is not None:
        fields["lastLogLineAt"] = datetime.fromtimestamp(last / 1e9, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return fields


def _containers_only(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What a follower reads of a pod (its containers' names and statuses), not the whole body: a watch
    event's body can be large (managedFields, annotations) and the follower starts from it."""
    body = PodBody(pod)
    return {
        "spec": {"containers": [{"name": name} for name in body.container_names]},
        "status": {"containerStatuses": [dict(cs) for cs in body.container_statuses]},
    }
