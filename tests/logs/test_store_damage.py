"""Damage never deletes what can be read: random flipped bytes in random segments.

Every batch no flip touched is served intact and in order; every touched one is
replaced by a damage marker at its place; the damaged bytes are kept aside in a
quarantine file; the corrupt-bytes counter counts them.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import LogLine
from podmortem.logs.storage import quarantine, reading, segments
from podmortem.logs.storage.store import LogStore, StoreSettings

from .stored import run_sync

BASE = 1_714_564_800 * 10**9
SMALL = StoreSettings(fsync_interval_s=None, segment_bytes=4096)


@dataclass(frozen=True)
class Batch:
    segment: int
    offset: int
    length: int
    texts: tuple[bytes, ...]


async def _write(root: Path) -> None:
    async with LogStore(root, settings=SMALL) as st:
        sink = st.sink(namespace="ns", pod="p", job="j")
        cursor = LogCursor(container_id="cid")
        n = 0
        for b in range(90):
            lines = []
            for _ in range(1 + b % 7):
                cursor.accept(BASE + n)
                lines.append(LogLine("main", BASE + n, b"line %d of batch %d " % (n, b) + b"x" * (n % 50)))
                n += 1
            await sink.write("main", lines, cursor)


def _instance_dir(root: Path) -> Path:
    return root / "ns" / "j" / "p" / "main" / "0000"


def _layout(root: Path) -> list[Batch]:
    out = []
    segs = sorted(_instance_dir(root).glob("*.seg"))
    for i, seg in enumerate(segs):
        data = seg.read_bytes()
        framing = segments.framing_of(data)
        assert framing is not None
        pos = framing.data_start
        while pos < len(data):
            head = framing.check_batch(data, pos)
            payload = data[pos + head.header_size:pos + head.header_size + head.payload_len]
            texts = tuple(segments.decode_lines(head, payload).texts())
            out.append(Batch(i, pos, head.total_len, texts))
            pos += head.total_len
    return out


@pytest.fixture(scope="module")
def original() -> Iterator[tuple[Path, list[Batch], list[int]]]:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "store"
        run_sync(_write(root))
        sizes = [seg.stat().st_size for seg in sorted(_instance_dir(root).glob("*.seg"))]
        layout = _layout(root)
        assert len(sizes) >= 5 and len(layout) == 90
        yield root, layout, sizes


async def _read_back(root: Path) -> tuple[list[object], int]:
    async with LogStore(root, settings=SMALL) as st:
        inst = st.find(namespace="ns", pod="p", container="main")
        tokens: list[object] = []
        async for item in reading.read(inst):
            if isinstance(item, reading.LinesBlock):
                tokens.extend(item.payload.texts(item.start))
            elif isinstance(item, reading.Damaged) and tokens[-1:] != ["DAMAGED"]:
                tokens.append("DAMAGED")
        return tokens, st.corrupt_bytes_total


flips = st.lists(
    st.tuples(st.integers(min_value=0, max_value=10**9), st.integers(min_value=0, max_value=10**9),
              st.integers(min_value=1, max_value=255)),
    min_size=1, max_size=6,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                    HealthCheck.function_scoped_fixture])
@given(flips=flips)
def test_every_untouched_batch_is_served_in_order_and_every_touched_one_is_marked(
    original: tuple[Path, list[Batch], list[int]], flips: list[tuple[int, int, int]], tmp_path: Path
) -> None:
    root, layout, sizes = original
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    shutil.copytree(root, work / "store")
    segs = sorted(_instance_dir(work / "store").glob("*.seg"))
    touched: set[tuple[int, int]] = set()
    data = [bytearray(seg.read_bytes()) for seg in segs]
    before = [bytes(d) for d in data]
    for seg_pick, at, xor in flips:
        i = seg_pick % len(segs)
        data[i][at % sizes[i]] ^= xor
    for i, seg in enumerate(segs):
        seg.write_bytes(bytes(data[i]))
        changed = [p for p in range(sizes[i]) if data[i][p] != before[i][p]]  # two flips may cancel
        touched.update((b.segment, b.offset) for b in layout
                       if b.segment == i and any(b.offset <= p < b.offset + b.length for p in changed))

    expected: list[object] = []
    for b in layout:
        if (b.segment, b.offset) in touched:
            if expected[-1:] != ["DAMAGED"]:
                expected.append("DAMAGED")
        else:
            expected.extend(b.texts)
    got, counted = run_sync(_read_back(work / "store"))
    assert got == expected
    if touched:
        assert counted > 0
        assert any(_instance_dir(work / "store").glob("*.seg.quarantine"))
    shutil.rmtree(work)


async def test_a_flipped_byte_in_the_newest_segment_loses_only_its_batch(tmp_path: Path) -> None:
    """One flipped byte in batch 10 of 100 used to cut 9,000 of 10,000 lines at reopen."""
    root = tmp_path / "store"
    async with LogStore(root, settings=StoreSettings(fsync_interval_s=None)) as st:
        sink = st.sink(namespace="ns", pod="p", job="j")
        cursor = LogCursor(container_id="cid")
        for b in range(100):
            lines = []
            for k in range(100):
                cursor.accept(BASE + b * 100 + k)
                lines.append(LogLine("main", BASE + b * 100 + k, b"%d" % (b * 100 + k)))
            await sink.write("main", lines, cursor)
    layout = _layout(root)
    seg = next(_instance_dir(root).glob("*.seg"))
    data = bytearray(seg.read_bytes())
    data[layout[9].offset + segments.Framing.new().header_size + 5] ^= 0x20
    seg.write_bytes(bytes(data))
    async with LogStore(root, settings=StoreSettings(fsync_interval_s=None)) as st:
        inst = st.find(namespace="ns", pod="p")
        items = [item async for item in reading.read(inst)]
        lines = [t for item in items if isinstance(item, reading.LinesBlock) for t in item.payload.texts()]
        assert len(lines) == 9_900
        assert [i for i in items if isinstance(i, reading.Damaged)] == [
            reading.Damaged("main", layout[9].length, "corrupt", 100)
        ]
        assert inst.index == 10_000  # the cursor is the last batch's: nothing is fetched again
        assert st.corrupt_bytes_total == layout[9].length
    records = quarantine.records(seg.with_name(seg.name + ".quarantine"))
    assert records == [{"offset": layout[9].offset, "length": layout[9].length, "why": "corrupt"}]


async def test_a_flipped_file_magic_deletes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    await _write(root)
    layout = _layout(root)
    newest = sorted(_instance_dir(root).glob("*.seg"))[-1]
    data = bytearray(newest.read_bytes())
    data[2] ^= 0xFF
    newest.write_bytes(bytes(data))
    async with LogStore(root, settings=SMALL) as st:
        inst = st.find(namespace="ns", pod="p")
        texts = [t for item in [i async for i in reading.read(inst)]
                 if isinstance(item, reading.LinesBlock) for t in item.payload.texts(item.start)]
    assert texts == [t for b in layout for t in b.texts]
