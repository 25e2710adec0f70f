"""Following a pod's container logs with no line lost or repeated, as three nested loops.

Like kopf's watch streams (``_cogs/clients/watching.py``):

* :meth:`ContainerFollower.follow_forever` follows one container across all
  its instances (restarts) until the container terminated or the pod is gone;
* :meth:`ContainerFollower.follow_once` follows one container instance across
  any number of stream ends, reading the pod at each end to decide what next;
* :meth:`ContainerFollower.request` is one HTTP log request, read to its end.

Every end of a stream is treated the same way, whatever caused it (a clean EOF
such as the kubelet's 4-hour cut, a read timeout, a reset, an HTTP error): the
pod is read and the follower reconnects from its cursor, drains a restarted
instance with ``previous=true``, reads a terminated one's tail, or finishes.
Time comes from the event loop (``asyncio.sleep``), so tests fake it with looptime.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp

from podmortem.logs import errors, lines, podstate, timestamps
from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import EndReason, GapMarker, GapReason, LogEnd, LogSink
from podmortem.logs.kube import PodLogApi
from podmortem.logs.metrics import LogMetrics, for_registry
from podmortem.logs.settings import FollowSettings

#: How far ``limitBytes`` may grow (as a multiple) when one second's replay alone exceeds it.
_LIMIT_GROWTH_MAX = 16


@dataclass
class RequestResult:
    """How one log request ended."""

    #: The ``reason`` label for the reconnect metric: eof, read-timeout, reset, limit-bytes.
    ended: str
    new_lines: int = 0
    #: An unfinished last line (not delivered); empty when the stream ended on a line boundary.
    partial: bytes = b""
    seconds: float = 0.0
    #: The stream ended while still replaying, and the replay lacked lines we had delivered.
    replay_missed: bool = False


@dataclass
class ContainerFollower:
    """Follows one container of one pod into a sink. Create one per container."""

    api: PodLogApi
    namespace: str
    pod: str
    container: str
    sink: LogSink
    settings: FollowSettings = field(default_factory=FollowSettings)
    metrics: LogMetrics = field(default_factory=for_registry)
    #: False: read the log as it is now (``kubectl logs`` without ``-f``) and stop.
    follow: bool = True
    rng: random.Random = field(default_factory=random.Random)
    cursor: LogCursor = field(default_factory=LogCursor)
    _attempt: int = 0
    _limit_growth: int = 1

    # -- level 1: the container across its instances -------------------------------------------

    async def follow_forever(self) -> LogEnd:
        """Follow until the container terminated and its tail is drained, or the pod is gone."""
        self.cursor = await self.sink.load_cursor(self.container) or LogCursor()
        self.metrics.streams_active.inc()
        try:
            try:
                state = await self._wait_for_instance()
                while True:
                    await self._settle_instance(state)
                    reason, state = await self.follow_once()
                    if reason is not EndReason.RESTARTED:
                        return await self._end(reason)
            except errors.PodGone:
                return await self._end(EndReason.POD_DELETED)
        finally:
            self.metrics.streams_active.dec()

    async def _end(self, reason: EndReason) -> LogEnd:
        end = LogEnd(container=self.container, container_id=self.cursor.container_id, reason=reason)
        await self.sink.end(end)
        return end

    async def _wait_for_instance(self) -> podstate.ContainerState:
        """Read the pod until the container has an instance to read (it may not have started)."""
        while True:
            state = await self._read_state()
            if state is not None and (state.container_id is not None or not self.follow):
                return state
            await self._backoff()

    async def _settle_instance(self, state: podstate.ContainerState) -> None:
        """Make the cursor point at the current instance, first draining instances replaced since."""
        if state.container_id is None or state.container_id == self.cursor.container_id:
            return
        if self.cursor.container_id is None:
            self.cursor.container_id = state.container_id
            return
        old_id = self.cursor.container_id
        if state.previous_id == old_id:
            await self.drain(previous=True)
            await self._end(EndReason.RESTARTED)
        else:
            # Our instance is older than the one before the current: its log is gone.
            await self._gap(GapReason.RESTARTS,
                            before_ts_ns=None,
                            detail=f"instance {old_id} was replaced more than once while away;"
                                   " logs of the instances between are not readable")
            if state.previous_id is not None:
                self.cursor = LogCursor(container_id=state.previous_id)
                await self.drain(previous=True)
                await self._end(EndReason.RESTARTED)
        self.metrics.reconnects.labels("restart").inc()
        self.cursor = LogCursor(container_id=state.container_id)

    # -- level 2: one instance across stream ends ---------------------------------------------

    async def follow_once(self) -> tuple[EndReason, podstate.ContainerState]:
        """Follow the cursor's instance until it is replaced, terminated or its pod is gone."""
        if not self.follow:
            await self.drain(previous=False)
            return EndReason.STOPPED, podstate.ContainerState(
                self.container, self.cursor.container_id, 0, podstate.Phase.TERMINATED, None)
        while True:
            retry_after: float | None = None
            try:
                result = await self.request(follow=True)
            except errors.ApiUnavailable as exc:
                self.metrics.reconnects.labels("api-unavailable").inc()
                await self._backoff(retry_after=exc.retry_after_s)
                continue
            except (errors.LogNotReady, errors.PodGone) as exc:
                ended = "not-ready" if isinstance(exc, errors.LogNotReady) else "http-error"
                result = RequestResult(ended=ended)
                retry_after = 0.0
            else:
                self.metrics.reconnects.labels(result.ended).inc()
            try:
                state = await self._read_state()
            except errors.ApiUnavailable as exc:
                # Unreadable API: assume the container still runs and reconnect after a pause.
                await self._backoff(retry_after=exc.retry_after_s)
                continue
            if state is None:
                raise errors.ApiFatal(f"container {self.container!r} is no longer in pod "
                                      f"{self.namespace}/{self.pod}")
            if state.container_id is not None and state.container_id != self.cursor.container_id:
                return EndReason.RESTARTED, state
            if state.phase is podstate.Phase.TERMINATED:
                await self.drain(previous=False)
                return EndReason.TERMINATED, state
            if retry_after is not None or not self._progressed(result):
                await self._backoff(retry_after=retry_after or None)
            else:
                self._attempt = 0

    def _progressed(self, result: RequestResult) -> bool:
        """Lines came, or the stream stayed open for a whole read timeout: no need to back off."""
        return result.new_lines > 0 or (
            result.ended == "read-timeout" and result.seconds >= self.settings.read_timeout_s * 0.9)

    async def drain(self, *, previous: bool) -> None:
        """Read a finished instance's log from the cursor to its true end (not following).

        Done when a read ends on a line boundary and brings no new line: one extra
        cheap request per finished instance, in exchange for never taking an early
        clean EOF for the end of the log.
        """
        same_partial = 0
        missed_reads = 0
        last_partial = b""
        while True:
            try:
                result = await self.request(follow=False, previous=previous)
            except errors.ApiUnavailable as exc:
                self.metrics.reconnects.labels("api-unavailable").inc()
                await self._backoff(retry_after=exc.retry_after_s)
                continue
            except errors.LogNotReady as exc:
                if previous:  # the previous instance's log is gone already
                    await self._gap(GapReason.RESTARTS, before_ts_ns=None, detail=str(exc))
                    return
                raise
            if result.ended == "limit-bytes":
                self.metrics.reconnects.labels(result.ended).inc()
                continue  # the limit grows until a line fits, or a too-long line is skipped
            if not result.partial:
                # A read that ends on a line boundary may still be a cut (a proxy, a fault): the
                # log is complete once a read from the cursor replays up to our last line and
                # brings nothing new. One extra cheap request per finished instance.
                if result.new_lines:
                    self._attempt = 0
                    continue
                if not result.replay_missed:
                    return
                missed_reads += 1
                if missed_reads >= 2:
                    # The finished log no longer holds our last line: rotated away, with what followed.
                    await self._gap(GapReason.ROTATION, before_ts_ns=None,
                                    detail="the log's end lacks lines already delivered:"
                                           " the file was rotated while disconnected")
                    return
                continue
            # A partial last line is a cut, not the end: read again from the cursor. Only when the
            # same unfinished line comes back every time is it the log's real, newline-less end.
            same_partial = same_partial + 1 if result.partial == last_partial else 1
            last_partial = result.partial
            if result.new_lines:
                self._attempt = 0
            if same_partial >= self.settings.final_partial_reads:
                await self._deliver_final_partial(result.partial)
                return
            self.metrics.reconnects.labels(result.ended).inc()
            if not result.new_lines and same_partial > 1:
                await self._backoff()

    async def _deliver_final_partial(self, partial: bytes) -> None:
        parser = lines.StreamParser(container=self.container, cursor=self.cursor)
        batch = parser.feed(partial + b"\n")
        if batch is not None:
            await self.sink.write(self.container, batch, self.cursor)
            self.metrics.lines.inc(batch.n_lines)
            self.metrics.bytes.inc(len(batch.raw))

    # -- level 3: one request ------------------------------------------------------------------

    async def request(self, *, follow: bool, previous: bool = False) -> RequestResult:
        """One log request from the cursor, read to its end; complete new lines go to the sink."""
        cursor = self.cursor
        limit = self.settings.limit_bytes
        if limit is not None:
            limit = limit * self._limit_growth or None  # growth 0: this one request goes unlimited
        since = cursor.since_time_param()
        parser = lines.StreamParser(container=self.container, cursor=cursor)
        loop = asyncio.get_running_loop()
        started = loop.time()
        result = RequestResult(ended="eof")
        sink, metrics, container = self.sink, self.metrics, self.container
        gap_checked = False
        async with self.api.open_log(
            namespace=self.namespace, name=self.pod, container=container,
            follow=follow, previous=previous, since_time=since, limit_bytes=limit,
            tail_lines=self.settings.tail_lines if cursor.last_ts_ns is None and not previous else None,
        ) as body:
            try:
                while True:
                    data = await body.readany()
                    if not data:
                        break
                    batch = parser.feed(data)
                    if batch is None:
                        continue
                    if not gap_checked:
                        gap_checked = True
                        if parser.replay_missed:
                            await self._gap(GapReason.ROTATION, after_ts_ns=parser.resumed_after_ns,
                                            before_ts_ns=batch.first_ts_ns,
                                            detail="the reconnect's replay lacks lines already delivered:"
                                                   " the log file was rotated while disconnected")
                    await sink.write(container, batch, cursor)
                    result.new_lines += batch.n_lines
                    metrics.lines.inc(batch.n_lines)
                    metrics.bytes.inc(len(batch.raw))
                    metrics.lag.observe(max(0.0, time.time() - batch.last_ts_ns / timestamps.NS_PER_SECOND))
            except (TimeoutError, aiohttp.ServerTimeoutError):
                result.ended = "read-timeout"
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, ConnectionError):
                result.ended = "reset"
        if parser.duplicates:
            metrics.duplicates.inc(parser.duplicates)
        result.partial = parser.partial
        result.replay_missed = parser.replaying and cursor.replay_missed()
        result.seconds = loop.time() - started
        if limit is not None and result.ended == "eof" and parser.bytes_seen >= limit:
            result.ended = "limit-bytes"
            await self._after_limit(result, parser)
        elif result.new_lines or limit is None:
            self._limit_growth = 1
        return result

    async def _after_limit(self, result: RequestResult, parser: lines.StreamParser) -> None:
        """A ``limitBytes`` cut: resume normally, unless one line alone exceeds the limit."""
        if result.new_lines:
            self._limit_growth = 1
            return
        if self._limit_growth < _LIMIT_GROWTH_MAX:
            self._limit_growth *= 2  # a second's replay or one long line is larger: ask for more
            return
        if parser.replaying:
            # Even the replay of one second exceeds the largest limit: read once without one.
            self._limit_growth = 0
            return
        # One line is longer than the largest limit: skip it, visibly.
        stamp = parser.partial.split(b" ", 1)[0]
        try:
            ts = timestamps.parse_ns(stamp)
        except timestamps.BadTimestamp as exc:
            raise errors.ApiFatal(f"limitBytes {self.settings.limit_bytes} is too small to hold "
                                  "even a timestamp") from exc
        after = self.cursor.last_ts_ns
        self.cursor.accept(ts)
        self._limit_growth = 1
        await self._gap(GapReason.LIMIT_BYTES, after_ts_ns=after, before_ts_ns=ts,
                        detail=f"a line at {timestamps.format_ns(ts)} is longer than limitBytes "
                               f"x{_LIMIT_GROWTH_MAX}; skipped")
        result.partial = b""
        result.new_lines = 1  # progress: the cursor moved

    # -- helpers -------------------------------------------------------------------------------

    async def _read_state(self) -> podstate.ContainerState | None:
        pod = await self.api.read_pod(namespace=self.namespace, name=self.pod)
        if self.container not in podstate.container_names(pod):
            return None
        return podstate.container_state(pod, self.container)

    async def _gap(self, reason: GapReason, *, before_ts_ns: int | None,
                   after_ts_ns: int | None = None, detail: str = "") -> None:
        if after_ts_ns is None:
            after_ts_ns = self.cursor.last_ts_ns
        marker = GapMarker(container=self.container, reason=reason, after_ts_ns=after_ts_ns,
                           before_ts_ns=before_ts_ns, detail=detail)
        self.metrics.gaps.labels(reason.value).inc()
        await self.sink.gap(marker)

    async def _backoff(self, *, retry_after: float | None = None) -> None:
        """Sleep 2 s doubling to 30 s (by default), shortened by jitter; at least ``Retry-After``."""
        s = self.settings
        delay = s.backoff(self._attempt) * (1.0 - s.backoff_jitter * self.rng.random())
        self._attempt += 1
        if retry_after is not None:
            delay = max(delay, min(retry_after, s.backoff_max_s * 10))
        await asyncio.sleep(delay)


