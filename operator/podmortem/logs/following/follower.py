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

**Which instance did a stream serve?** A log request without ``previous``
reads whatever instance the kubelet runs *when the request arrives*; the pod
read before it may be stale (a restart in between, or the apiserver's copy of
the status lagging behind the kubelet's). Lines of a new instance must not be
counted under the old instance's cursor: the old instance's unread tail would
be skipped and the new instance's lines repeated later. So, before the first
line of a stream is delivered, a stream that could belong to a newer instance
is checked (see :meth:`ContainerFollower._check_instance`):

* a reconnect whose replay holds the cursor's last lines is the cursor's own
  instance: a new instance starts after the old one ended, so its log cannot
  hold the old one's timestamps. No extra request; this is the common case.
* a new instance's first stream (empty cursor) whose pod, as the caller's
  watch delivered it last (:class:`podstate.WatchedPod`), still shows the
  cursor's ``containerID``: no extra request either. The watch is kept current
  by the caller at every event, so it agrees with a read up to the watch's own
  delay; a watch that disagrees (or none) is settled by reading the pod.
* otherwise (the replay is missing: rotation, or a newer instance; or the
  cursor is empty) the pod is read: a new ``containerID`` means the stream is
  dropped undelivered and the restart is handled (previous instance drained
  from the cursor, the new one read from its start). When the pod still shows
  our instance and the cursor has lines, the kubelet itself is asked: when its
  ``previous=true`` log holds the cursor's last lines, our instance has ended
  and the stream was the new one's, whatever the apiserver says.

A ``previous=true`` stream (draining a replaced instance) whose replay did not
prove it is checked against the pod's ``lastState``: a restart during the
drain makes ``previous`` another instance, whose lines must not be taken for
ours; the lost instance is then marked as a ``restarts`` gap.

Remaining window, stated honestly: an instance from which nothing was
delivered yet (empty cursor) is checked only against the apiserver's pod
status (or the watch's copy of it, which trails it by the watch's delay), and
so is a ``previous`` stream. If the kubelet already runs a new
instance while the apiserver still shows the old one (status sync lag, usually
under a second), the new instance's first lines are counted under the old
instance. When the restart shows up, the old instance's log is found not to
hold the cursor: its unread lines are marked as a gap (not read: they cannot
be told apart from a rotated file), and the new instance is resumed after the
cursor, so nothing is repeated. Timestamps are taken to never go back within
one instance's log (a runtime writing stdout and stderr lines from two
threads could break that by microseconds; the cursor would then repeat or
skip the lines involved).

Why one module of this size: it is one state machine (follow_forever > follow_once > one request,
with the replay check at each reconnect) whose levels share one cursor and one back-off; what stands
apart is in modules of its own: the kubelet checks (``kubelet_checks``), what the levels pass up
(``outcomes``) and the pure parts (cursor, lines, timestamps).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from podmortem.background import Background
from podmortem.logs import errors, lines, timestamps
from podmortem.logs.cursor import LogCursor
from podmortem.logs.errors import SinkFull
from podmortem.logs.events import EndReason, GapMarker, GapReason, LogEnd
from podmortem.logs.following import kubelet_checks, podstate
from podmortem.logs.following.outcomes import InstanceChanged, Reconnect, RequestResult
from podmortem.logs.following.pod_log_api import PodLogApi
from podmortem.logs.following.sinks import LogSink
from podmortem.logs.metrics import LogMetrics, for_registry
from podmortem.logs.settings import FollowSettings

#: Jitter source of followers not given their own (jitter needs no independence; a
#: ``random.Random`` holds 2.5 KB of state, too much to keep per idle stream).
_JITTER = random.Random()

#: Complete reads of a finished log, each lacking our last lines, before they count as rotated away
#: (one could be a proxy's early clean end of an empty body).
_MISSED_READS = 3

#: How far ``limitBytes`` may grow (as a multiple) when one second's replay alone exceeds it.
_LIMIT_GROWTH_MAX = 16

