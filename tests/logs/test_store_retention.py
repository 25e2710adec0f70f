"""Retention of the log store: whole segments go, by size and by age; cursors never break."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import EndReason, LogEnd, LogLine
from podmortem.logs.storage import reading, retention
from podmortem.logs.storage.store import LogStore, StoreSettings
from podmortem.reports import stored_timeline

BASE = 1_714_564_800 * 10**9


def lines(n: int, start: int = 0) -> list[LogLine]:
    return [LogLine("main", BASE + i * 1000, b"%06d " % i + b"y" * 200) for i in range(start, start + n)]


async def write_all(st: LogStore, pod: str, items: list[LogLine], cursor: LogCursor) -> None:
    sink = st.sink(namespace="ns", pod=pod, job="job-1")
    for i in range(0, len(items), 10):
        chunk = items[i:i + 10]
        for x in chunk:
            cursor.accept(x.ts_ns)
        await sink.write("main", chunk, cursor)


def settings(**kw: float | int | None) -> StoreSettings:
    return StoreSettings(fsync_interval_s=None, segment_bytes=8192,
                         retention=retention.RetentionSettings(**kw))  # type: ignore[arg-type]


async def test_size_limit_deletes_oldest_segments_but_keeps_the_cursor(tmp_path: Path) -> None:
    cfg = settings(max_job_bytes=32 * 1024, max_age_s=None)
    items = lines(1000)  # ~210 KiB
    cursor = LogCursor(container_id="cid-1")
    async with LogStore(tmp_path, settings=cfg) as st:
        await write_all(st, "pod-1", items, cursor)
        await st.sweep()
        job_dir = tmp_path / "ns" / "job-1"
        assert retention.job_bytes(job_dir) <= 32 * 1024 + 8192 + 4096
        inst = st.find(namespace="ns", pod="pod-1")
        got = [x async for x in reading.read(inst)]
        assert isinstance(got[0], reading.RetentionCut)
        kept = [line for b in got if isinstance(b, reading.LinesBlock) for line in b.lines()]
        assert got[0].removed_lines + len(kept) == len(items)
        assert kept == items[-len(kept):]  # what is left is the newest part, contiguous
    async with LogStore(tmp_path, settings=cfg) as st:
        loaded = await st.sink(namespace="ns", pod="pod-1").load_cursor("main")
        assert loaded == cursor
        await write_all(st, "pod-1", items + lines(10, start=1000), loaded)
        inst = st.find(namespace="ns", pod="pod-1")
        assert (await reading.read_lines(inst, tail=11))[0] == items[-1]


async def test_active_segment_of_a_live_container_is_never_deleted_for_size(tmp_path: Path) -> None:
    cfg = settings(max_job_bytes=4096, max_age_s=None)
    async with LogStore(tmp_path, settings=cfg) as st:
        for pod in ("pod-1", "pod-2"):
            await write_all(st, pod, lines(200), LogCursor(container_id=f"cid-{pod}"))
        await st.sweep()
        for pod in ("pod-1", "pod-2"):
            inst = st.find(namespace="ns", pod=pod)
            assert inst.active_seq is not None
            assert inst.segment_path(inst.active_seq).exists()


async def test_age_limit_deletes_ended_logs_keeping_a_tombstone_then_the_pod(tmp_path: Path) -> None:
    cfg = settings(max_age_s=3600, max_job_bytes=None)
    cursor = LogCursor(container_id="cid-1")
    async with LogStore(tmp_path, settings=cfg) as st:
        await write_all(st, "pod-1", lines(100), cursor)
        await st.sink(namespace="ns", pod="pod-1").end(LogEnd("main", "cid-1", EndReason.POD_DELETED))
        await write_all(st, "pod-2", lines(10), LogCursor(container_id="cid-2"))
    pod_dir = tmp_path / "ns" / "job-1" / "pod-1"
    old = time.time() - 2 * 3600
    for seg in pod_dir.rglob("*.seg"):
        os.utime(seg, (old, old))
    async with LogStore(tmp_path, settings=cfg) as st:  # opening sweeps
        assert not list(pod_dir.rglob("*.seg"))
        assert list((tmp_path / "ns" / "job-1" / "pod-2").rglob("*.seg"))  # young: kept
        loaded = await st.sink(namespace="ns", pod="pod-1").load_cursor("main")
        assert loaded == cursor  # from the tombstone
        inst = st.find(namespace="ns", pod="pod-1")
        assert inst.ended is not None
    for f in pod_dir.rglob("*"):
        os.utime(f, (old, old))
    result = retention.sweep(tmp_path, cfg.retention)
    assert result.deleted_pods == 1 and not pod_dir.exists()


def test_retention_settings_are_validated() -> None:
    import pytest

    with pytest.raises(ValueError):
        retention.RetentionSettings(max_age_s=0)
    with pytest.raises(ValueError):
        retention.RetentionSettings(max_job_bytes=-1)


async def test_a_job_can_have_its_own_limits(tmp_path: Path) -> None:
    cfg = settings(max_job_bytes=None, max_age_s=None)
    async with LogStore(tmp_path, settings=cfg) as st:
        st.set_job_retention(namespace="ns", job="job-1",
                             settings=retention.RetentionSettings(max_job_bytes=16 * 1024, max_age_s=None))
        await write_all(st, "pod-1", lines(1000), LogCursor(container_id="cid-1"))
        await st.sweep()
        assert retention.job_bytes(tmp_path / "ns" / "job-1") <= 16 * 1024 + 8192 + 4096
    # The override is kept on disk: a sweep after a restart still honours it.
    assert retention.job_settings(tmp_path / "ns" / "job-1", cfg.retention).max_job_bytes == 16 * 1024


async def test_a_filed_report_timeline_goes_with_its_pods_logs(tmp_path: Path) -> None:
    """The reporter's report-timeline.json and timeline.svg, next to a pod's logs, do not outlive them:
    retention removes the pod's directory once it expired, then the job's once its last pod did."""
    cfg = settings(max_age_s=3600, max_job_bytes=None)
    async with LogStore(tmp_path, settings=cfg) as st:
        for pod, cid in (("pod-1", "cid-1"), ("pod-2", "cid-2")):
            await write_all(st, pod, lines(20), LogCursor(container_id=cid))
            await st.sink(namespace="ns", pod=pod).end(LogEnd("main", cid, EndReason.POD_DELETED))
    job_dir = tmp_path / "ns" / "job-1"
    stored_timeline.write(job_dir / "pod-1", {"version": 1, "points": []}, "<svg/>")
    old = time.time() - 2 * 3600

    def age(pod: str) -> None:
        for _ in range(2):  # segments first (they go, leaving a tombstone), then what is left
            for f in (job_dir / pod).rglob("*"):
                os.utime(f, (old, old))
            retention.sweep(tmp_path, cfg.retention)

    age("pod-2")
    assert not (job_dir / "pod-2").exists()
    assert (job_dir / "pod-1" / stored_timeline.JSON_NAME).exists()
    age("pod-1")
    assert not job_dir.exists()


async def test_a_retention_loop_that_returns_is_logged_as_an_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The sweep runs until the store closes: one that stopped would let the store grow unseen."""
    import asyncio
    import logging

    async def gave_up(self: LogStore) -> None:
        return

    monkeypatch.setattr(LogStore, "_sweep_forever", gave_up)
    with caplog.at_level(logging.ERROR, logger="podmortem.background"):
        async with LogStore(tmp_path):
            for _ in range(3):
                await asyncio.sleep(0)
    assert "podmortem-log-store-retention-sweep returned" in caplog.text
