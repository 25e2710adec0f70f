"""The follower against the emulated kubelet, one fault at a time."""

from __future__ import annotations

import random

import pytest

from podmortem.logs import errors
from podmortem.logs.events import EndReason, GapReason
from podmortem.logs.following.follower import follow_pod
from podmortem.logs.following.pod_log_api import PodLogApi, SessionTransport
from podmortem.logs.metrics import LogMetrics
from podmortem_demo.emulated import PodLogsApi, awkward_text, faults

from .conftest import FAST, RecordingSink


def produced(api: PodLogsApi, pod: str = "p", container: str = "main", *, lost: int = 0) -> list[bytes]:
    """Every line the container's instances wrote, in order (minus none: tests say what is lost)."""
    out: list[bytes] = []
    for inst in api.pods["default", pod].containers[container].instances:
        out.extend(line.partition(b" ")[2] for line in bytes(inst.log.data).split(b"\n")[:-1])
    return out


async def run(pod_api: PodLogApi, sink: RecordingSink, log_metrics: LogMetrics, **kw: object) -> dict:
    return await follow_pod(api=pod_api, namespace="default", pod="p", sink=sink, settings=FAST,
                            metrics=log_metrics, rng=random.Random(7), **kw)  # type: ignore[arg-type]


FAULTS = [
    pytest.param([faults.EofAfter(120)], id="clean-eof"),
    pytest.param([faults.EofAfter(120, extra_bytes=7)], id="eof-mid-line"),
    pytest.param([faults.EofAfterSeconds(0.05)], id="eof-after-seconds"),
    pytest.param([faults.Stall(50, extra_bytes=3)], id="stall-until-read-timeout"),
    pytest.param([faults.Reset(80, extra_bytes=2)], id="connection-reset"),
    pytest.param([faults.HttpError(500), faults.HttpError(503)], id="http-5xx"),
    pytest.param([faults.HttpError(429, retry_after=0.01)], id="http-429-retry-after"),
    pytest.param([faults.EofAfter(10), faults.Write(200), faults.Reset(5, 1), faults.Write(3)], id="mixed"),
]


@pytest.mark.parametrize("schedule", FAULTS)
async def test_every_line_once_across_faults(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, sink: RecordingSink, log_metrics: LogMetrics,
    schedule: list[faults.LogFault],
) -> None:
    api, _ = cluster
    pod = api.add_pod("p", text=awkward_text)
    main = pod.containers["main"]
    main.write(400)
    main.faults.extend(schedule)
    main.terminate_when_faults_done = True
    ends = await run(pod_api, sink, log_metrics)
    assert ends["main"].reason is EndReason.TERMINATED
    assert sink.texts() == produced(api)
    assert sink.gaps == []
    assert len(api.log_requests) >= 2


async def test_unreadable_api_assumes_running_and_retries(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, sink: RecordingSink, log_metrics: LogMetrics,
) -> None:
    api, _ = cluster
    pod = api.add_pod("p")
    main = pod.containers["main"]
    main.write(100)
    main.faults.extend([faults.EofAfter(30), faults.HttpError(502), faults.EofAfter(60, extra_bytes=3)])
    main.terminate_when_faults_done = True
    # The start reads pass; the reads after stream ends fail with 503, 429 (Retry-After) and 500.
    pod.pod_faults.extend([None, None, faults.HttpError(503), faults.HttpError(429, retry_after=0.01),
                           None, faults.HttpError(500)])
    ends = await run(pod_api, sink, log_metrics)
    assert ends["main"].reason is EndReason.TERMINATED
    assert sink.texts() == produced(api)
    assert len(pod.pod_faults) <= 1  # the 503 and the 429 were met and survived
    assert log_metrics.reconnects.labels("api-unavailable")._value.get() >= 1


async def test_restart_drains_the_previous_instance_then_follows_the_new(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, sink: RecordingSink, log_metrics: LogMetrics,
) -> None:
    api, _ = cluster
    pod = api.add_pod("p")
    main = pod.containers["main"]
    main.write(300)
    main.faults.extend([faults.Restart(after_lines=100, new_lines=40), faults.EofAfter(10)])
    main.terminate_when_faults_done = True
    await run(pod_api, sink, log_metrics)
    assert sink.texts() == produced(api)
    assert [e.reason for e in sink.ends] == [EndReason.RESTARTED, EndReason.TERMINATED]
    assert sink.ends[0].container_id == main.instances[0].container_id
    assert sink.ends[1].container_id == main.instances[1].container_id
    assert any(r.get("previous") == "true" for r in api.log_requests)


