"""A bounded pool of open segment files: a quiet pod's file is closed, and reopened at its next write.

The store may hold at most ``max_open_segments`` segment files open for writing; the one written
longest ago is closed (under a sync policy the next group flush fsyncs it by its path) and appended
to again when its pod writes.
Counted from the process's own descriptor table, and read back line for line.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import LogLine
from podmortem.logs.storage import retention
from podmortem.logs.storage.settings import StoreSettings
from podmortem.logs.storage.store import LogStore

from .stored import stored_events
from .test_http import write

PODS = 6


def _open_segments(root: Path) -> int:
    """Segment files of the store under ``root`` this process has open."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(root)) and target.endswith(retention.SEGMENT_SUFFIX):
            count += 1
    return count


# The interval is long so no group flush runs meanwhile: its duplicates of the open files (budgeted
# apart, `open_files.budget`) would count as open segments here.
@pytest.mark.parametrize("fsync", [None, 3600.0], ids=["no-fsync", "interval-fsync"])
async def test_at_most_the_pool_is_open_and_every_line_reads_back(
    tmp_path: Path, fsync: float | None
) -> None:
    settings = StoreSettings(max_open_segments=2, fsync_interval_s=fsync)
    async with LogStore(tmp_path, settings=settings) as store:
        cursors = {i: LogCursor(container_id="c") for i in range(PODS)}
        for round_ in range(3):  # every pod writes in turn, three times: each reopens after a close
            for i in range(PODS):
                sink = store.sink(namespace="ns", pod=f"p{i}")
                await write(sink, "main", [b"pod %d line %d" % (i, round_)], cursors[i], start=round_)
                assert _open_segments(tmp_path) <= 2
        for i in range(PODS):
            events = await stored_events(store, namespace="ns", pod=f"p{i}")
            texts = [e.text for e in events if isinstance(e, LogLine)]
            assert texts == [b"pod %d line %d" % (i, r) for r in range(3)]
            [inst] = store.instances(namespace="ns", pod=f"p{i}", container="main")
            assert inst.segment_seqs() == [0]  # reopened and appended to, not a new segment each time
    assert _open_segments(tmp_path) == 0


def test_the_pool_must_hold_one() -> None:
    with pytest.raises(ValueError, match="max_open_segments"):
        StoreSettings(max_open_segments=0)


async def test_concurrent_first_writes_never_open_more_than_the_pool(tmp_path: Path) -> None:
    """Counted at the open: 40 pods writing their first batch at once stay within a pool of 3."""
    import asyncio

    # No group flush while it runs: its duplicates (budgeted apart) would count as open segments here.
    settings = StoreSettings(max_open_segments=3, fsync_interval_s=3600.0)
    most = 0
    async with LogStore(tmp_path, settings=settings) as store:

        async def first(i: int) -> None:
            nonlocal most
            sink = store.sink(namespace="ns", pod=f"q{i}")
            await write(sink, "main", [b"q %d" % i], LogCursor(container_id="c"))
            most = max(most, _open_segments(tmp_path))

        await asyncio.gather(*(first(i) for i in range(40)))
        assert most <= 3
        for i in range(40):
            events = await stored_events(store, namespace="ns", pod=f"q{i}")
            assert [e.text for e in events if isinstance(e, LogLine)] == [b"q %d" % i]


async def test_a_released_pod_closes_its_files_and_is_read_again_from_disk(tmp_path: Path) -> None:
    """The store lets go of a pod nobody writes (its index held every pod ever followed, with its
    instances and its file in the pool, until retention): its file closes, and a reader or a writer
    loads it again from disk."""
    import asyncio

    async with LogStore(tmp_path, settings=StoreSettings(max_open_segments=4)) as store:
        cursor = LogCursor(container_id="c")
        await write(store.sink(namespace="ns", pod="done"), "main", [b"a", b"b"], cursor)
        await write(store.sink(namespace="ns", pod="live"), "main", [b"x"], LogCursor(container_id="c"))
        assert _open_segments(tmp_path) == 2
        store.release(namespace="ns", pod="done")
        for _ in range(200):
            if _open_segments(tmp_path) == 1 and store._pods.held("ns", "done") is None:
                break
            await asyncio.sleep(0.01)
        assert _open_segments(tmp_path) == 1 and store._pods.held("ns", "done") is None
        assert store._pods.held("ns", "live") is not None
        events = await stored_events(store, namespace="ns", pod="done")
        assert [e.text for e in events if isinstance(e, LogLine)] == [b"a", b"b"]
        await write(store.sink(namespace="ns", pod="done"), "main", [b"c"], cursor, start=2)
        events = await stored_events(store, namespace="ns", pod="done")
        assert [e.text for e in events if isinstance(e, LogLine)] == [b"a", b"b", b"c"]


