"""A restart the pod status does not show yet: lines of the new instance must not go under the old cursor.

The apiserver's copy of a pod's status lags the kubelet's. Here the container
restarted while the follower was away, and the pod reads still show the old
instance running; the log request then serves the *new* instance. The follower
must notice (its replay of the cursor's lines is missing, and the kubelet's
``previous`` log holds them), deliver nothing from that stream, and once the
status catches up, drain the old instance and read the new one from its start.
"""

from __future__ import annotations

import random
from typing import Any

from podmortem.logs.events import EndReason
from podmortem.logs.following.follower import follow_pod
from podmortem.logs.following.pod_log_api import PodLogApi
from podmortem.logs.metrics import LogMetrics
from podmortem_demo.emulated import PodLogsApi

from .conftest import FAST, RecordingSink


def texts(api: PodLogsApi) -> list[bytes]:
    out: list[bytes] = []
    for inst in api.pods["default", "p"].containers["main"].instances:
        out.extend(text for _, text in inst.log.lines())
    return out


async def test_new_instance_behind_a_stale_status_is_not_taken_for_the_old(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, log_metrics: LogMetrics,
) -> None:
    api, _ = cluster
    pod = api.add_pod("p")
    main = pod.containers["main"]
    main.write(50)
    sink = RecordingSink()
    await follow_pod(api=pod_api, namespace="default", pod="p", sink=sink, settings=FAST,
                     metrics=log_metrics, follow=False, rng=random.Random(1))
    assert len(sink.lines) == 50  # the sink now holds a cursor in the first instance

    stale = pod.to_json()
    main.restart(new_lines=20)
    stale_reads = [3]

    def lagging() -> dict[str, Any]:
        if stale_reads[0] > 0:
            stale_reads[0] -= 1
            return stale
        return fresh()

    fresh = pod.to_json
    pod.to_json = lagging  # type: ignore[method-assign]
    main.terminate_when_faults_done = True
    requests_before = len(api.log_requests)
    ends = await follow_pod(api=pod_api, namespace="default", pod="p", sink=sink, settings=FAST,
                            metrics=log_metrics, rng=random.Random(2))
    assert [line.text for line in sink.lines] == texts(api)
    assert sink.gaps == []
    assert ends["main"].reason is EndReason.TERMINATED
    assert [e.container_id for e in sink.ends[1:]] == [i.container_id for i in main.instances]
    probes = [r for r in api.log_requests[requests_before:]
              if r.get("previous") == "true" and "sinceTime" in r and "tailLines" not in r]
    assert probes, "the kubelet's previous log was not consulted"
