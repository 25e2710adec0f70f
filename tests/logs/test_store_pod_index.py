"""The store's per-namespace index of pod directories: finds what earlier stores and other writers left."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import LogLine
from podmortem.logs.storage import reading
from podmortem.logs.storage.store import LogNotFound, LogStore, StoreSettings

BASE = 1_714_564_800 * 10**9
NO_FSYNC = StoreSettings(fsync_interval_s=None)


async def write_lines(st: LogStore, *, pod: str, job: str | None, text: bytes) -> None:
    sink = st.sink(namespace="ns", pod=pod, job=job)
    cursor = LogCursor(container_id="cid-1")
    line = LogLine("main", BASE, text)
    assert cursor.accept(line.ts_ns)
    await sink.write("main", [line], cursor)


async def read_texts(st: LogStore, pod: str) -> list[bytes]:
    items = await reading.read_lines(st.find(namespace="ns", pod=pod))
    return [x.text for x in items if isinstance(x, LogLine)]


async def test_reopened_store_finds_pods_of_an_earlier_store(tmp_path: Path) -> None:
    async with LogStore(tmp_path, settings=NO_FSYNC) as st:
        for i in range(5):
            await write_lines(st, pod=f"pod-{i}", job="train", text=b"hello %d" % i)
    async with LogStore(tmp_path, settings=NO_FSYNC) as st:
        # A sink without a job must resume under the job the pod was filed under, not a new one.
        sink = st.sink(namespace="ns", pod="pod-3")
        assert sink.job == "train"
        assert await sink.load_cursor("main") is not None
        assert [p.name for p in (tmp_path / "ns").iterdir()] == ["train"]
        for i in range(5):
            assert await read_texts(st, f"pod-{i}") == [b"hello %d" % i]
        with pytest.raises(LogNotFound):
            st.find(namespace="ns", pod="pod-9")


async def test_pod_directory_created_after_the_index_was_built_is_found(tmp_path: Path) -> None:
    async with LogStore(tmp_path, settings=NO_FSYNC) as writer:
        await write_lines(writer, pod="early", job="train", text=b"early")
        async with LogStore(tmp_path, read_only=True) as reader:
            assert await read_texts(reader, "early") == [b"early"]  # builds the index of "ns"
            await write_lines(writer, pod="late", job="train", text=b"late")
            assert await read_texts(reader, "late") == [b"late"]
        # The writing store's own index learns of the directories it creates.
        await write_lines(writer, pod="later", job="other", text=b"later")
        assert writer.sink(namespace="ns", pod="later").job == "other"
        assert await read_texts(writer, "later") == [b"later"]


async def test_newest_directory_wins_and_removed_ones_are_forgotten(tmp_path: Path) -> None:
    async with LogStore(tmp_path, settings=NO_FSYNC) as st:
        await write_lines(st, pod="p", job="old-job", text=b"old")
    async with LogStore(tmp_path, settings=NO_FSYNC) as st:
        await write_lines(st, pod="other", job="new-job", text=b"x")  # the namespace index exists now
    # The same pod name under a second job, made outside the store (e.g. a restored copy).
    shutil.copytree(tmp_path / "ns" / "old-job" / "p", tmp_path / "ns" / "new-job" / "p")
    old = tmp_path / "ns" / "old-job" / "p"
    os.utime(old, (1_000_000, 1_000_000))
    async with LogStore(tmp_path, read_only=True) as st:
        assert st.find(namespace="ns", pod="p").path.parent.parent.parent.name == "new-job"
    async with LogStore(tmp_path, settings=NO_FSYNC) as st:
        st.find(namespace="ns", pod="other")  # index built with both copies of "p"
        shutil.rmtree(tmp_path / "ns" / "new-job" / "p")  # as retention removes an expired pod
        assert st.find(namespace="ns", pod="p").path.parent.parent.parent.name == "old-job"
