"""A full volume under the log store: followers pause, retry from their cursors, and resume.

The volume is a real, tiny tmpfs: writes fail with the kernel's own ENOSPC. Needs root
(to mount); skipped with the reason where mounting is not allowed.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from tests.full_volume import fill, tmpfs

from podmortem.logs.events import GapMarker, GapReason, LogLine
from podmortem.logs.following.pod_log_api import PodLogApi
from podmortem.logs.storage import reading
from podmortem.logs.storage.store import LogStore, StoreSettings
from podmortem.operator.followed_pods import Following, PodLogFacts
from podmortem_demo.emulated import PodLogsApi, plain_text

from .conftest import FAST
from .stored import until


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "vol") as path:
        yield path


@pytest.fixture
async def store(volume: Path) -> AsyncIterator[LogStore]:
    settings = StoreSettings(fsync_interval_s=None, segment_bytes=64 << 10, min_free_ratio=0)
    async with LogStore(volume / "store", settings=settings) as st:
        yield st


async def stored_items(store: LogStore) -> list[object]:
    inst = store.find(namespace="ml", pod="trainer-0", container="main")
    out: list[object] = []
    async for item in reading.read(inst):
        if isinstance(item, reading.LinesBlock):
            out.extend(item.lines())
        elif isinstance(item, GapMarker):
            out.append(item)
    return out


def follow(pod_api: PodLogApi, store: LogStore) -> tuple[Following, PodLogFacts]:
    """The operator's follower of pod ml/trainer-0, into ``store``; its facts."""

    async def make_sink(namespace: str, name: str, _uid: str) -> object:
        return store.sink(namespace=namespace, pod=name, job="train")

    following = Following(api=pod_api, make_sink=make_sink, settings=FAST)  # type: ignore[arg-type]
    assert following.ensure(namespace="ml", pod="trainer-0", pod_uid="uid-1", containers=None)
    facts = following.facts("uid-1")
    assert facts is not None
    return following, facts


async def test_a_full_volume_pauses_the_follower_and_nothing_is_lost_after_space_returns(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, store: LogStore, volume: Path
) -> None:
    api, _ = cluster
    pod = api.add_pod("trainer-0", namespace="ml", text=plain_text)
    main = pod.containers["main"]
    main.write(2000)

    following, facts = follow(pod_api, store)
    await until(lambda: store.lines_total >= 2000)
    filler = fill(volume)
    main.write(3000)
    await until(lambda: "main" in facts.disk_full and store.full_since is not None)
    assert following.is_following("uid-1")  # paused, not stopped
    kept = store.lines_total
    assert kept < 5000
    filler.unlink()
    await until(lambda: store.lines_total >= 5000, within_s=30)
    assert not facts.disk_full and store.full_since is None
    items = await stored_items(store)
    assert not [i for i in items if isinstance(i, GapMarker)]  # the kubelet still had every line
    assert [i.text for i in items if isinstance(i, LogLine)] == [
        text for _, text in main.current.log.lines()
    ]
    await following.stop()


async def test_lines_the_kubelet_dropped_while_the_volume_was_full_are_a_disk_full_gap(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, store: LogStore, volume: Path
) -> None:
    api, _ = cluster
    pod = api.add_pod("trainer-0", namespace="ml", text=plain_text)
    main = pod.containers["main"]
    main.write(1000)

    following, facts = follow(pod_api, store)
    await until(lambda: store.lines_total >= 1000)
    filler = fill(volume)
    main.write(500)
    await until(lambda: "main" in facts.disk_full)
    main.rotate()  # the kubelet rotates the file away meanwhile
    main.write(200)
    filler.unlink()
    await until(lambda: not facts.disk_full, within_s=30)
    await until(lambda: store.lines_total >= 1200, within_s=30)
    gaps = [i for i in await stored_items(store) if isinstance(i, GapMarker)]
    assert [g.reason for g in gaps] == [GapReason.DISK_FULL]
    await following.stop()


async def test_a_nearly_full_volume_frees_finished_logs_early(volume: Path) -> None:
    settings = StoreSettings(fsync_interval_s=None, segment_bytes=64 << 10, min_free_ratio=0.3)
    async with LogStore(volume / "store", settings=settings) as st:
        from podmortem.logs.cursor import LogCursor
        from podmortem.logs.events import EndReason, LogEnd

        old = st.sink(namespace="ml", pod="old-0", job="old")
        cursor = LogCursor(container_id="c-old")
        for i in range(40):  # ~2.5 MiB of a finished job
            cursor.accept(10**18 + i)
            await old.write("main", [LogLine("main", 10**18 + i, b"o" * 65_000)], cursor)
        await old.end(LogEnd("main", "c-old", EndReason.TERMINATED))
        live = st.sink(namespace="ml", pod="new-0", job="new")
        cursor = LogCursor(container_id="c-new")
        for i in range(20):  # keeps writing: the store must make room, not fail
            cursor.accept(2 * 10**18 + i)
            await live.write("main", [LogLine("main", 2 * 10**18 + i, b"n" * 65_000)], cursor)
        await until(lambda: _free_ratio(volume) >= 0.3, within_s=10)
        assert st.full_since is None
        assert st.lines_total == 60
        # The finished job's oldest segments went; the live job kept every line.
        assert len(list((volume / "store" / "ml" / "old").rglob("*.seg"))) < 40
        new = st.find(namespace="ml", pod="new-0")
        assert len(await reading.read_lines(new)) == 20


