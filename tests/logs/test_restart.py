"""Restarts of the follower itself: it resumes from the durable store with no loss and no duplicate.

In the operator, a follower dies with its process (a rollout, an OOM kill, a
node drain). Here it is cancelled mid-stream, at a random moment while lines
pour in, and a new follower is started on the same store directory, reopened.
The stored log must then be the container's log exactly, across several such
restarts, across a container restart in between, and with faults on the way.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from podmortem.logs.events import EndReason
from podmortem.logs.following.follower import follow_pod
from podmortem.logs.following.pod_log_api import PodLogApi
from podmortem.logs.metrics import LogMetrics
from podmortem.logs.storage.store import LogStore, StoreSettings
from podmortem_demo.emulated import PodLogsApi, awkward_text, faults

from .conftest import FAST
from .exactly_once import check
from .stored import stored_events, until

NO_FSYNC = StoreSettings(fsync_interval_s=None)


async def follow_until_cancelled(
    store_dir: Path, pod_api: PodLogApi, log_metrics: LogMetrics, *, after_lines: int
) -> int:
    """Follow into the store; cancel once it holds ``after_lines`` more lines. Returns lines stored."""
    async with LogStore(store_dir, settings=NO_FSYNC) as log_store:
        sink = log_store.sink(namespace="default", pod="p")
        task = asyncio.create_task(
            follow_pod(
                api=pod_api, namespace="default", pod="p", sink=sink, settings=FAST, metrics=log_metrics
            )
        )
        await until(lambda: log_store.lines_total >= after_lines or task.done())
        assert not task.done(), "the follower ended before it could be stopped mid-stream"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return log_store.lines_total


async def writer(pod_api_pod: object, container: object, *, stop: asyncio.Event) -> None:
    while not stop.is_set():
        container.write(37)  # type: ignore[attr-defined]
        await asyncio.sleep(0.002)


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_cancelled_follower_resumes_from_the_reopened_store(
    cluster: tuple[PodLogsApi, str],
    pod_api: PodLogApi,
    log_metrics: LogMetrics,
    tmp_path: Path,
    seed: int,
) -> None:
    api, _ = cluster
    rng = random.Random(seed)
    pod = api.add_pod("p", text=awkward_text, seed=seed, max_burst=30, max_step_ns=500_000)
    main = pod.containers["main"]
    main.write(3000)
    stop = asyncio.Event()
    live = asyncio.create_task(writer(pod, main, stop=stop))
    try:
        stored = 0
        for round_ in range(3):
            stored = await follow_until_cancelled(
                tmp_path, pod_api, log_metrics, after_lines=rng.randint(1, 2500)
            )
            assert stored > 0
            if round_ == 1:
                main.restart(new_lines=rng.randint(0, 500))  # the container restarts while no one follows
            main.faults.append(faults.EofAfter(rng.randint(0, 200), extra_bytes=rng.randint(0, 30)))
    finally:
        stop.set()
        await live
    main.faults.append(faults.Reset(50, extra_bytes=3))
    main.terminate_when_faults_done = True
    async with LogStore(tmp_path, settings=NO_FSYNC) as log_store:
        ends = await follow_pod(
            api=pod_api,
            namespace="default",
            pod="p",
            sink=log_store.sink(namespace="default", pod="p"),
            settings=FAST,
            metrics=log_metrics,
        )
        assert ends["main"].reason is EndReason.TERMINATED
    async with LogStore(tmp_path, read_only=True) as log_store:
        events = await stored_events(log_store)
    outcome = check(events, main)
    assert outcome.delivered == sum(len(inst.log) for inst in main.instances)
    assert [e.reason for e in outcome.ends] == [EndReason.RESTARTED, EndReason.TERMINATED]


async def test_stopped_right_after_a_restart_drains_the_previous_instance_on_resume(
    cluster: tuple[PodLogsApi, str],
    pod_api: PodLogApi,
    log_metrics: LogMetrics,
    tmp_path: Path,
) -> None:
    api, _ = cluster
    pod = api.add_pod("p")
    main = pod.containers["main"]
    main.write(4000)
    await follow_until_cancelled(tmp_path, pod_api, log_metrics, after_lines=1)
    # While the follower is down, the old instance's tail stays unread and a new one starts.
    main.restart(new_lines=300)
    main.terminate_when_faults_done = True
    async with LogStore(tmp_path, settings=NO_FSYNC) as log_store:
        await follow_pod(
            api=pod_api,
            namespace="default",
            pod="p",
            sink=log_store.sink(namespace="default", pod="p"),
            settings=FAST,
            metrics=log_metrics,
        )
    async with LogStore(tmp_path, read_only=True) as log_store:
        outcome = check(await stored_events(log_store), main)
    assert outcome.delivered == 4300 and outcome.gaps == 0


async def test_rotation_inside_a_burst_across_a_follower_restart_is_not_silent(
    cluster: tuple[PodLogsApi, str],
    pod_api: PodLogApi,
    log_metrics: LogMetrics,
    tmp_path: Path,
) -> None:
    """The last line's checksum must survive in the store, or a resumed follower counts blindly.

    4 of 10 lines sharing one timestamp are stored; the follower stops; the file rotates and keeps
    only the last 5. A follower resumed from the store must find where it was (or say it cannot):
    with the count alone it would skip 4 lines of the new file as replays, silently.
    """
    api, _ = cluster
    pod = api.add_pod("p")
    main = pod.containers["main"]
    burst_ts = pod.clock.stamps(1)[0]
    main.current.log.append([(burst_ts, b"burst %d" % i) for i in range(4)])
    await follow_until_cancelled(tmp_path, pod_api, log_metrics, after_lines=4)
    main.current.log.append([(burst_ts, b"burst %d" % i) for i in range(4, 10)])
    main.rotate(keep=5)
    main.write(3)
    main.terminate_when_faults_done = True
    async with LogStore(tmp_path, settings=NO_FSYNC) as log_store:
        await follow_pod(
            api=pod_api,
            namespace="default",
            pod="p",
            sink=log_store.sink(namespace="default", pod="p"),
            settings=FAST,
            metrics=log_metrics,
        )
    async with LogStore(tmp_path, read_only=True) as log_store:
        outcome = check(await stored_events(log_store), main)
    assert outcome.delivered == 4 + 5 + 3 and len(outcome.lost) == 1 and outcome.gaps == 1