__all__ = ["ContainerFollower", "InstanceChanged", "Reconnect", "RequestResult", "follow_pod", "read_pod"]


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
    rng: random.Random = field(default=_JITTER)
    cursor: LogCursor = field(default_factory=LogCursor)
    #: Called at every reconnect that is not the normal end of a log (None: nobody listens).
    on_reconnect: Callable[[Reconnect], None] | None = None
    #: Set while the sink is full (writes fail): the next replay gap is marked ``disk-full``.
    sink_full: bool = False
    #: The pod as the caller's watch delivered it last (the operator's): the first state is read from
    #: it instead of a GET, and a new stream's instance is checked against it while it agrees, so
    #: starting thousands of followers asks the API for nothing but their streams.
    watched: podstate.WatchedPod | None = None
    #: ``kubectl logs --tail``: the first read of the instance followed first starts this many lines
    #: from its end (later instances, and reconnects from the cursor, are read whole). None: the
    #: settings' ``tail_lines``.
    start_tail_lines: int | None = None
    #: ``kubectl logs --since``/``--since-time``: the first read of that instance starts at this RFC3339
    #: time (the kubelet's ``sinceTime``).
    start_since_time: str | None = None
    _moved_on: bool = False
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
        """Read the pod until the container has an instance to read (it may not have started).

        The first look is at the watch's copy, if there is one; the ones after a wait read the pod.
        """
        from_watch = True
        while True:
            state = await self._read_state_through_outages(from_watch=from_watch)
            if state is not None and (state.container_id is not None or not self.follow):
                return state
            from_watch = False
            await self._backoff()

    async def _settle_instance(self, state: podstate.ContainerState) -> None:
        """Make the cursor point at the current instance, first draining instances replaced since."""
        while state.container_id is not None and state.container_id != self.cursor.container_id:
            if self.cursor.container_id is None:
                self.cursor.container_id = state.container_id
                return
            try:
                await self._finish_old_instance(state)
            except InstanceChanged:
                # It restarted again while we read the old instance: ``previous`` is another one now.
                state = await self._read_state_retrying()
                continue
            self.metrics.reconnects.labels("restart").inc()
            return

    async def _finish_old_instance(self, state: podstate.ContainerState) -> None:
        """Read the tail of the cursor's (replaced) instance, then point the cursor at ``state``'s."""
        self._moved_on = True  # --tail/--since chose where the first instance starts, not later ones
        old = self.cursor
        old_id = old.container_id
        self._note("restart", detail=f"container restarted (restartCount {state.restart_count});"
                                     " reading the previous instance's tail, then the new instance")
        if state.previous_id == old_id:
            if not await self.drain(previous=True, gap_if_missing=False) and old.last_ts_ns is not None:
                # The old log lacks the lines we delivered last: it was rotated while we were away,
                # or those lines were the new instance's first ones (the window in the module
                # docstring). Either way the old log's rest cannot be placed: mark it. Resume the new
                # instance after our cursor: it started after the old one's last line, so that skips
                # none of its lines, and repeats none if the cursor's lines were its own.
                await self._gap(GapReason.ROTATION, before_ts_ns=None,
                                detail="the previous instance's log lacks the lines delivered last: it was"
                                       " rotated while disconnected, or they were the new instance's")
                await self._end(EndReason.RESTARTED)
                self.cursor = LogCursor(container_id=state.container_id, last_ts_ns=old.last_ts_ns,
                                        count_at_last=0)
                return
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
        self.cursor = LogCursor(container_id=state.container_id)

    async def _read_state_through_outages(self, *, from_watch: bool = False
                                          ) -> podstate.ContainerState | None:
        """Read the container's state, backing off while the API is unavailable."""
        while True:
            try:
                return await self._read_state(from_watch=from_watch)
            except errors.ApiUnavailable as exc:
                await self._backoff(reason=exc.reason, retry_after=exc.retry_after_s, detail=str(exc))

    async def _read_state_retrying(self) -> podstate.ContainerState:
        state = await self._read_state_through_outages()
        if state is None:
            raise errors.ApiFatal(f"container {self.container!r} is no longer in pod "
                                  f"{self.namespace}/{self.pod}")
        return state

    # -- level 2: one instance across stream ends ---------------------------------------------

    async def follow_once(self) -> tuple[EndReason, podstate.ContainerState]:
        """Follow the cursor's instance until it is replaced, terminated or its pod is gone."""
        while not self.follow:
            try:
                await self.drain(previous=False)
            except InstanceChanged:
                try:
                    state = await self._read_state()
                except errors.ApiUnavailable as exc:
                    await self._backoff(reason=exc.reason, retry_after=exc.retry_after_s,
                                        detail=str(exc))
                    continue
                if state is not None and state.container_id not in (None, self.cursor.container_id):
                    return EndReason.RESTARTED, state
                await self._backoff(reason="restart")  # the apiserver has not caught up yet
                continue
            return EndReason.STOPPED, podstate.ContainerState(
                self.container, self.cursor.container_id, 0, podstate.Phase.TERMINATED, None)
        while True:
            retry_after: float | None = None
            try:
                result = await self.request(follow=True)
            except errors.ApiUnavailable as exc:
                await self._backoff(reason=exc.reason, retry_after=exc.retry_after_s, detail=str(exc))
                continue
            except (errors.LogNotReady, errors.PodGone, InstanceChanged) as exc:
                ended = ("not-ready" if isinstance(exc, errors.LogNotReady)
                         else "restart" if isinstance(exc, InstanceChanged) else "http-error")
                result = RequestResult(ended=ended)
                retry_after = 0.0
            else:
                self.metrics.reconnects.labels(result.ended).inc()
            try:
                state = await self._read_state()
            except errors.ApiUnavailable as exc:
                # Unreadable API: assume the container still runs and reconnect after a pause.
                await self._backoff(reason=exc.reason, retry_after=exc.retry_after_s, detail=str(exc))
                continue
            if state is None:
                raise errors.ApiFatal(f"container {self.container!r} is no longer in pod "
                                      f"{self.namespace}/{self.pod}")
            if state.container_id is not None and state.container_id != self.cursor.container_id:
                return EndReason.RESTARTED, state
            if state.phase is podstate.Phase.TERMINATED:
                try:
                    await self.drain(previous=False)
                except InstanceChanged:
                    continue  # it restarted meanwhile: the next pod read shows the new instance
                return EndReason.TERMINATED, state
            if retry_after is not None or not self._progressed(result):
                await self._backoff(reason=result.ended, retry_after=retry_after or None)
            else:
                self._attempt = 0
                self._note(result.ended)

    def _progressed(self, result: RequestResult) -> bool:
        """Lines came, or the stream stayed open for a whole read timeout: no need to back off."""
        return result.new_lines > 0 or (
            result.ended == "read-timeout" and result.seconds >= self.settings.read_timeout_s * 0.9)

    async def drain(self, *, previous: bool, gap_if_missing: bool = True) -> bool:
        """Read a finished instance's log from the cursor to its true end (not following).

        A read that ends on a line boundary and brings nothing new may still be a
        clean cut (a proxy, a fault, before the first byte even): the end is
        confirmed by asking for the log's last lines (``tailLines``), which must be
        lines we delivered, and by the pod's status, which must still show the
        instance we read (a restart makes ``previous`` another instance). Returns
        False when the log no longer holds the cursor's last lines (marked as a
        gap if ``gap_if_missing``).
        """
        same_partial = 0
        missed_reads = 0
        unanswered = 0
        last_partial = b""
        while True:
            try:
                result = await self.request(follow=False, previous=previous)
            except errors.ApiUnavailable as exc:
                await self._backoff(reason=exc.reason, retry_after=exc.retry_after_s, detail=str(exc))
                continue
            except errors.LogNotReady as exc:
                if previous:  # the previous instance's log is gone already
                    await self._gap(GapReason.RESTARTS, before_ts_ns=None, detail=str(exc))
                    return True
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
                    missed_reads = 0
                    continue
                if result.ended != "eof":
                    # Reset or timed out before anything new: no answer about the log's end yet.
                    self.metrics.reconnects.labels(result.ended).inc()
                    await self._backoff(reason=result.ended)
                    continue
                if not result.replay_missed:
                    ended = await kubelet_checks.tail_ends_at_cursor(
                        self.api, namespace=self.namespace, pod=self.pod, container=self.container,
                        cursor=self.cursor, previous=previous)
                    if ended is None or (ended is False and self._start_limited(previous=previous)):
                        # An empty answer: an empty log, or a cut before the first byte. Or a log whose
                        # lines all lie before where --tail/--since start it: nothing to read.
                        unanswered += 1
                    if ended or unanswered >= _MISSED_READS:
                        await self._confirm_instance(previous=previous)
                        return True
                    continue
                missed_reads += 1
                if missed_reads >= _MISSED_READS:
                    await self._confirm_instance(previous=previous)
                    # The finished log no longer holds our last line: rotated away, with what followed.
                    if gap_if_missing:
                        await self._gap(GapReason.ROTATION, before_ts_ns=None,
                                        detail="the log's end lacks lines already delivered:"
                                               " the file was rotated while disconnected")
                    return False
                continue
            # A partial last line is a cut, not the end: read again from the cursor. Only when the
            # same unfinished line comes back every time is it the log's real, newline-less end.
            same_partial = same_partial + 1 if result.partial == last_partial else 1
            last_partial = result.partial
            if result.new_lines:
                self._attempt = 0
            if same_partial >= self.settings.final_partial_reads:
                await self._deliver_final_partial(result.partial)
                return True
            self.metrics.reconnects.labels(result.ended).inc()
            if not result.new_lines and same_partial > 1:
                await self._backoff(reason=result.ended)

    def _start_limited(self, *, previous: bool) -> bool:
        """Whether the reads so far were limited by ``start_tail_lines``/``start_since_time``."""
        return (not previous and not self._moved_on and self.cursor.last_ts_ns is None
                and (self.start_tail_lines is not None or self.start_since_time is not None))

    async def _confirm_instance(self, *, previous: bool) -> None:
        """Raise :class:`InstanceChanged` unless the pod still shows the cursor's instance there."""
        state = None
        while True:
            try:
                state = await self._read_state()
                break
            except errors.PodGone:
                return  # nothing more can be read anyway
            except errors.ApiUnavailable as exc:
                await self._backoff(reason=exc.reason, retry_after=exc.retry_after_s, detail=str(exc))
        ours = self.cursor.container_id
        shown = (state.previous_id if previous else state.container_id) if state is not None else None
        if ours is not None and shown != ours and (previous or shown is not None):
            raise InstanceChanged(f"{self.container}: {'previous' if previous else 'current'} instance"
                                  f" is now {shown}, not {ours}")

    async def _deliver_final_partial(self, partial: bytes) -> None:
        parser = lines.StreamParser(container=self.container, cursor=self.cursor)
        batch = parser.feed(partial + b"\n")
        if batch is not None:
            await self.sink.write(self.container, batch, self.cursor)
            self.metrics.lines.inc(batch.n_lines)
            self.metrics.bytes.inc(len(batch.raw))

    # -- level 3: one request ------------------------------------------------------------------

    async def request(self, *, follow: bool, previous: bool = False) -> RequestResult:
        """One log request from the cursor, read to its end; complete new lines go to the sink.

        Raises :class:`InstanceChanged`, with nothing delivered and the cursor as it was,
        when the stream turns out to serve a newer instance than the cursor's.
        """
        cursor = self.cursor
        limit = self.settings.limit_bytes
        if limit is not None:
            limit = limit * self._limit_growth or None  # growth 0: this one request goes unlimited
        since = cursor.since_time_param()
        first = cursor.last_ts_ns is None and not previous
        tail = self.settings.tail_lines if first else None
        if first and not self._moved_on:
            since = since or self.start_since_time
            tail = self.start_tail_lines if self.start_tail_lines is not None else tail
        parser = lines.StreamParser(container=self.container, cursor=cursor,
                                    split_lines=getattr(self.sink, "splits_lines", False))
        # The kubelet serves whatever instance runs now (or ran before it): maybe not the cursor's.
        saved = cursor.copy()
        loop = asyncio.get_running_loop()
        started = loop.time()
        result = RequestResult(ended="eof")
        sink, metrics, container = self.sink, self.metrics, self.container
        gap_checked = False

        async def deliver(batch: lines.LineBatch) -> None:
            nonlocal gap_checked
            if not gap_checked:
                gap_checked = True
                if parser.replay_missed or saved.last_ts_ns is None:
                    await self._check_instance(saved, previous=previous)
                if parser.replay_missed and self.sink_full:
                    await self._gap(GapReason.DISK_FULL, after_ts_ns=parser.resumed_after_ns,
                                    before_ts_ns=batch.first_ts_ns,
                                    detail="the log store's volume was full; when space returned the"
                                           " kubelet no longer had the lines written meanwhile")
                elif parser.replay_missed:
                    await self._gap(GapReason.ROTATION, after_ts_ns=parser.resumed_after_ns,
                                    before_ts_ns=batch.first_ts_ns,
                                    detail="the reconnect's replay lacks lines already delivered:"
                                           " the log file was rotated while disconnected")
            try:
                await sink.write(container, batch, cursor)
            except SinkFull as exc:
                raise errors.SinkPaused(str(exc)) from exc
            if self.sink_full:
                self.sink_full = False
                self._note("disk-ok")
            result.new_lines += batch.n_lines
            metrics.lines.inc(batch.n_lines)
            metrics.bytes.inc(len(batch.raw))
            metrics.lag.observe(max(0.0, time.time() - batch.last_ts_ns / timestamps.NS_PER_SECOND))

        async with self.api.open_log(
            namespace=self.namespace, name=self.pod, container=container,
            follow=follow, previous=previous, since_time=since, limit_bytes=limit,
            tail_lines=tail,
        ) as body:
            try:
                try:
                    while True:
                        data = await body.readany()
                        if not data:
                            break
                        batch = parser.feed(data)
                        if batch is not None:
                            await deliver(batch)
                except (TimeoutError, aiohttp.ServerTimeoutError):
                    result.ended = "read-timeout"
                except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, ConnectionError):
                    result.ended = "reset"
                if result.ended == "eof":
                    batch = parser.finish()  # lines held while deciding replays: a clean end settles them
                    if batch is not None:
                        await deliver(batch)
            except errors.SinkPaused:
                # Lines before the failed batch were kept: resume from what the sink holds.
                self.sink_full = True
                self.cursor = await self.sink.load_cursor(container) or saved
                raise
            except (InstanceChanged, errors.ApiUnavailable):
                self.cursor = saved  # nothing of this stream was delivered
                raise
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

    async def _check_instance(self, saved: LogCursor, *, previous: bool) -> None:
        """Raise :class:`InstanceChanged` if the stream may serve another instance than ``saved``'s.

        Called before a stream's first delivery when its replay did not prove it
        (see the module docstring). Raises :class:`errors.ApiUnavailable` when
        neither the pod nor the kubelet can be asked: the stream is then retried.
        A ``previous=true`` stream is checked against ``lastState`` only.
        """
        try:
            if not previous and saved.last_ts_ns is None and self._watch_agrees(saved):
                return  # a new instance's first stream, and the watch shows that instance still
            state = await self._read_state()
        except errors.PodGone:
            return  # the pod is gone: its last lines are kept rather than dropped
        if previous:
            if state is None or state.previous_id != saved.container_id:
                raise InstanceChanged(f"{self.container}: the previous instance is now "
                                      f"{state.previous_id if state else 'gone'}")
            return
        if state is None or state.container_id not in (None, saved.container_id):
            raise InstanceChanged(f"{self.container}: now {state.container_id if state else 'gone'}")
        if saved.last_ts_ns is not None and await kubelet_checks.previous_holds(
                self.api, namespace=self.namespace, pod=self.pod, container=self.container, saved=saved):
            raise InstanceChanged(f"{self.container}: the kubelet's previous instance holds our cursor")

    async def _after_limit(self, result: RequestResult, parser: lines.StreamParser) -> None:
        """A ``limitBytes`` cut: resume normally, unless one line alone exceeds the limit."""
        if result.new_lines:
            self._limit_growth = 1
            return
        if self._limit_growth < _LIMIT_GROWTH_MAX:
            self._limit_growth *= 2  # a second's replay or one long line is larger: ask for more
            return
        if len(parser.partial) < parser.bytes_seen:
            # Replayed lines before the cut (a second's replay exceeds the largest limit): read once
            # without a limit.
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

    def _watch_agrees(self, saved: LogCursor) -> bool:
        """The watch's latest copy of the pod shows the cursor's instance as this container's current one."""
        if self.watched is None or saved.container_id is None:
            return False
        body = self.watched.body
        if self.container not in podstate.container_names(body):
            return False
        return podstate.container_state(body, self.container).container_id == saved.container_id

    async def _read_state(self, *, from_watch: bool = False) -> podstate.ContainerState | None:
        """The container's state: from the watch's copy when ``from_watch`` and there is one, else read."""
        if from_watch and self.watched is not None:
            pod = dict(self.watched.body)
        else:
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
        try:
            await self.sink.gap(marker)
        except SinkFull as exc:
            raise errors.SinkPaused(str(exc)) from exc
        self.metrics.gaps.labels(reason.value).inc()

    def _note(self, reason: str, *, delay_s: float = 0.0, detail: str = "") -> None:
        if self.on_reconnect is not None:
            self.on_reconnect(Reconnect(self.container, reason, delay_s, detail))

    async def _backoff(self, *, reason: str | None = None, retry_after: float | None = None,
                       detail: str = "") -> None:
        """Sleep 2 s doubling to 30 s (by default), shortened by jitter; at least ``Retry-After``.

        ``reason`` counts the wait as a reconnect of that kind (metric and note).
        """
        s = self.settings
        delay = s.backoff(self._attempt) * (1.0 - s.backoff_jitter * self.rng.random())
        self._attempt += 1
        if retry_after is not None:
            delay = max(delay, min(retry_after, s.backoff_max_s * 10))
        if reason is not None:
            if reason in ("api-unavailable", "disk-full"):
                self.metrics.reconnects.labels(reason).inc()
            self._note(reason, delay_s=delay, detail=detail)
        await asyncio.sleep(delay)


