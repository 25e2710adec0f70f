"""Property: for any schedule of faults, every produced line is delivered once, in order.

A pod writes thousands of lines a second, many sharing one timestamp, while
the emulated kubelet works through a random schedule of faults: clean EOFs
(after N lines, inside a line, after T seconds), stalls until the read
timeout, 500/503/429 with Retry-After, resets, container restarts, rotations
while the follower is away, and ``limitBytes`` cuts on every request. Pod reads
fail at random too. The delivered lines must equal the produced ones exactly,
except lines lost to a rotation, which must sit behind a gap marker (see
:mod:`exactly_once`). Time is real but tiny: backoffs of milliseconds, a read
timeout of a quarter second.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from podmortem.kube.config import ClusterAccess
from podmortem.logs.events import EndReason
from podmortem.logs.following.follower import follow_pod
from podmortem.logs.following.pod_log_api import PodLogApi, SessionTransport
from podmortem.logs.metrics import LogMetrics
from podmortem.logs.settings import FollowSettings
from podmortem_demo.emulated import awkward_text, faults, plain_text, repetitive_text, running_cluster

from .conftest import RecordingSink
from .exactly_once import check

T = TypeVar("T")
SETTINGS = FollowSettings(
    read_timeout_s=0.25, connect_timeout_s=5, pod_read_timeout_s=5, backoff_min_s=0.002, backoff_max_s=0.01
)
#: A whole scenario may not take longer than this (real seconds); a hang is a failure, not a timeout.
SCENARIO_LIMIT_S = 30
#: Random schedules to try instead of CI's fixed 30 (environment ``PODMORTEM_SCHEDULES``).
WIDE_SEARCH = int(os.environ.get("PODMORTEM_SCHEDULES", "0"))
#: Writes of ``live_lines`` each (3 ms apart) while following.
LIVE_WRITES = 25

TEXTS = {"plain": plain_text, "awkward": awkward_text, "repetitive": repetitive_text}
cut = st.integers(0, 40)
log_faults = st.one_of(
    st.builds(faults.EofAfter, lines=st.integers(0, 300), extra_bytes=cut),
    st.builds(faults.EofAfterSeconds, seconds=st.sampled_from([0.0, 0.005, 0.03])),
    st.builds(faults.Stall, after_lines=st.integers(0, 200), extra_bytes=cut),
    st.builds(faults.Reset, after_lines=st.integers(0, 200), extra_bytes=cut),
    st.builds(
        faults.HttpError,
        status=st.sampled_from([500, 503, 429]),
        retry_after=st.sampled_from([None, 0.0, 0.005]),
    ),
    st.builds(faults.Restart, after_lines=st.integers(0, 200), new_lines=st.integers(0, 200)),
    # keep > 0: the new file starts inside the last burst of lines that share one timestamp.
    st.builds(faults.Rotate, write_before=st.integers(0, 200), keep=st.sampled_from([0, 0, 1, 3])),
    st.builds(faults.Write, lines=st.integers(1, 300)),
)
pod_read_faults = st.lists(
    st.one_of(
        st.none(),
        st.builds(
            faults.HttpError,
            status=st.sampled_from([500, 503, 429]),
            retry_after=st.sampled_from([None, 0.005]),
        ),
    ),
    max_size=8,
)


def at_most_stalls(schedule: list[faults.LogFault], n: int = 2) -> bool:
    """Each stall costs a real read timeout; a few are enough to cover the case."""
    return sum(isinstance(f, faults.Stall) for f in schedule) <= n


@dataclasses.dataclass(frozen=True)
class Scenario:
    schedule: list[faults.LogFault]
    pod_faults: list[faults.HttpError | None]
    initial_lines: int
    live_lines: int
    limit_bytes: int | None
    #: Line texts: plain (unique), awkward (\r, ANSI, invalid UTF-8, 17 KiB), repetitive (identical).
    text: str
    max_burst: int
    max_step_ns: int


scenarios = st.builds(
    Scenario,
    schedule=st.lists(log_faults, max_size=10).filter(at_most_stalls),
    pod_faults=pod_read_faults,
    initial_lines=st.integers(0, 600),
    live_lines=st.sampled_from([0, 0, 3, 40]),
    limit_bytes=st.sampled_from([None, None, None, 2048, 9000]),
    text=st.sampled_from(["plain", "awkward", "repetitive"]),
    # Many lines per timestamp and many per second (a reconnect replays the rest of the second),
    # or fewer, slower lines that cross second boundaries.
    max_burst=st.sampled_from([1, 8, 40]),
    max_step_ns=st.sampled_from([200_000, 2_000_000, 300_000_000]),
)


def run_isolated(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` in a loop of its own, leaving the thread's current loop alone.

    ``asyncio.run`` ends by setting the current loop to None, and pytest-asyncio's
    loop for this module is then never closed: run alone, the module failed at exit
    on an unclosed-event-loop warning.
    """
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


