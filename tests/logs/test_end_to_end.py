"""End to end: emulated kubelet → follower → durable store → ``GET /logs/{namespace}/{pod}``.

The point of the store: after the pod is gone (and its node, and the kubelet's
files), the complete log is still served, with the places where lines were
lost marked where they happened.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import test_utils

from podmortem.logs import timestamps
from podmortem.logs.events import EndReason, GapMarker, LogLine
from podmortem.logs.following.follower import follow_pod
from podmortem.logs.following.pod_log_api import PodLogApi
from podmortem.logs.metrics import LogMetrics
from podmortem.logs.serving import auth, http
from podmortem.logs.storage.store import LogStore, StoreSettings
from podmortem_demo.emulated import Container, PodLogsApi, awkward_text, faults

from .conftest import FAST
from .exactly_once import check
from .stored import stored_events, until

OPEN = auth.Reviewer(api=None, settings=auth.AuthSettings(authenticate=False, authorize=False))


@pytest.fixture
async def log_store(tmp_path: Path) -> AsyncIterator[LogStore]:
    async with LogStore(tmp_path / "store", settings=StoreSettings(fsync_interval_s=None)) as st:
        yield st


@pytest.fixture
async def web(log_store: LogStore) -> AsyncIterator[test_utils.TestClient[Any, Any]]:
    async with test_utils.TestClient(
        test_utils.TestServer(http.make_app(log_store=log_store, reviewer=OPEN))
    ) as client:
        yield client


async def wait_stored(log_store: LogStore, lines: int) -> None:
    await until(lambda: log_store.lines_total >= lines)


def expected_text(events: list[object], container_id: str | None) -> bytes:
    """What GET serves for one instance: lines as written, markers as lines of their own."""
    out = []
    for ev in events:
        if isinstance(ev, LogLine):
            out.append(ev.text + b"\n")
        elif isinstance(ev, GapMarker):
            after = timestamps.format_ns(ev.after_ts_ns) if ev.after_ts_ns else "?"
            before = timestamps.format_ns(ev.before_ts_ns) if ev.before_ts_ns else "?"
            out.append(
                f"--- podmortem: lines may be missing here ({ev.reason}) between {after} and {before}:"
                f" {ev.detail} ---\n".encode()
            )
    return b"".join(out)


async def test_complete_log_after_the_pod_is_deleted_with_its_rotation_gap(
    cluster: tuple[PodLogsApi, str],
    pod_api: PodLogApi,
    log_metrics: LogMetrics,
    log_store: LogStore,
    web: test_utils.TestClient[Any, Any],
) -> None:
    api, _ = cluster
    pod = api.add_pod("trainer-0", namespace="ml", text=awkward_text)
    main: Container = pod.containers["main"]
    main.write(600)
    # Read 600 lines; while away, 50 more are written and the file rotates; then 200 more, a
    # cut inside a line, and a restart whose new instance writes 300 lines.
    main.faults.extend(
        [
            faults.EofAfter(600),
            faults.Rotate(write_before=50),
            faults.Write(200),
            faults.EofAfter(100, extra_bytes=7),
            faults.Restart(after_lines=50, new_lines=300),
        ]
    )
    sink = log_store.sink(namespace="ml", pod="trainer-0", job="train")
    task = asyncio.create_task(
        follow_pod(
            api=pod_api, namespace="ml", pod="trainer-0", sink=sink, settings=FAST, metrics=log_metrics
        )
    )
    await wait_stored(log_store, 600 + 200 + 300)
    pod.delete()
    ends = await task
    assert ends["main"].reason is EndReason.POD_DELETED

    # The store's record is exact: every line once, the 50 rotated lines behind one marker.
    events = await stored_events(log_store, namespace="ml", pod="trainer-0")
    outcome = check(events, main)
    assert len(outcome.lost) == 50 and outcome.gaps == 1 and outcome.delivered == 1100

    old, new = main.instances
    per_instance: dict[str, list[object]] = {old.container_id: [], new.container_id: []}
    current = old.container_id
    for ev in events:
        per_instance[current].append(ev)
        if getattr(ev, "reason", None) is EndReason.RESTARTED:
            current = new.container_id

    resp = await web.get("/logs/ml/trainer-0", params={"previous": "true"})
    assert resp.status == 200
    body = await resp.read()
    assert (
        body
        == expected_text(per_instance[old.container_id], old.container_id)
        + b"--- podmortem: end of log (restarted) ---\n"
    )
    assert body.count(b"--- podmortem: lines may be missing here (rotation)") == 1

    resp = await web.get("/logs/ml/trainer-0")
    assert resp.status == 200
    assert (
        await resp.read()
        == b"".join(text + b"\n" for _, text in new.log.lines())
        + b"--- podmortem: end of log (pod-deleted) ---\n"
    )

    # jsonl keeps exact bytes and timestamps, and the gap with its bounds.
    resp = await web.get("/logs/ml/trainer-0", params={"previous": "true", "format": "jsonl"})
    records = [json.loads(line) for line in (await resp.text()).splitlines()]
    lines = [
        (r["ts_ns"], r["text"].encode("utf-8", "surrogateescape")) for r in records if r["type"] == "line"
    ]
    produced = old.log.lines()
    assert lines == produced[:600] + produced[650:]
    (gap,) = [r for r in records if r["type"] == "gap"]
    assert gap["reason"] == "rotation"
    assert gap["after_ts_ns"] == produced[599][0] and gap["before_ts_ns"] == produced[650][0]
    assert records[-1]["type"] == "end" and records[-1]["reason"] == "restarted"


async def test_follow_over_http_streams_live_and_ends_when_the_pod_is_deleted(
    cluster: tuple[PodLogsApi, str],
    pod_api: PodLogApi,
    log_metrics: LogMetrics,
    log_store: LogStore,
    web: test_utils.TestClient[Any, Any],
) -> None:
    api, _ = cluster
    pod = api.add_pod("p")
    main = pod.containers["main"]
    main.write(100)
    main.faults.extend([faults.EofAfter(100), faults.Reset(30, extra_bytes=5)])
    sink = log_store.sink(namespace="default", pod="p")
    task = asyncio.create_task(
        follow_pod(api=pod_api, namespace="default", pod="p", sink=sink, settings=FAST, metrics=log_metrics)
    )
    await wait_stored(log_store, 1)
    resp = await web.get("/logs/default/p", params={"follow": "true", "timestamps": "true"})
    assert resp.status == 200
    for _ in range(5):  # lines written while the HTTP reader follows
        main.write(40)
        await asyncio.sleep(0.01)
    await wait_stored(log_store, 300)
    pod.delete()
    await task
    async with asyncio.timeout(30):
        body = await resp.read()
    assert body == bytes(main.current.log.data) + b"--- podmortem: end of log (pod-deleted) ---\n"
