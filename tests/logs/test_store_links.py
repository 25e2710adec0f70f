"""The store never follows a symbolic link planted in its directory.

Before, a pod directory linked to another namespace's pod directory was served to readers of
the first namespace (access is checked per namespace), and a segment linked to a file outside
the store was read; retention's walk followed linked directories too.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import LogLine
from podmortem.logs.storage import reading
from podmortem.logs.storage.retention import RetentionSettings
from podmortem.logs.storage.store import LogNotFound, LogStore, StoreSettings

BASE = 1_700_000_000_000_000_000
NO_FSYNC = StoreSettings(fsync_interval_s=None)


async def _write(store: LogStore, namespace: str, pod: str, texts: list[bytes]) -> Path:
    sink = store.sink(namespace=namespace, pod=pod, job="j")
    cursor = LogCursor(container_id="cid")
    lines = [LogLine("main", BASE + i, t) for i, t in enumerate(texts)]
    for line in lines:
        cursor.accept(line.ts_ns)
    await sink.write("main", lines, cursor)
    inst = store.find(namespace=namespace, pod=pod)
    return inst.segment_path(inst.active_seq or 0)


async def test_a_pod_directory_linked_to_another_namespace_is_not_served(tmp_path: Path) -> None:
    async with LogStore(tmp_path, settings=NO_FSYNC) as store:
        await _write(store, "secret", "p", [b"password=hunter2"])
    (tmp_path / "public" / "j").mkdir(parents=True)
    (tmp_path / "public" / "j" / "p").symlink_to(tmp_path / "secret" / "j" / "p")
    async with LogStore(tmp_path, settings=NO_FSYNC, read_only=True) as store:
        with pytest.raises(LogNotFound):
            store.find(namespace="public", pod="p")
        assert [x.text for x in await reading.read_lines(store.find(namespace="secret", pod="p"))
                if isinstance(x, LogLine)] == [b"password=hunter2"]
    (tmp_path / "public" / "j" / "p").unlink()
    (tmp_path / "public" / "j").rmdir()
    (tmp_path / "public").rmdir()
    (tmp_path / "public").symlink_to(tmp_path / "secret", target_is_directory=True)
    async with LogStore(tmp_path, settings=NO_FSYNC, read_only=True) as store:
        with pytest.raises(LogNotFound):
            store.find(namespace="public", pod="p")


async def test_a_segment_linked_outside_the_store_is_never_read(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    async with LogStore(outside, settings=NO_FSYNC) as store:
        foreign = await _write(store, "other", "p", [b"not this store's line"])
    root = tmp_path / "store"
    async with LogStore(root, settings=NO_FSYNC) as store:
        seg = await _write(store, "ns", "p", [b"mine"])
    # A second segment that is a link to a real, intact segment elsewhere.
    linked = seg.with_name("00000001.seg")
    linked.symlink_to(foreign)
    async with LogStore(root, settings=NO_FSYNC, read_only=True) as store:
        items = [i async for i in reading.read(store.find(namespace="ns", pod="p"))]
    texts = [x.text for i in items if isinstance(i, reading.LinesBlock) for x in i.lines()]
    assert texts == [b"mine"]
    assert foreign.exists()


async def test_retention_does_not_walk_into_linked_directories(tmp_path: Path) -> None:
    keep = tmp_path / "keep"
    async with LogStore(keep, settings=NO_FSYNC) as store:
        precious = await _write(store, "ns", "p", [b"precious"])
    old = precious.stat().st_mtime - 10 * 86400
    os.utime(precious, (old, old))
    root = tmp_path / "store"
    (root / "ns2" / "j" / "p").mkdir(parents=True)
    (root / "ns2" / "j" / "p" / "main").symlink_to(precious.parent.parent, target_is_directory=True)
    settings = StoreSettings(fsync_interval_s=None, retention=RetentionSettings(max_age_s=3600))
    async with LogStore(root, settings=settings) as store:
        await store.sweep()
    assert precious.exists()
