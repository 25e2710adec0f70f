"""A reader always advances, waits for data, or ends with a marker: whatever happens to the files.

Before, truncating the active segment under a following reader made it emit zero-byte damage
markers forever at 100% CPU (a plain GET streamed megabytes of them and never ended): the
reader returned a zero-length damage without advancing.
"""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import LogLine
from podmortem.logs.storage import reading
from podmortem.logs.storage.store import Instance, LogStore, StoreSettings

from .stored import run_sync, until

BASE = 1_700_000_000_000_000_000
SMALL = StoreSettings(fsync_interval_s=None, segment_bytes=4096)


def lines(first: int, n: int, size: int = 30) -> list[LogLine]:
    return [LogLine("main", BASE + i, b"line %06d " % i + b"x" * size) for i in range(first, first + n)]


async def write(store: LogStore, batches: list[list[LogLine]]) -> None:
    sink = store.sink(namespace="ns", pod="p", job="j")
    cursor = await sink.load_cursor("main") or LogCursor(container_id="cid")
    for batch in batches:
        for line in batch:
            cursor.accept(line.ts_ns)
        await sink.write("main", batch, cursor)


async def two_batches_the_second_cut(store: LogStore) -> Instance:
    """Lines 0-49 and 50-99 in one active segment, then the file truncated inside the second batch."""
    await write(store, [lines(0, 50)])
    inst = store.find(namespace="ns", pod="p")
    first_end = inst.active_size
    await write(store, [lines(50, 50)])
    os.truncate(inst.segment_path(inst.active_seq or 0), first_end + 100)
    return inst


def texts(items: list[reading.LogItem]) -> list[bytes]:
    return [x.text for i in items if isinstance(i, reading.LinesBlock) for x in i.lines()]


async def test_truncated_active_segment_under_a_plain_reader_ends_with_a_marker(tmp_path: Path) -> None:
    async with LogStore(tmp_path, settings=StoreSettings(fsync_interval_s=None)) as store:
        inst = await two_batches_the_second_cut(store)
        items = [item async for item in reading.read(inst)]
    damage = [i for i in items if isinstance(i, reading.Damaged)]
    assert damage and all(d.length > 0 for d in damage)
    assert damage[-1].why == "truncated"
    assert texts(items) == [x.text for x in lines(0, 50)]  # what is left intact is served
    assert len(items) <= 4


async def test_truncated_active_segment_under_a_following_reader_goes_on(tmp_path: Path) -> None:
    """The reader marks the loss once, waits, and serves what the writer writes next."""
    async with LogStore(tmp_path, settings=StoreSettings(fsync_interval_s=None)) as store:
        inst = await two_batches_the_second_cut(store)
        got: list[reading.LogItem] = []

        async def follow() -> None:
            async for item in reading.read(inst, follow=True):
                got.append(item)

        task = asyncio.create_task(follow())
        for _ in range(200):  # let it meet the truncation; a spinning reader would pile up markers
            await asyncio.sleep(0.005)
        settled = len(got)
        assert settled <= 4, got[:10]
        await write(store, [lines(100, 20)])  # the writer sees the segment moved under it and rolls
        await until(lambda: len(texts(got)) >= 70)
        task.cancel()
    assert texts(got) == [x.text for x in lines(0, 50) + lines(100, 20)]
    assert all(i.length > 0 for i in got if isinstance(i, reading.Damaged))
    assert sum(isinstance(i, reading.Damaged) for i in got) <= 2


