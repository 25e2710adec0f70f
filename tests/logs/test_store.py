"""The durable log store: exact resume, crash consistency, reads, markers, raw bytes."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import EndReason, GapMarker, GapReason, LogEnd, LogLine
from podmortem.logs.lines import LineBatch
from podmortem.logs.storage import quarantine, reading, recovery, segments, store
from podmortem.logs.storage.store import LogStore, StoreSettings

BASE = 1_714_564_800 * 10**9
NO_FSYNC = StoreSettings(fsync_interval_s=None)


def produce(n: int, *, start: int = 0, cid: str = "cid-1", per_ts: int = 3) -> list[LogLine]:
    return [LogLine("main", BASE + (i // per_ts) * 1000, b"line %d" % i) for i in range(start, start + n)]


async def deliver(sink: store.PodLogSink, lines: list[LogLine], cursor: LogCursor, *, batch: int = 7) -> None:
    """What the follower does: offer lines to the cursor, write what it accepts, with the cursor."""
    for i in range(0, len(lines), batch):
        chunk = [line for line in lines[i:i + batch] if cursor.accept(line.ts_ns)]
        await sink.write("main", chunk, cursor)


def as_raw(lines: list[LogLine]) -> LineBatch:
    return LineBatch.of("main", lines)


async def stored(st: LogStore, *, since_ns: int | None = None, tail: int | None = None) -> list[object]:
    return list(await reading.read_lines(st.find(namespace="ns", pod="pod-1"), since_ns=since_ns, tail=tail))


def texts(items: Sequence[object]) -> list[bytes]:
    return [x.text for x in items if isinstance(x, LogLine)]


async def test_restart_resumes_without_loss_or_duplicate(tmp_path: Path) -> None:
    lines = produce(100)
    async with LogStore(tmp_path, settings=NO_FSYNC) as st:
        sink = st.sink(namespace="ns", pod="pod-1", job="job-1")
        cursor = LogCursor(container_id="cid-1")
        await deliver(sink, lines[:40], cursor)
    async with LogStore(tmp_path, settings=NO_FSYNC) as st:
        sink = st.sink(namespace="ns", pod="pod-1")
        loaded = await sink.load_cursor("main")
        assert loaded is not None
        assert loaded.to_json() == cursor.to_json()
        # The kubelet replays from the cursor's whole second: here, everything from the start.
        await deliver(sink, lines, loaded)
        assert texts(await stored(st)) == [x.text for x in lines]


async def test_stored_instances_load_off_the_event_loop_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a restart a load reads each instance's last segment: a worker thread's job, done once."""
    lines = produce(30)
    async with LogStore(tmp_path, settings=NO_FSYNC) as st:
        await deliver(st.sink(namespace="ns", pod="pod-1"), lines, LogCursor(container_id="cid-1"))
    loads: list[bool] = []
    load = recovery.load_instances

    def recording(*args: object, **kwargs: object) -> list[store.Instance]:
        loads.append(threading.current_thread() is threading.main_thread())
        return load(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(recovery, "load_instances", recording)
    async with LogStore(tmp_path, settings=NO_FSYNC) as st:
        sink = st.sink(namespace="ns", pod="pod-1")
        cursors = await asyncio.gather(*(sink.load_cursor("main") for _ in range(5)))
        assert {c.delivered for c in cursors if c is not None} == {30}
        await sink.write("main", produce(3, start=30), LogCursor(container_id="cid-1", last_ts_ns=BASE * 2))
        assert loads == [False]  # one load, in a worker thread
        assert len(texts(await stored(st))) == 33


async def test_cursor_is_copied_not_referenced(tmp_path: Path) -> None:
    async with LogStore(tmp_path, settings=NO_FSYNC) as st:
        sink = st.sink(namespace="ns", pod="pod-1")
        cursor = LogCursor(container_id="cid-1")
        lines = produce(10)
        for x in lines[:5]:
            cursor.accept(x.ts_ns)
        await sink.write("main", lines[:5], cursor)
        cursor.accept(lines[5].ts_ns)  # the live cursor moves on, no write follows (a crash)
    async with LogStore(tmp_path, settings=NO_FSYNC) as st:
        loaded = await st.sink(namespace="ns", pod="pod-1").load_cursor("main")
        assert loaded is not None and loaded.delivered == 5


#: Bytes before a batch's payload (sync marker, fields, CRC).
HEADER = segments.Framing.new().header_size


@pytest.mark.parametrize("cut", [1, 10, HEADER, HEADER + 5, -1])
async def test_torn_tail_is_cut_and_cursor_matches_data(tmp_path: Path, cut: int) -> None:
    lines = produce(60)
    async with LogStore(tmp_path, settings=NO_FSYNC) as st:
        sink = st.sink(namespace="ns", pod="pod-1")
        cursor = LogCursor(container_id="cid-1")
        await deliver(sink, lines[:50], cursor, batch=10)
        inst = st.find(namespace="ns", pod="pod-1")
        seg = inst.segment_path(inst.active_seq or 0)
        good_size = seg.stat().st_size
        good_cursor = cursor.to_json()
        await deliver(sink, lines[50:], cursor, batch=10)
    # A kill in the middle of the last write(): only part of its batch reached the file.
    full = seg.read_bytes()
    last_len = len(full) - good_size
    torn = full[:good_size + (cut if cut > 0 else last_len - 1)]
    seg.write_bytes(torn)
    async with LogStore(tmp_path, settings=NO_FSYNC) as st:
        sink = st.sink(namespace="ns", pod="pod-1")
        loaded = await sink.load_cursor("main")
        assert loaded is not None and loaded.to_json() == good_cursor
        # The intact batches stay; the torn bytes are set aside and a marker takes their place.
        repaired = seg.read_bytes()
        assert repaired[:good_size] == full[:good_size]
        marker = segments.scan(repaired).last
        assert marker is not None and marker.kind is segments.BatchKind.DAMAGE
        aside = quarantine.records(seg.with_name(seg.name + ".quarantine"))
        assert aside == [{"offset": good_size, "length": len(torn) - good_size, "why": "torn"}]
        await deliver(sink, lines, loaded, batch=10)
        assert texts(await stored(st)) == [x.text for x in lines]
        inst = st.find(namespace="ns", pod="pod-1")
        marks = [item async for item in reading.read(inst) if isinstance(item, reading.Damaged)]
        assert marks == [reading.Damaged("main", len(torn) - good_size, "torn")]


async def test_corrupt_batch_is_cut_by_crc(tmp_path: Path) -> None:
    lines = produce(30)
    async with LogStore(tmp_path, settings=NO_FSYNC) as st:
        sink = st.sink(namespace="ns", pod="pod-1")
        cursor = LogCursor(container_id="cid-1")
        await deliver(sink, lines[:20], cursor, batch=10)
        good = cursor.to_json()
        inst = st.find(namespace="ns", pod="pod-1")
        seg = inst.segment_path(inst.active_seq or 0)
        size = seg.stat().st_size
        await deliver(sink, lines[20:], cursor, batch=10)
    data = bytearray(seg.read_bytes())
    data[size + HEADER + 3] ^= 0xFF  # a flipped byte in the last batch's payload
    seg.write_bytes(bytes(data))
    async with LogStore(tmp_path, settings=NO_FSYNC) as st:
        loaded = await st.sink(namespace="ns", pod="pod-1").load_cursor("main")
        assert loaded is not None and loaded.to_json() == good
        assert len(texts(await stored(st))) == 20


async def test_killed_writer_process_loses_nothing_acknowledged(tmp_path: Path) -> None:
    """A real kill -9 of a writing process: the reopened cursor equals the lines on disk."""
    script = f"""
import asyncio, sys
from podmortem.logs.storage.store import LogStore, StoreSettings
from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import LogLine
async def main():
    async with LogStore({str(tmp_path)!r}, settings=StoreSettings(fsync_interval_s=None)) as st:
        sink = st.sink(namespace="ns", pod="pod-1")
        cursor = LogCursor(container_id="cid-1")
        i = 0
        while True:
            batch = []
            for _ in range(500):
                ts = {BASE} + (i // 3) * 1000
                cursor.accept(ts)
                batch.append(LogLine("main", ts, b"x" * (i % 300) + b" %d" % i))
                i += 1
            await sink.write("main", batch, cursor)
            if i == 50_000:
                print("ready", flush=True)
asyncio.run(main())
"""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert (await proc.stdout.readline()).strip() == b"ready"
    proc.kill()
    await proc.wait()
    async with LogStore(tmp_path, settings=NO_FSYNC) as st:
        loaded = await st.sink(namespace="ns", pod="pod-1").load_cursor("main")
        assert loaded is not None
        items = await stored(st)
        got = texts(items)
        assert loaded.delivered == len(got) >= 50_000
        assert [int(t.rsplit(b" ", 1)[1]) for t in got] == list(range(len(got)))
        last = [x for x in items if isinstance(x, LogLine)][-1]
        assert loaded.last_ts_ns == last.ts_ns


async def test_tail_since_and_markers_in_order(tmp_path: Path) -> None:
    lines = [LogLine("main", x.ts_ns, x.text + b" " + b"x" * 100) for x in produce(100, per_ts=1)]
    async with LogStore(tmp_path, settings=StoreSettings(fsync_interval_s=None, segment_bytes=4096)) as st:
        sink = st.sink(namespace="ns", pod="pod-1")
        cursor = LogCursor(container_id="cid-1")
        await deliver(sink, lines[:50], cursor, batch=9)
        gap = GapMarker("main", GapReason.ROTATION, lines[49].ts_ns, lines[50].ts_ns, "rotated")
        await sink.gap(gap)
        await deliver(sink, lines[50:], cursor, batch=9)
        await sink.end(LogEnd("main", "cid-1", EndReason.TERMINATED))
        inst = st.find(namespace="ns", pod="pod-1")
        assert len(inst.segment_seqs()) > 1  # the reads below cross segment files

        everything = await stored(st)
        assert everything[50] == gap
        assert everything[-1] == LogEnd("main", "cid-1", EndReason.TERMINATED)
        assert texts(everything) == [x.text for x in lines]
        assert st.gaps_total == 1

        tail = await stored(st, tail=5)
        assert texts(tail) == [x.text for x in lines[-5:]]
        assert tail[-1] == everything[-1]
        assert texts(await stored(st, tail=0)) == []
        assert texts(await stored(st, tail=1000)) == [x.text for x in lines]
        tail_gap = await stored(st, tail=50)
        assert tail_gap[0] == gap and texts(tail_gap) == [x.text for x in lines[50:]]

        since = await stored(st, since_ns=lines[73].ts_ns)
        assert texts(since) == [x.text for x in lines[73:]]
        assert gap not in since
        both = await stored(st, since_ns=lines[73].ts_ns, tail=3)
        assert texts(both) == [x.text for x in lines[-3:]]


async def test_raw_batches_keep_bytes_exactly(tmp_path: Path) -> None:
    weird = [
        b"\xff\xfe not utf-8 \xc3",
        b"progress 10%\rprogress 50%\rprogress 100%",
        b"\x1b[31mred\x1b[0m",
        b"",
        b"big " + bytes(range(256)).replace(b"\n", b"") * 300,  # > 16 KiB
    ]
    lines = [LogLine("main", BASE + i, t) for i, t in enumerate(weird)]
    async with LogStore(tmp_path, settings=NO_FSYNC) as st:
        sink = st.sink(namespace="ns", pod="pod-1")
        cursor = LogCursor(container_id="cid-1")
        for x in lines[:2]:
            cursor.accept(x.ts_ns)
        await sink.write("main", lines[:2], cursor)  # columnar
        for x in lines[2:]:
            cursor.accept(x.ts_ns)
        await sink.write("main", as_raw(lines[2:]), cursor)  # raw, as the follower sends
        got = await stored(st)
        assert got == lines
        inst = st.find(namespace="ns", pod="pod-1")
        blocks = [b async for b in reading.read(inst) if isinstance(b, reading.LinesBlock)]
        assert b"".join(b.text_bytes() for b in blocks) == b"".join(t + b"\n" for t in weird)
        assert blocks[1].text_bytes(timestamps=True) == as_raw(lines[2:]).raw


async def test_follow_sees_new_lines_and_ends_with_the_log(tmp_path: Path) -> None:
    lines = produce(30)
    async with LogStore(tmp_path, settings=NO_FSYNC) as st:
        sink = st.sink(namespace="ns", pod="pod-1")
        cursor = LogCursor(container_id="cid-1")
        await deliver(sink, lines[:10], cursor)
        inst = st.find(namespace="ns", pod="pod-1")
        seen: list[object] = []
        got_first = asyncio.Event()

        async def follow() -> None:
            async for item in reading.read(inst, follow=True):
                if isinstance(item, reading.LinesBlock):
                    seen.extend(item.lines())
                else:
                    seen.append(item)
                if len(seen) >= 10:
                    got_first.set()

        task = asyncio.create_task(follow())
        await got_first.wait()
        assert not task.done()
        await deliver(sink, lines[10:], cursor)
        await sink.end(LogEnd("main", "cid-1", EndReason.POD_DELETED))
        await asyncio.wait_for(task, 10)
        assert texts(seen) == [x.text for x in lines]
        assert seen[-1] == LogEnd("main", "cid-1", EndReason.POD_DELETED)


async def test_restart_starts_a_new_instance_and_previous_is_kept(tmp_path: Path) -> None:
    async with LogStore(tmp_path, settings=NO_FSYNC) as st:
        sink = st.sink(namespace="ns", pod="pod-1", job="job-1")
        c1 = LogCursor(container_id="cid-1")
        await deliver(sink, produce(10), c1)
        await sink.end(LogEnd("main", "cid-1", EndReason.RESTARTED))
        c2 = LogCursor(container_id="cid-2")
        await deliver(sink, produce(5, start=100), c2)
        latest = st.find(namespace="ns", pod="pod-1")
        previous = st.find(namespace="ns", pod="pod-1", previous=True)
        assert latest.container_id == "cid-2" and previous.container_id == "cid-1"
        assert len(texts(await reading.read_lines(latest))) == 5
        assert (await sink.load_cursor("main")) == c2
    assert (tmp_path / "ns" / "job-1" / "pod-1" / "main" / "0001" / "instance.json").exists()


async def test_lookup_errors(tmp_path: Path) -> None:
    async with LogStore(tmp_path, settings=NO_FSYNC) as st:
        with pytest.raises(store.LogNotFound):
            st.find(namespace="ns", pod="nope")
        sink = st.sink(namespace="ns", pod="pod-1")
        for name in ("a", "b"):
            c = LogCursor(container_id=f"cid-{name}")
            c.accept(BASE)
            await sink.write(name, [LogLine(name, BASE, b"x")], c)
        with pytest.raises(store.ContainerRequired) as err:
            st.find(namespace="ns", pod="pod-1")
        assert err.value.containers == ["a", "b"]
        with pytest.raises(store.LogNotFound):
            st.find(namespace="ns", pod="pod-1", container="c")
        with pytest.raises(ValueError):
            st.sink(namespace="../etc", pod="pod-1")


async def test_second_writer_is_refused(tmp_path: Path) -> None:
    async with LogStore(tmp_path, settings=NO_FSYNC):
        with pytest.raises(store.StoreLocked):
            async with LogStore(tmp_path, settings=NO_FSYNC):
                pass


async def test_interval_fsync_policy_flushes_and_closes_cleanly(tmp_path: Path) -> None:
    async with LogStore(tmp_path, settings=StoreSettings(fsync_interval_s=0.01)) as st:
        sink = st.sink(namespace="ns", pod="pod-1")
        await deliver(sink, produce(50), LogCursor(container_id="cid-1"))
        await asyncio.sleep(0.05)
        inst = st.find(namespace="ns", pod="pod-1")
        assert not inst.dirty
    async with LogStore(tmp_path, settings=StoreSettings(fsync_interval_s=0)) as st:
        sink = st.sink(namespace="ns", pod="pod-1")
        loaded = await sink.load_cursor("main")
        assert loaded is not None
        await deliver(sink, produce(60), loaded)
        assert len(texts(await stored(st))) == 60


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError):
        StoreSettings(segment_bytes=10)
    with pytest.raises(ValueError):
        StoreSettings(fsync_interval_s=-1)
    assert os.path.basename(store.__file__) == "store.py"