async def test_restarts_missed_while_away_are_a_gap(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, log_metrics: LogMetrics,
) -> None:
    api, _ = cluster
    pod = api.add_pod("p")
    main = pod.containers["main"]
    main.write(30)
    sink = RecordingSink()
    main.faults.append(faults.EofAfter(30))
    main.faults.append(faults.HttpError(503))
    # Stop after the first instance's lines: follow in snapshot mode, keep the cursor.
    await run(pod_api, sink, log_metrics, follow=False)
    main.faults.clear()
    main.restart(new_lines=5)
    main.restart(new_lines=7)  # two restarts while nobody followed
    main.terminate_when_faults_done = True
    await run(pod_api, sink, log_metrics)
    # Our instance's tail cannot be checked any more (marked); the previous one is read in full.
    assert [g.reason for g in sink.gaps] == [GapReason.RESTARTS]
    assert sink.texts() == produced(api)
    assert [e.container_id for e in sink.ends[1:]] == [i.container_id for i in main.instances[1:]]


async def test_rotation_while_away_is_marked_and_nothing_else_lost(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, sink: RecordingSink, log_metrics: LogMetrics,
) -> None:
    api, _ = cluster
    pod = api.add_pod("p")
    main = pod.containers["main"]
    main.write(100)
    main.faults.extend([faults.EofAfter(100), faults.Rotate(write_before=25), faults.Write(10)])
    main.terminate_when_faults_done = True
    await run(pod_api, sink, log_metrics)
    expected = produced(api)
    assert sink.texts() == expected[:100] + expected[125:]
    (gap,) = sink.gaps
    assert gap.reason is GapReason.ROTATION
    assert gap.after_ts_ns == sink.lines[99].ts_ns and gap.before_ts_ns == sink.lines[100].ts_ns
    assert log_metrics.gaps.labels("rotation")._value.get() == 1


async def test_pod_deleted_ends_with_a_note(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, sink: RecordingSink, log_metrics: LogMetrics,
) -> None:
    api, _ = cluster
    pod = api.add_pod("p")
    pod.containers["main"].write(60)
    pod.containers["main"].faults.append(faults.Delete(after_lines=60))
    ends = await run(pod_api, sink, log_metrics)
    assert ends["main"].reason is EndReason.POD_DELETED
    assert len(sink.lines) == 60


async def test_several_containers_all_or_chosen(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, log_metrics: LogMetrics,
) -> None:
    api, _ = cluster
    pod = api.add_pod("p", containers=("main", "sidecar"))
    for name, n in (("main", 120), ("sidecar", 30)):
        pod.containers[name].write(n)
        pod.containers[name].faults.append(faults.EofAfter(n // 3, extra_bytes=4))
        pod.containers[name].terminate_when_faults_done = True
    every = RecordingSink()
    await run(pod_api, every, log_metrics)
    assert every.texts("main") == produced(api, container="main")
    assert every.texts("sidecar") == produced(api, container="sidecar")
    chosen = RecordingSink()
    await run(pod_api, chosen, log_metrics, containers=["sidecar"], follow=False)
    assert chosen.texts() == produced(api, container="sidecar")
    with pytest.raises(errors.ApiFatal, match="not in pod"):
        await run(pod_api, RecordingSink(), log_metrics, containers=["nope"])


async def test_limit_bytes_cuts_resume_without_loss(
    cluster: tuple[PodLogsApi, str], transport: SessionTransport, sink: RecordingSink,
    log_metrics: LogMetrics,
) -> None:
    api, _ = cluster
    pod = api.add_pod("p", text=awkward_text)
    pod.containers["main"].write(300)
    pod.containers["main"].faults.append(faults.Write(1))
    pod.containers["main"].terminate_when_faults_done = True
    settings = FAST.__class__(**{**FAST.__dict__, "limit_bytes": 4096})
    limited = PodLogApi(transport, settings=settings)
    await follow_pod(api=limited, namespace="default", pod="p", sink=sink, settings=settings,
                     metrics=log_metrics, rng=random.Random(1))
    assert sink.texts() == produced(api)  # the 17 KiB lines needed a larger limit, granted on the fly
    assert any(r.get("limitBytes") == "4096" for r in api.log_requests)
    assert log_metrics.reconnects.labels("limit-bytes")._value.get() > 0


async def test_metrics_count_lines_bytes_and_duplicates(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, sink: RecordingSink, log_metrics: LogMetrics,
) -> None:
    api, _ = cluster
    pod = api.add_pod("p")
    pod.containers["main"].write(200)
    pod.containers["main"].faults.append(faults.EofAfter(50))
    pod.containers["main"].terminate_when_faults_done = True
    await run(pod_api, sink, log_metrics)
    assert log_metrics.lines._value.get() == 200
    assert log_metrics.duplicates._value.get() >= 50  # every replay resends the current second
    assert log_metrics.bytes._value.get() > 200 * 31
    assert log_metrics.streams_active._value.get() == 0
    assert log_metrics.reconnects.labels("eof")._value.get() >= 1
