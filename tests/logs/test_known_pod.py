"""A follower given the pod as the watch delivered it does not read it again to start.

At an operator's start every followed pod comes in the watch's list; reading each again (once for
its containers, once per container for its first state) was one request per pod and one per
container more than needed. With the body the follower starts from it; the reads that must be
fresh (the instance a new stream serves, and the pod after a stream ends) stay, and every line is
still stored once, across the same faults.
"""

from __future__ import annotations

import asyncio
from typing import Any

from podmortem.logs.following.follower import follow_pod
from podmortem.logs.following.pod_log_api import PodLogApi
from podmortem.logs.metrics import LogMetrics
from podmortem_demo.emulated import PodLogsApi, faults

from .conftest import FAST, RecordingSink


def _pod_reads(api: PodLogsApi, name: str) -> int:
    return sum(1 for r in api if r.method == "GET" and r.url.path.rstrip("/").endswith(f"/pods/{name}"))


async def _body(pod_api: PodLogApi, name: str) -> dict[str, Any]:
    return await pod_api.read_pod(namespace="default", name=name)


async def _reads_to_follow(api: PodLogsApi, pod_api: PodLogApi, log_metrics: LogMetrics, name: str, *,
                           known: bool) -> tuple[int, RecordingSink]:
    emulated = api.add_pod(name, containers=("a", "b"))
    for container in ("a", "b"):
        emulated.containers[container].write(20)
    body = await pod_api.read_pod(namespace="default", name=name) if known else None
    before = _pod_reads(api, name)
    sink = RecordingSink()
    ends = await follow_pod(api=pod_api, namespace="default", pod=name, sink=sink, settings=FAST,
                            metrics=log_metrics, follow=False, known_pod=body)
    assert set(ends) == {"a", "b"}
    return _pod_reads(api, name) - before, sink


async def test_a_known_pod_is_not_read_for_its_containers_nor_their_first_states(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, log_metrics: LogMetrics
) -> None:
    """Three reads fewer for a pod of two containers: the pod's containers, and each one's first state.

    What stays is the check of the instance each stream serves before its first line is stored (and,
    reading without following, the one after its end): those must be fresh, not the watch's."""
    api, _ = cluster
    unknown, plain = await _reads_to_follow(api, pod_api, log_metrics, "unknown", known=False)
    known, sink = await _reads_to_follow(api, pod_api, log_metrics, "known", known=True)
    assert known == unknown - 3, (known, unknown)
    assert len(sink.texts("a")) == len(plain.texts("a")) == 20 and len(sink.texts("b")) == 20


async def test_a_stream_end_after_a_known_start_reads_the_pod_and_loses_nothing(
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
                                          settings=FAST, metrics=log_metrics, known_pod=body))
    for _ in range(400):
        if len(sink.texts("a")) >= 130:
            break
        await asyncio.sleep(0.01)
    emulated.delete()
    await task
    texts = sink.texts("a")
    assert len(texts) == 130 and len(set(texts)) == 130
    assert _pod_reads(api, "cut") >= 2  # the read before the start, and one after the cut