async def run_scenario(sc: Scenario) -> tuple[RecordingSink, LogMetrics, object]:
    async with running_cluster() as (api, url):
        pod = api.add_pod(
            "p",
            text=TEXTS[sc.text],
            max_burst=sc.max_burst,
            max_step_ns=sc.max_step_ns,
        )
        main = pod.containers["main"]
        main.write(sc.initial_lines)
        schedule = sc.schedule
        if sc.text == "repetitive":
            # Identical lines with one timestamp cannot be told apart: where a rotation inside
            # their burst starts the new file is unknowable, so only rotations between bursts.
            schedule = [dataclasses.replace(f, keep=0) if isinstance(f, faults.Rotate) else f
                        for f in schedule]
        main.faults.extend(schedule)
        main.terminate_when_faults_done = True
        pod.pod_faults.extend(sc.pod_faults)

        async def live_writer() -> None:
            # The container keeps writing for a while as it is followed (not for ever: a stream
            # without a fault then never ends, and only a new request terminates the container).
            for _ in range(LIVE_WRITES if sc.live_lines else 0):
                if main.current.exit_code is None:
                    main.write(sc.live_lines)
                await asyncio.sleep(0.003)

        settings = dataclasses.replace(SETTINGS, limit_bytes=sc.limit_bytes)
        sink = RecordingSink()
        metrics = LogMetrics(CollectorRegistry())
        async with SessionTransport(ClusterAccess(server=url, authorization="Bearer test")) as transport:
            writer = asyncio.create_task(live_writer())
            try:
                async with asyncio.timeout(SCENARIO_LIMIT_S):
                    ends = await follow_pod(
                        api=PodLogApi(transport, settings=settings),
                        namespace="default",
                        pod="p",
                        sink=sink,
                        settings=settings,
                        metrics=metrics,
                        rng=random.Random(3),
                    )
            finally:
                writer.cancel()
                await asyncio.gather(writer, return_exceptions=True)
        assert ends["main"].reason is EndReason.TERMINATED
        return sink, metrics, main


def pinned(
    schedule: list[faults.LogFault],
    initial_lines: int,
    *,
    pod_faults: list[faults.HttpError | None] | None = None,
) -> Scenario:
    return Scenario(
        schedule=schedule,
        pod_faults=pod_faults or [],
        initial_lines=initial_lines,
        live_lines=0,
        limit_bytes=None,
        text="plain",
        max_burst=1,
        max_step_ns=200_000,
    )


E0 = faults.EofAfter(0)


# CI runs the same 30 schedules every time (derandomized). A wider random search, by hand:
# PODMORTEM_SCHEDULES=300 python3 -m pytest tests/logs/test_fault_schedules.py -k any_fault
# What such searches found is pinned below as examples, or as tests after this one.
@settings(
    max_examples=WIDE_SEARCH or 30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=not WIDE_SEARCH,
)
@given(sc=scenarios)
# Failures the property found once, kept as fixed examples.
@example(sc=pinned([], 0, pod_faults=[faults.HttpError(500)]))
@example(sc=pinned([], 0, pod_faults=[None, faults.HttpError(500)]))
@example(sc=pinned([faults.Restart(after_lines=0, new_lines=0), E0], 1))
@example(
    sc=pinned(
        [
            E0,
            E0,
            faults.EofAfter(41),
            faults.Restart(after_lines=0, new_lines=0),
            E0,
            faults.EofAfterSeconds(0.0),
            E0,
            faults.EofAfterSeconds(0.0),
            E0,
            E0,
        ],
        463,
    )
)
@example(
    sc=pinned(
        [
            faults.EofAfterSeconds(0.0),
            faults.Restart(after_lines=0, new_lines=0),
            faults.Restart(after_lines=0, new_lines=0),
        ],
        1,
    )
)
def test_any_fault_schedule_delivers_every_line_once(sc: Scenario) -> None:
    sink, metrics, main = run_isolated(run_scenario(sc))
    # Two restarts in a row (one while the previous instance is drained) may lose an instance's
    # rest for good: the API reads only the current and the previous instance. That is a RESTARTS gap.
    restarts = sum(isinstance(f, faults.Restart) for f in sc.schedule)
    outcome = check(sink.events, main, allow_restarts_gap=restarts >= 2)  # type: ignore[arg-type]
    # Every produced line is accounted for: delivered, or lost behind a rotation gap marker.
    produced = sum(len(inst.log) for inst in main.instances)  # type: ignore[attr-defined]
    assert outcome.delivered + len(outcome.lost) + len(outcome.unseen) == produced
    assert metrics.lines._value.get() == outcome.delivered
    assert metrics.gaps.labels("rotation")._value.get() == outcome.gaps
    assert metrics.gaps.labels("restarts")._value.get() == outcome.restarts_gaps
    if not any(isinstance(f, faults.Rotate) for f in sc.schedule):
        assert outcome.unseen == [] and outcome.gaps == 0
    if outcome.restarts_gaps == 0:
        assert outcome.lost == [] or any(isinstance(f, faults.Rotate) for f in sc.schedule)