async def read_pod(
    *,
    api: PodLogApi,
    namespace: str,
    pod: str,
    settings: FollowSettings | None = None,
    rng: random.Random | None = None,
    on_reconnect: Callable[[Reconnect], None] | None = None,
) -> dict[str, Any]:
    """Read the pod, backing off and retrying while the API is unreadable (5xx, 429, network).

    Gives up after ``settings.start_attempts`` reads, if set. Raises
    :class:`errors.PodGone` (404) and :class:`errors.ApiFatal` at once.
    """
    settings = settings or FollowSettings()
    rng = rng or _JITTER
    attempt = 0
    while True:
        try:
            return await api.read_pod(namespace=namespace, name=pod)
        except errors.ApiUnavailable as exc:
            if settings.start_attempts is not None and attempt + 1 >= settings.start_attempts:
                raise
            delay = settings.backoff(attempt) * (1.0 - settings.backoff_jitter * rng.random())
            if exc.retry_after_s is not None:
                delay = max(delay, min(exc.retry_after_s, settings.backoff_max_s * 10))
            attempt += 1
            if on_reconnect is not None:
                on_reconnect(Reconnect("*", "api-unavailable", delay, str(exc)))
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
    on_reconnect: Callable[[Reconnect], None] | None = None,
    watched: podstate.WatchedPod | None = None,
    start_tail_lines: int | None = None,
    start_since_time: str | None = None,
) -> dict[str, LogEnd]:
    """Follow the chosen containers of a pod (all by default) until each one's log is over.

    ``watched``: the pod as the caller's watch delivered it last, kept current by the caller; the
    containers and their first states are read from it, with no GET, and so is each new instance's
    check while it agrees (`ContainerFollower._check_instance`). Raises :class:`errors.PodGone` when
    the pod does not exist at the start, and :class:`errors.ApiFatal` for unknown container names or
    a refused request. ``start_tail_lines``, ``start_since_time``: where each container's first read
    starts (``kubectl logs --tail``, ``--since``).
    """
    settings = settings or FollowSettings()
    metrics = metrics or for_registry()
    body = (dict(watched.body) if watched is not None
            else await read_pod(api=api, namespace=namespace, pod=pod, settings=settings, rng=rng))
    names = podstate.container_names(body)
    if containers:
        unknown = [c for c in containers if c not in names]
        if unknown:
            raise errors.ApiFatal(f"container {unknown[0]!r} is not in pod {namespace}/{pod};"
                                  f" it has: {', '.join(names) or 'none'}")
        names = list(containers)
    followers = [
        ContainerFollower(api=api, namespace=namespace, pod=pod, container=name, sink=sink,
                          settings=settings, metrics=metrics, follow=follow, on_reconnect=on_reconnect,
                          rng=random.Random(rng.random()) if rng is not None else _JITTER,
                          watched=watched, start_tail_lines=start_tail_lines,
                          start_since_time=start_since_time)
        for name in names
    ]
    del body  # this frame lives as long as the followers
    # One task per container, as a group: the first to fail stops the others and is raised here.
    tasks = Background(f"follow-{namespace}/{pod}")
    started = {f.container: tasks.start(f.follow_forever(), name=f.container) for f in followers}
    await tasks.join()
    return {name: task.result() for name, task in started.items()}