async def test_a_sink_handed_out_before_a_release_writes_through_the_one_object_the_index_holds(
    tmp_path: Path,
) -> None:
    """A pod recreated under the same name (a StatefulSet) gets its sink while the store releases the
    old one: its writes must not go through the released object while a reader loads another one
    for the same directory (two writers' views of one segment)."""
    async with LogStore(tmp_path) as store:
        early = store.sink(namespace="ns", pod="web-0")  # the new follower, before the release ran
        await write(early, "main", [b"a"], LogCursor(container_id="c"))
        assert await store._release(("ns", "web-0"))  # the old pod's follower ended
        events = await stored_events(store, namespace="ns", pod="web-0")  # a reader loads it again
        assert [e.text for e in events if isinstance(e, LogLine)] == [b"a"]
        held = store._pods.held("ns", "web-0")
        assert held is not None
        await write(early, "main", [b"b"], LogCursor(container_id="c"), start=1)
        assert store._pods.held("ns", "web-0") is held  # written through the index's object
        later = store.sink(namespace="ns", pod="web-0")
        await write(later, "main", [b"c"], LogCursor(container_id="c"), start=2)
        [inst] = store.instances(namespace="ns", pod="web-0", container="main")
        assert inst.segment_seqs() == [0]  # one writer: no segment rolled because another appended
        events = await stored_events(store, namespace="ns", pod="web-0")
        assert [e.text for e in events if isinstance(e, LogLine)] == [b"a", b"b", b"c"]


async def test_a_file_closed_for_room_is_fsynced_by_the_next_flush_not_at_the_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With more busy pods than the pool holds every write closes a file: no fsync each time, but
    nothing written goes unsynced either."""
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    settings = StoreSettings(max_open_segments=1, fsync_interval_s=3600.0)  # flushes only when asked
    async with LogStore(tmp_path, settings=settings) as store:
        await write(store.sink(namespace="ns", pod="a"), "main", [b"a 0"], LogCursor(container_id="c"))
        [a] = store.instances(namespace="ns", pod="a", container="main")
        a_segment = a.segment_path(0)
        await write(store.sink(namespace="ns", pod="b"), "main", [b"b 0"], LogCursor(container_id="c"))
        assert _open_segments(tmp_path) == 1  # a's file was closed for b's
        assert os.stat(a_segment).st_ino not in synced
        await store.flush()
        assert os.stat(a_segment).st_ino in synced
        synced.clear()
        await store.flush()  # synced once: the next flush has nothing of a's left
        assert os.stat(a_segment).st_ino not in synced


async def test_a_failure_letting_writers_in_reaches_the_writers_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop that closes a file for each waiter fails: each waiter raises its error, where it
    would wait for ever for a loop that is gone."""
    import asyncio
    import errno

    settings = StoreSettings(max_open_segments=1, fsync_interval_s=3600.0)
    async with LogStore(tmp_path, settings=settings) as store:
        await write(store.sink(namespace="ns", pod="p0"), "main", [b"first"], LogCursor(container_id="c"))

        def broken() -> bool:
            raise OSError(errno.EBADF, "closing the idle segment failed")

        monkeypatch.setattr(store._writer, "_close_one", broken)
        async with asyncio.timeout(5):
            with pytest.raises(OSError, match="closing the idle segment failed"):
                await write(store.sink(namespace="ns", pod="p1"), "main", [b"second"],
                            LogCursor(container_id="c"))