async def test_damage_in_the_first_batch_is_told_as_damage_not_retention(tmp_path: Path) -> None:
    async with LogStore(tmp_path, settings=StoreSettings(fsync_interval_s=None)) as store:
        await write(store, [lines(0, 100), lines(100, 100), lines(200, 100)])
        inst = store.find(namespace="ns", pod="p")
        seg = inst.segment_path(inst.active_seq or 0)
    data = bytearray(seg.read_bytes())
    data[200] ^= 0xFF  # inside the first batch's payload
    seg.write_bytes(bytes(data))
    async with LogStore(tmp_path, settings=StoreSettings(fsync_interval_s=None), read_only=True) as store:
        items = [item async for item in reading.read(store.find(namespace="ns", pod="p"))]
    assert not [i for i in items if isinstance(i, reading.RetentionCut)]
    damage = [i for i in items if isinstance(i, reading.Damaged)]
    assert len(damage) == 1 and damage[0].lines == 100 and damage[0].why == "corrupt"
    from podmortem.logs.serving import http

    assert b"(corrupt, 100 lines)" in http.render_text(damage[0], with_timestamps=False)
    assert len(texts(items)) == 200


_ops = st.lists(
    st.tuples(
        st.sampled_from(["truncate", "garbage", "delete", "append", "zero", "link", "swap"]),
        st.integers(min_value=0, max_value=50),
        st.floats(min_value=0.0, max_value=1.0),
    ),
    min_size=1, max_size=5,
)


def _mutate(files: list[Path], ops: list[tuple[str, int, float]], seed: int, outside: Path) -> None:
    rng = random.Random(seed)
    for op, which, frac in ops:
        existing = [f for f in files if f.exists() or f.is_symlink()]
        if not existing:
            return
        seg = existing[which % len(existing)]
        size = seg.stat().st_size if seg.exists() else 0
        if op == "truncate":
            os.truncate(seg, int(frac * size))
        elif op == "garbage":
            at = int(frac * size)
            with open(seg, "r+b") as f:
                f.seek(at)
                f.write(rng.randbytes(rng.randint(1, 300)))
        elif op == "delete":
            seg.unlink()
        elif op == "append":
            with open(seg, "ab") as f:
                f.write(rng.randbytes(rng.randint(1, 5000)))
        elif op == "zero":
            at = int(frac * size)
            with open(seg, "r+b") as f:
                f.seek(at)
                f.write(b"\0" * rng.randint(1, 2000))
        elif op == "link":
            seg.unlink(missing_ok=True)
            seg.symlink_to(outside)
        else:  # replaced by another segment's bytes (a restore gone wrong)
            other = existing[(which + 1) % len(existing)]
            if other.exists() and not other.is_symlink():
                seg.unlink(missing_ok=True)
                seg.write_bytes(other.read_bytes()[: int(frac * other.stat().st_size) + 1])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_ops, seed=st.integers(0, 2**32), tail=st.one_of(st.none(), st.integers(0, 400)),
       since=st.one_of(st.none(), st.integers(0, 400)))
def test_no_reader_loops_without_progress(
    ops: list[tuple[str, int, float]], seed: int, tail: int | None, since: int | None
) -> None:
    """Random damage to the files under an open store: every read ends, in bounded items.

    Each item is a batch served, a marker with a length, or the end; so the number of items is
    bounded by the batches written plus a few per mutation. A reader that stood still would
    exceed it (or hang until the guard below).
    """
    written = [lines(i * 20, 20) for i in range(20)]

    async def run() -> list[reading.LogItem]:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "store"
            outside = Path(tmp) / "outside.seg"
            outside.write_bytes(b"PMLOGSG2" + os.urandom(200))
            async with LogStore(root, settings=SMALL) as store:
                await write(store, written)
                inst = store.find(namespace="ns", pod="p")
                files = [inst.segment_path(s) for s in inst.segment_seqs()]
                _mutate(files, ops, seed, outside)
                items: list[reading.LogItem] = []
                async with asyncio.timeout(60):  # a guard against a hang, not a speed limit
                    async for item in reading.read(inst, tail=tail,
                                                   since_ns=None if since is None else BASE + since):
                        items.append(item)
                        assert len(items) <= len(written) + 4 * len(ops) + 8, items[-5:]
                return items

    items = run_sync(run())
    printed = [x.text for b in written for x in b]
    served = texts(items)
    assert all(t in printed for t in served)
    assert served == sorted(served)  # in order, each at most once (the texts are numbered)
    assert len(set(served)) == len(served)
    assert all(i.length > 0 for i in items if isinstance(i, reading.Damaged))
