"""A follower given the pod as the watch delivered it reads the pod only where the watch cannot answer.

At an operator's start every followed pod comes in the watch's list; reading each again (once for
its containers, once per container for its first state, once per new stream for the instance it
serves) was three requests per pod, beside the stream itself. With the watch's copy (kept current by
the operator at every event) the follower starts from it and checks a new instance's first stream
against it; a watch that disagrees with the follower is settled by a read, and so is every stream
end. Every line is still stored once, across the same faults.
"""

from __future__ import annotations

import asyncio
from typing import Any

from podmortem.logs.cursor import LogCursor
from podmortem.logs.following.follower import ContainerFollower, follow_pod
from podmortem.logs.following.outcomes import InstanceChanged
from podmortem.logs.following.pod_log_api import PodLogApi
from podmortem.logs.following.podstate import WatchedPod
from podmortem.logs.metrics import LogMetrics
from podmortem_demo.emulated import PodLogsApi, faults

from .conftest import FAST, RecordingSink


def _pod_reads(api: PodLogsApi, name: str) -> int:
    return sum(1 for r in api if r.method == "GET" and r.url.path.rstrip("/").endswith(f"/pods/{name}"))


async def _body(pod_api: PodLogApi, name: str) -> dict[str, Any]:
    return await pod_api.read_pod(namespace="default", name=name)


async def _reads_to_follow(api: PodLogsApi, pod_api: PodLogApi, log_metrics: LogMetrics, name: str, *,
                           watched: bool) -> tuple[int, RecordingSink]:
    emulated = api.add_pod(name, containers=("a", "b"))
    for container in ("a", "b"):
        emulated.containers[container].write(20)
    body = await _body(pod_api, name) if watched else None
    before = _pod_reads(api, name)
    sink = RecordingSink()
    ends = await follow_pod(api=pod_api, namespace="default", pod=name, sink=sink, settings=FAST,
                            metrics=log_metrics, follow=False,
                            watched=WatchedPod(body) if body is not None else None)
    assert set(ends) == {"a", "b"}
    return _pod_reads(api, name) - before, sink


async def test_a_watched_pod_is_not_read_to_start_nor_to_check_its_first_streams(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, log_metrics: LogMetrics
) -> None:
    """Five reads fewer for a pod of two containers: its containers, each one's first state, and each
    first stream's instance (which the watch shows). What stays, reading without following, is one
    read per container after its log ended, to confirm the instance it read: that must be fresh."""
    api, _ = cluster
    unwatched, plain = await _reads_to_follow(api, pod_api, log_metrics, "unwatched", watched=False)
    watched, sink = await _reads_to_follow(api, pod_api, log_metrics, "watched", watched=True)
    assert (unwatched, watched) == (7, 2)
    assert len(sink.texts("a")) == len(plain.texts("a")) == 20 and len(sink.texts("b")) == 20


def _follower(pod_api: PodLogApi, log_metrics: LogMetrics, name: str, watched: dict[str, Any]
              ) -> ContainerFollower:
    return ContainerFollower(api=pod_api, namespace="default", pod=name, container="a", sink=RecordingSink(),
                             settings=FAST, metrics=log_metrics, watched=WatchedPod(watched))


def _with_container_id(body: dict[str, Any], container_id: str) -> dict[str, Any]:
    statuses = [dict(cs, containerID=container_id) for cs in body["status"]["containerStatuses"]]
    return {**body, "status": {**body["status"], "containerStatuses": statuses}}


async def test_a_watch_that_disagrees_is_settled_by_reading_the_pod(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, log_metrics: LogMetrics
) -> None:
    api, _ = cluster
    emulated = api.add_pod("asked", containers=("a",))
    emulated.containers["a"].write(3)
    body = await _body(pod_api, "asked")
    real = body["status"]["containerStatuses"][0]["containerID"]
    saved = LogCursor(container_id=real)

    agreeing = _follower(pod_api, log_metrics, "asked", body)
    before = _pod_reads(api, "asked")
    await agreeing._check_instance(saved, previous=False)
    assert _pod_reads(api, "asked") == before  # the watch shows the cursor's instance: no read

    # The watch shows another instance than the cursor's: the pod is read, and it shows ours: fine.
    lagging = _follower(pod_api, log_metrics, "asked", _with_container_id(body, "containerd://other"))
    await lagging._check_instance(saved, previous=False)
    assert _pod_reads(api, "asked") == before + 1

    # The pod restarted; the watch caught up with it: read, and the stream is not taken for ours.
    emulated.containers["a"].restart(new_lines=2)
    restarted = await _body(pod_api, "asked")
    caught_up = _follower(pod_api, log_metrics, "asked", restarted)
    try:
        await caught_up._check_instance(saved, previous=False)
    except InstanceChanged:
        pass
    else:
        raise AssertionError("a stream of the new instance was taken for the cursor's")
    assert _pod_reads(api, "asked") == before + 3


async def test_a_cursor_with_lines_is_checked_by_reading_even_when_the_watch_agrees(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, log_metrics: LogMetrics
) -> None:
    """A reconnect whose replay missed the cursor is where a restart hides: always read fresh."""
    api, _ = cluster
    emulated = api.add_pod("reconnect", containers=("a",))
    emulated.containers["a"].write(3)
    body = await _body(pod_api, "reconnect")
    real = body["status"]["containerStatuses"][0]["containerID"]
    follower = _follower(pod_api, log_metrics, "reconnect", body)
    before = _pod_reads(api, "reconnect")
    await follower._check_instance(LogCursor(container_id=real, last_ts_ns=1, count_at_last=1),
                                   previous=False)
    assert _pod_reads(api, "reconnect") >= before + 1


async def test_a_stream_end_after_a_watched_start_reads_the_pod_and_loses_nothing(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, log_metrics: LogMetrics
) -> None:
    api, _ = cluster
    emulated = api.add_pod("cut", containers=("a",))
    main = emulated.containers["a"]
    main.write(100)
    main.faults.extend([faults.EofAfter(40), faults.Write(30)])
    body = await _body(pod_api, "cut")
    sink = RecordingSink()
    task = asyncio.create_task(follow_pod(api=pod_api, namespace="default", pod="cut", sink=sink,
                                          settings=FAST, metrics=log_metrics, watched=WatchedPod(body)))
    for _ in range(400):
        if len(sink.texts("a")) >= 130:
            break
        await asyncio.sleep(0.01)
    emulated.delete()
    await task
    texts = sink.texts("a")
    assert len(texts) == 130 and len(set(texts)) == 130
    assert _pod_reads(api, "cut") >= 1  # the read after the cut