def _free_ratio(path: Path) -> float:
    st = os.statvfs(path)
    return st.f_bavail / st.f_blocks


async def test_a_follower_that_stopped_on_an_error_is_started_again(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, tmp_path: Path
) -> None:
    """``ensure`` used to keep a failed follower's finished task forever: its pod's log stopped for good."""
    api, _ = cluster
    main = api.add_pod("trainer-0", namespace="ml", text=plain_text).containers["main"]
    main.write(100)
    async with LogStore(tmp_path / "store", settings=StoreSettings(fsync_interval_s=None)) as st:
        failures = [OSError("the store's directory is not writable (a PVC remounted read-only)")]

        async def make_sink(namespace: str, name: str, _uid: str) -> object:
            if failures:
                raise failures.pop()
            return st.sink(namespace=namespace, pod=name, job="train")

        following = Following(api=pod_api, make_sink=make_sink, settings=FAST)  # type: ignore[arg-type]
        assert following.ensure(namespace="ml", pod="trainer-0", pod_uid="uid-1", containers=None)
        facts = following.facts("uid-1")
        assert facts is not None
        await until(lambda: facts.error is not None)
        assert not following.is_following("uid-1")
        # The next pod event starts it again; a pod followed now, or finished cleanly, is not.
        assert following.ensure(namespace="ml", pod="trainer-0", pod_uid="uid-1", containers=None)
        assert not following.ensure(namespace="ml", pod="trainer-0", pod_uid="uid-1", containers=None)
        await until(lambda: st.lines_total >= 100)
        assert facts.error is None
        await following.stop()


async def test_a_store_budget_frees_finished_logs_before_the_emptydir_limit(tmp_path: Path) -> None:
    """An emptyDir's sizeLimit evicts the pod instead of failing writes: the store keeps under its budget."""
    from podmortem.logs.cursor import LogCursor
    from podmortem.logs.events import EndReason, LogEnd
    from podmortem.logs.storage import retention

    budget = 256 << 10
    settings = StoreSettings(fsync_interval_s=None, segment_bytes=8192, max_store_bytes=budget)
    root = tmp_path / "store"
    async with LogStore(root, settings=settings) as st:
        old = st.sink(namespace="ml", pod="old-0", job="old")
        cursor = LogCursor(container_id="c-old")
        for i in range(20):  # 160 KiB of a job that ended
            cursor.accept(10**18 + i)
            await old.write("main", [LogLine("main", 10**18 + i, b"o" * 8000)], cursor)
        await old.end(LogEnd("main", "c-old", EndReason.TERMINATED))
        live = st.sink(namespace="ml", pod="new-0", job="new")
        cursor = LogCursor(container_id="c-new")
        peak = 0
        for i in range(20):  # 160 KiB more: together past the budget
            cursor.accept(2 * 10**18 + i)
            await live.write("main", [LogLine("main", 2 * 10**18 + i, b"n" * 8000)], cursor)
            await st.flush()
            await asyncio.sleep(0.01)  # the early freeing runs in the background
            peak = max(peak, retention.store_bytes(root))
        assert peak <= budget
        assert len(await reading.read_lines(st.find(namespace="ml", pod="new-0"))) == 20
        assert len(list((root / "ml" / "old").rglob("*.seg"))) < 20


async def test_a_new_pod_on_a_full_volume_pauses_and_resumes_like_a_running_one(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, store: LogStore, volume: Path
) -> None:
    """Its first write creates the instance's directory and meta: ENOSPC there is a pause, not a stop."""
    api, _ = cluster
    filler = fill(volume)
    main = api.add_pod("trainer-0", namespace="ml", text=plain_text).containers["main"]
    main.write(300)
    following, facts = follow(pod_api, store)
    await until(lambda: "main" in facts.disk_full and store.full_since is not None)
    assert following.is_following("uid-1") and facts.error is None
    filler.unlink()
    await until(lambda: store.lines_total >= 300, within_s=30)
    items = await stored_items(store)
    assert [i.text for i in items if isinstance(i, LogLine)] == [text for _, text in main.current.log.lines()]
    await following.stop()


async def test_a_restarted_container_on_a_full_volume_pauses_and_resumes(
    cluster: tuple[PodLogsApi, str], pod_api: PodLogApi, store: LogStore, volume: Path
) -> None:
    """A container restart opens a new instance (directory, meta, segment): the same pause."""
    api, _ = cluster
    pod = api.add_pod("trainer-0", namespace="ml", text=plain_text)
    main = pod.containers["main"]
    main.write(100)
    following, facts = follow(pod_api, store)
    await until(lambda: store.lines_total >= 100)
    filler = fill(volume)
    main.restart()
    main.write(200)
    following.ensure(namespace="ml", pod="trainer-0", pod_uid="uid-1", containers=None)
    await until(lambda: "main" in facts.disk_full)
    assert following.is_following("uid-1") and facts.error is None
    filler.unlink()
    await until(lambda: store.lines_total >= 300, within_s=30)
    insts = store.instances(namespace="ml", pod="trainer-0", container="main")
    assert len(insts) == 2
    await following.stop()
