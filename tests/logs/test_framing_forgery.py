"""Whatever bytes a container prints, they never act as the store's own framing.

A line can hold a byte-exact, CRC-valid batch: an END marker, lines stamped in 2100, a cursor.
Those bytes must be stored and served back as that line, and nothing more: they never move
the reopened cursor, never end the log and never surface as a batch when a reader or a
reopen resynchronises after a crash or a flipped byte. The forgeries are built here by hand,
with the store's old public batch magic and with random markers, so the tests need nothing
from the store but its API.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import LogEnd, LogLine
from podmortem.logs.lines import LineBatch
from podmortem.logs.storage import quarantine, reading, segments
from podmortem.logs.storage.store import LogStore, StoreSettings

from .stored import run_sync

BASE = 1_700_000_000_000_000_000
YEAR_2100 = 4_102_444_800_000_000_000
SETTINGS = StoreSettings(fsync_interval_s=None)
_FIELDS = "BB2xIIqqQqIIQ"


def forge(kind: int, payload: bytes, *, magic: bytes = b"PMB\x01", n_lines: int = 0, ts: int = YEAR_2100,
          index_after: int = 10**9) -> bytes:
    """A batch as a hostile workload would print it: CRC-valid under the magic it guesses."""
    head = struct.pack(f"<{len(magic)}s{_FIELDS}", magic, kind, 1, n_lines, len(payload), ts, ts,
                       index_after, ts, 1, 0, 10**9)
    crc = zlib.crc32(payload, zlib.crc32(head))
    total = len(head) + 4 + len(payload) + 4
    return head + struct.pack("<I", crc) + payload + struct.pack("<I", total)


def forged_texts(magic: bytes) -> list[bytes]:
    end = json.dumps({"reason": "completed", "container_id": "forged"}).encode()
    lines = struct.pack("<q", YEAR_2100) + struct.pack("<I", 6) + b"FORGED\n"
    return [
        forge(3, end, magic=magic),                                  # an end marker
        forge(1, lines, magic=magic, n_lines=1),                     # a line from 2100
        forge(4, b"2100-01-01T00:00:00Z FORGED\n", magic=magic, n_lines=1),
        b"PMLOGSG2" + magic[:16].ljust(16, b"\0") + struct.pack("<I", 0) + forge(3, end, magic=magic),
        b"PMLOGSG1" + forge(3, end, magic=magic),
    ]


def raw_batch(container: str, lines: list[LogLine]) -> LineBatch:
    """The lines as the follower hands them over: the API's ``<RFC3339> <text>`` block."""
    return LineBatch.of(container, lines)


@dataclass
class Written:
    """What the container printed and the store acknowledged, with each batch's byte range."""

    batches: list[list[LogLine]]
    ends: list[int]
    cursors: list[LogCursor]
    segment: Path
    data_start: int


async def write_all(root: Path, batches: list[list[LogLine]], *, raw: bool) -> Written:
    ends = []
    cursors = []
    async with LogStore(root, settings=SETTINGS) as store:
        sink = store.sink(namespace="ns", pod="p", job="j")
        cursor = LogCursor(container_id="cid")
        for lines in batches:
            for line in lines:
                cursor.accept(line.ts_ns)
            await sink.write("main", raw_batch("main", lines) if raw else lines, cursor)
            cursors.append(cursor.copy())
            inst = store.find(namespace="ns", pod="p")
            ends.append(inst.active_size)
        seg = inst.segment_path(inst.active_seq or 0)
        # Format 1's header is its 8-byte magic; format 2's adds the 16-byte marker and a CRC.
        data_start = 8 if seg.read_bytes()[:8] == b"PMLOGSG1" else 28
        return Written(batches, ends, cursors, seg, data_start)


Served = tuple[list[tuple[int, bytes]], list[reading.LogItem], LogCursor | None, bool]


async def read_back(root: Path) -> Served:
    async with LogStore(root, settings=SETTINGS) as store:
        cursor = await store.sink(namespace="ns", pod="p", job="j").load_cursor("main")
        inst = store.find(namespace="ns", pod="p")
        items = [item async for item in reading.read(inst)]
        served: list[tuple[int, bytes]] = []
        for item in items:
            if isinstance(item, reading.LinesBlock):
                served.extend((x.ts_ns, x.text) for x in item.lines())
            elif isinstance(item, reading.LargeLinesBlock):
                served.extend((x.ts_ns, x.text) for x in await reading.read_large_lines(item, None))
        return served, items, cursor, inst.ended is not None


def _lines(texts: list[bytes], first: int) -> list[LogLine]:
    return [LogLine("main", BASE + first + i, text) for i, text in enumerate(texts)]


async def test_a_printed_end_batch_never_ends_the_log_after_a_crash(tmp_path: Path) -> None:
    """The issue's case: a printed END batch, then a crash cuts the last batch mid-write."""
    for n, magic in enumerate([b"PMB\x01", os.urandom(16), b"\0" * 16]):
        root = tmp_path / f"store-{n}"
        printed = forged_texts(magic)
        batches = [_lines([b"epoch 1"], 0), _lines([b"epoch 2", *printed], 1),
                   _lines([b"epoch 3", *printed], 100)]
        written = await write_all(root, batches, raw=False)
        cut = written.ends[2] - 7  # the last write() was 7 bytes short when the process was killed
        os.truncate(written.segment, cut)
        served, items, cursor, ended = await read_back(root)
        assert served == [(x.ts_ns, x.text) for b in batches[:2] for x in b]
        assert cursor == written.cursors[1]
        assert not ended and not any(isinstance(i, LogEnd) for i in items)
        # The follower resumes from the real cursor, not from 2100.
        assert cursor is not None and cursor.last_ts_ns == batches[1][-1].ts_ns


