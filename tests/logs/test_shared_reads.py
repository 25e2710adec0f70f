"""Readers of one log woken together share one read of each chunk and one rendering of each batch.

With 168 followers over 4 busy pods, each reader splitting and rendering every batch itself was
most of the server's event loop in ``bench/hostile_workload.py``. A read in flight is shared; a
finished one never is (a later reader gets the bytes as they are then).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import LogLine
from podmortem.logs.storage import positions, reading
from podmortem.logs.storage.store import LogStore, StoreSettings
from podmortem.logs.wakeup import Wakeup

BASE = 1_700_000_000_000_000_000


class _Gated:
    """Stands in for ``reading._framed_chunk``: counts calls and holds each until released."""

    def __init__(self, real: Any, error: BaseException | None = None) -> None:
        self.real, self.error = real, error
        self.calls = 0
        self.gate = threading.Event()

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        assert self.gate.wait(30)
        if self.error is not None:
            raise self.error
        return self.real(*args)


async def _store_with_lines(root: Path, n: int) -> tuple[LogStore, Any]:
    store = LogStore(root, settings=StoreSettings(fsync_interval_s=None))
    await store.__aenter__()
    sink = store.sink(namespace="ns", pod="p", job="j")
    cursor = LogCursor(container_id="cid")
    lines = [LogLine("main", BASE + i, b"line %d" % i) for i in range(n)]
    for line in lines:
        cursor.accept(line.ts_ns)
    await sink.write("main", lines, cursor)
    return store, store.find(namespace="ns", pod="p")


async def _chunk_args(inst: Any) -> tuple[Any, ...]:
    seq = inst.active_seq
    offset = await asyncio.to_thread(positions.data_start, inst, seq)
    return inst, seq, inst.segment_path(seq), offset, inst.committed_size(seq)


async def _until(condition: Any) -> None:
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition not reached")


@contextlib.asynccontextmanager
async def _gated_reads(tmp_path: Path, monkeypatch: Any, lines: int,
                       error: BaseException | None = None) -> AsyncIterator[tuple[_Gated, tuple[Any, ...]]]:
    """A store with ``lines`` lines, its chunk reads held at a gate: (the gate, one read's arguments)."""
    store, inst = await _store_with_lines(tmp_path, lines)
    try:
        gated = _Gated(reading._framed_chunk, error)
        monkeypatch.setattr(reading, "_framed_chunk", gated)
        yield gated, await _chunk_args(inst)
        assert not reading._IN_FLIGHT  # nothing left behind
    finally:
        await store.__aexit__(None, None, None)


async def test_concurrent_reads_of_the_same_bytes_are_one_read(tmp_path: Path, monkeypatch: Any) -> None:
    async with _gated_reads(tmp_path, monkeypatch, 50) as (gated, args):
        readers = [asyncio.create_task(reading._shared_chunk(*args)) for _ in range(10)]
        await _until(lambda: gated.calls == 1)
        await asyncio.sleep(0.05)  # every reader has asked by now (each needs one turn of the loop)
        gated.gate.set()
        results = await asyncio.gather(*readers)
        assert gated.calls == 1
        assert all(r is results[0] for r in results)
        # Done reads are not kept: the next reader reads for itself.
        again = await reading._shared_chunk(*args)
        assert gated.calls == 2 and again is not results[0] and again[1] == results[0][1]


async def test_a_cancelled_first_reader_leaves_the_others_a_read(tmp_path: Path, monkeypatch: Any) -> None:
    async with _gated_reads(tmp_path, monkeypatch, 5) as (gated, args):
        first = asyncio.create_task(reading._shared_chunk(*args))
        await _until(lambda: gated.calls == 1)
        others = [asyncio.create_task(reading._shared_chunk(*args)) for _ in range(3)]
        await asyncio.sleep(0.01)
        first.cancel()
        gated.gate.set()
        results = await asyncio.gather(*others)
        assert first.cancelled()
        assert len({id(r) for r in results}) == 1 and len(results[0][0]) == 1
        assert gated.calls == 2  # the one cancelled, and one that the others share


async def test_an_error_reaches_every_reader_that_shared_the_read(tmp_path: Path, monkeypatch: Any) -> None:
    gone = FileNotFoundError("deleted by retention")
    async with _gated_reads(tmp_path, monkeypatch, 5, gone) as (gated, args):
        readers = [asyncio.create_task(reading._shared_chunk(*args)) for _ in range(4)]
        await _until(lambda: gated.calls == 1)
        await asyncio.sleep(0.01)
        gated.gate.set()
        results = await asyncio.gather(*readers, return_exceptions=True)
        assert all(isinstance(r, FileNotFoundError) for r in results)
        assert gated.calls == 1


@pytest.mark.parametrize("how", list(reading.Render))
async def test_followers_get_every_line_and_share_each_rendering(tmp_path: Path, how: reading.Render) -> None:
    store, inst = await _store_with_lines(tmp_path, 3)
    try:
        stop = Wakeup()
        rendered: list[list[bytes]] = [[] for _ in range(20)]

        async def follow(out: list[bytes]) -> None:
            async for item in reading.read(inst, follow=True, stop=stop):
                if isinstance(item, reading.LinesBlock):
                    out.extend(reading.render_block(item, how))

        tasks = [asyncio.create_task(follow(out)) for out in rendered]
        sink = store.sink(namespace="ns", pod="p", job="j")
        cursor = LogCursor(container_id="cid")
        for i in range(3):
            cursor.accept(BASE + i)
        for i in range(3, 60, 3):
            batch = [LogLine("main", BASE + k, b"line %d" % k) for k in range(i, i + 3)]
            for line in batch:
                cursor.accept(line.ts_ns)
            await sink.write("main", batch, cursor)
            await asyncio.sleep(0.01)
        await _until(lambda: all(b"line 59" in b"".join(out) for out in rendered))
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
        whole = [b"".join(out) for out in rendered]
        assert all(w == whole[0] for w in whole)
        texts = [b"line %d" % k for k in range(60)]
        positions = [whole[0].find(t + (b'"' if how is reading.Render.JSONL else b"\n")) for t in texts]
        assert -1 not in positions and positions == sorted(positions)
        # One rendering per batch, shared: far fewer distinct byte objects than readers x pieces.
        pieces = {id(p) for out in rendered for p in out}
        assert len(pieces) < sum(len(out) for out in rendered) / 2
    finally:
        await store.__aexit__(None, None, None)


async def test_stop_wakes_a_waiting_follower(tmp_path: Path) -> None:
    store, inst = await _store_with_lines(tmp_path, 1)
    try:
        stop = Wakeup()
        items = []

        async def follow() -> None:
            async for item in reading.read(inst, follow=True, stop=stop):
                items.append(item)

        task = asyncio.create_task(follow())
        await _until(lambda: bool(items))
        await asyncio.sleep(0.05)
        assert not task.done()
        stop.set()
        await asyncio.wait_for(task, 5)
    finally:
        await store.__aexit__(None, None, None)