async def follow_pod(
    *,
    api: PodLogApi,
    namespace: str,
    pod: str,
    sink: LogSink,
    containers: Sequence[str] | None = None,
    settings: FollowSettings | None = None,
    metrics: LogMetrics | None = None,
    follow: bool = True,
    rng: random.Random | None = None,
) -> dict[str, LogEnd]:
    """Follow the chosen containers of a pod (all by default) until each one's log is over.

    Raises :class:`errors.PodGone` when the pod does not exist at the start, and
    :class:`errors.ApiFatal` for unknown container names or a refused request.
    """
    settings = settings or FollowSettings()
    metrics = metrics or for_registry()
    pod_obj = await api.read_pod(namespace=namespace, name=pod)
    names = podstate.container_names(pod_obj)
    if containers:
        unknown = [c for c in containers if c not in names]
        if unknown:
            raise errors.ApiFatal(f"container {unknown[0]!r} is not in pod {namespace}/{pod};"
                                  f" it has: {', '.join(names) or 'none'}")
        names = list(containers)
    followers = [
        ContainerFollower(api=api, namespace=namespace, pod=pod, container=name, sink=sink,
                          settings=settings, metrics=metrics, follow=follow,
                          rng=random.Random(rng.random()) if rng is not None else random.Random())
        for name in names
    ]
    try:
        async with asyncio.TaskGroup() as group:
            tasks = {f.container: group.create_task(f.follow_forever()) for f in followers}
    except BaseExceptionGroup as group_error:
        raise group_error.exceptions[0] from None  # one container failed; the others were cancelled
    return {name: task.result() for name, task in tasks.items()}