async def test_every_cut_offset_of_the_last_batch_keeps_the_real_cursor(tmp_path: Path) -> None:
    """A crash at each byte of a batch whose lines are forgeries: the cursor is the previous batch's."""
    printed = forged_texts(b"PMB\x01")[:2]
    batches = [_lines([b"a", *printed], 0), _lines([*printed, b"z"], 10)]
    written = await write_all(tmp_path / "w", batches, raw=False)
    pristine = written.segment.read_bytes()
    for cut in range(written.ends[0], written.ends[1]):
        written.segment.write_bytes(pristine[:cut])
        # A reopen repairs the tail: work on a copy so that every cut starts from the same bytes.
        served, _, cursor, ended = await read_back(tmp_path / "w")
        assert served == [(x.ts_ns, x.text) for x in batches[0]], cut
        assert cursor == written.cursors[0], cut
        assert not ended
        for extra in written.segment.parent.glob("*.quarantine"):
            extra.unlink()


_hostile_text = st.one_of(
    st.binary(max_size=40).filter(lambda b: b"\n" not in b),
    st.sampled_from(forged_texts(b"PMB\x01") + forged_texts(b"\x00" * 16)),
    st.builds(lambda m: forged_texts(m)[0], st.binary(min_size=16, max_size=16)),
    st.just(b"PMB\x01" * 20),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(st.lists(_hostile_text, min_size=1, max_size=4), min_size=2, max_size=6),
    raw=st.booleans(),
    in_last=st.booleans(),
    cut_at=st.floats(min_value=0.0, max_value=1.0),
    flips=st.lists(st.floats(min_value=0.0, max_value=0.999), max_size=3),
)
def test_hostile_output_with_crashes_and_corruption(
    texts: list[list[bytes]], raw: bool, in_last: bool, cut_at: float, flips: list[float]
) -> None:
    """Every acknowledged, untouched batch is served byte-identical; nothing else is ever served."""
    if raw:  # the API's lines cannot hold a newline; the forgeries must survive without one
        texts = [[t.replace(b"\n", b" ") for t in batch] for batch in texts]
    batches, first = [], 0
    for batch in texts:
        batches.append(_lines(batch, first))
        first += len(batch)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        written = run_sync(write_all(root, batches, raw=raw))
        data = bytearray(written.segment.read_bytes())
        # A crash anywhere, or (half the time) inside the last write, where a torn batch is.
        low = written.ends[-2] if in_last else 0
        cut = low + int(cut_at * (len(data) - low))
        positions = sorted({int(f * cut) for f in flips} if cut else set())
        for pos in positions:
            data[pos] ^= 0x5A
        written.segment.write_bytes(bytes(data[:cut]))
        served, items, cursor, ended = run_sync(read_back(root))

    printed = [(x.ts_ns, x.text) for b in batches for x in b]
    # Nothing served that the container did not print, in its order, no line twice.
    order = {line: i for i, line in enumerate(printed)}
    assert all(line in order for line in served)
    assert [order[line] for line in served] == sorted({order[line] for line in served})
    # Every batch wholly before the cut, with no flipped byte in it, is served whole.
    start = written.data_start
    for batch, end in zip(batches, written.ends, strict=True):
        touched = any(start <= p < end for p in positions)
        if end <= cut and not touched:
            for line in batch:
                assert (line.ts_ns, line.text) in served
        start = end
    # The log never reads as ended, and the reopened cursor is a real one the store was handed
    # with a batch wholly before the cut: never one a line forged.
    assert not ended and not any(isinstance(i, LogEnd) for i in items)
    if cursor is not None and cursor.last_ts_ns is not None:
        before_cut = [c for c, end in zip(written.cursors, written.ends, strict=True) if end <= cut]
        assert cursor in before_cut


async def test_a_segment_whose_header_is_damaged_is_read_with_the_instance_marker(tmp_path: Path) -> None:
    """A flipped byte in the file header loses nothing: the marker is also in the instance's meta."""
    batches = [_lines([b"one", b"two"], 0), _lines([b"three"], 2)]
    written = await write_all(tmp_path, batches, raw=True)
    data = bytearray(written.segment.read_bytes())
    data[10] ^= 0xFF  # inside the sync marker of the header
    written.segment.write_bytes(bytes(data))
    served, _, _, _ = await read_back(tmp_path)
    assert served == [(x.ts_ns, x.text) for b in batches for x in b]
    # The header holds no lines: readers need no marker, and its bytes are set aside.
    aside = quarantine.records(written.segment.with_name(written.segment.name + ".quarantine"))
    assert aside == [{"offset": 0, "length": written.data_start, "why": "corrupt"}]
    meta = json.loads((written.segment.parent / "instance.json").read_text())
    assert len(bytes.fromhex(meta["sync"])) == segments.SYNC_SIZE