# -- cases the property found or that random schedules reach too rarely, pinned -------------------------


async def follow_to_end(url: str, settings: FollowSettings = SETTINGS) -> RecordingSink:
    sink = RecordingSink()
    async with SessionTransport(ClusterAccess(server=url, authorization="Bearer test")) as transport:
        async with asyncio.timeout(SCENARIO_LIMIT_S):
            await follow_pod(
                api=PodLogApi(transport, settings=settings),
                namespace="default",
                pod="p",
                sink=sink,
                settings=settings,
                metrics=LogMetrics(CollectorRegistry()),
                rng=random.Random(3),
            )
    return sink


def test_rotation_keeping_the_tail_of_a_burst_gives_no_false_gap() -> None:
    """Found by a random search: the new file keeps only the last line of a two-line burst, and ends.

    The replay ends on our last line with fewer of its burst than we delivered; counting alone
    took that for lines we lack and marked a rotation gap where nothing was lost.
    """
    sc = Scenario(schedule=[faults.Write(lines=2), faults.Rotate(write_before=0, keep=1)], pod_faults=[],
                  initial_lines=0, live_lines=0, limit_bytes=None, text="plain", max_burst=8,
                  max_step_ns=200000)
    sink, _metrics, main = run_isolated(run_scenario(sc))
    check(sink.events, main)


async def test_rotation_inside_a_burst_of_one_timestamp_is_not_silent() -> None:
    """The new file starts in the middle of a burst of lines that share the cursor's timestamp.

    Counting lines at the cursor's timestamp then skips lines of the new file as if they were
    the ones already delivered: they are lost, and nothing says so.
    """
    async with running_cluster() as (api, url):
        pod = api.add_pod("p", max_burst=10_000)  # a write of 10 lines is one burst: one timestamp
        main = pod.containers["main"]
        main.write(10)
        assert len({ts for ts, _ in main.current.log.lines()}) == 1
        # Deliver 4 of the burst; while away the file rotates: only the last 5 lines stay.
        main.faults.extend([faults.EofAfter(4), faults.Rotate(write_before=0, keep=5), faults.Write(3)])
        main.terminate_when_faults_done = True
        sink = await follow_to_end(url)
    outcome = check(sink.events, main)
    assert outcome.delivered == 4 + 5 + 3 and len(outcome.lost) == 1


@pytest.mark.parametrize("text", [b"", b"tick"])
async def test_identical_lines_sharing_a_timestamp_are_counted_not_matched(text: bytes) -> None:
    """Ten identical lines with one timestamp, cut after four: a resume delivers exactly six more.

    A checksum of the last line matches the first of the identical replayed lines too; only
    the count says which of them were delivered.
    """
    async with running_cluster() as (api, url):
        pod = api.add_pod("p")
        main = pod.containers["main"]
        burst_ts = pod.clock.stamps(1)[0]
        main.current.log.append([(burst_ts, text)] * 10)
        main.faults.extend([faults.EofAfter(4), faults.EofAfter(7, extra_bytes=3), faults.Write(2)])
        main.terminate_when_faults_done = True
        sink = await follow_to_end(url)
    outcome = check(sink.events, main)
    assert outcome.delivered == 12 and outcome.gaps == 0
