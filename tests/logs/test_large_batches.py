"""A batch bigger than a read chunk is served in pieces, byte-identical to rendering it whole.

The chunk and piece sizes are made tiny here so that every batch is "large" and pieces cut
lines, multi-byte characters and invalid UTF-8 anywhere: the concatenated pieces must equal
what the server renders for a small batch (text, timestamps, jsonl), and no piece may be
bigger than its bound.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podmortem.logs import timestamps
from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import LogLine
from podmortem.logs.storage import chunks, reading, rendering
from podmortem.logs.storage.store import LogStore, StoreSettings

from .stored import run_sync
from .test_framing_forgery import raw_batch

BASE = 1_700_000_000_000_000_000


def expected(lines: list[LogLine], how: reading.Render) -> bytes:
    fmt = timestamps.format_ns
    if how is reading.Render.TEXT:
        return b"".join(x.text + b"\n" for x in lines)
    if how is reading.Render.TIMESTAMPS:
        return b"".join(fmt(x.ts_ns).encode() + b" " + x.text + b"\n" for x in lines)
    return b"".join(
        (json.dumps({"type": "line", "ts": fmt(x.ts_ns), "ts_ns": x.ts_ns,
                     "text": x.text.decode("utf-8", "surrogateescape")}) + "\n").encode()
        for x in lines
    )


async def served(root: Path, batches: list[list[LogLine]], *, raw: bool, how: reading.Render,
                 tail: int | None = None, since_ns: int | None = None) -> tuple[bytes, int, int]:
    """(everything served, the biggest piece, how many large blocks came)."""
    async with LogStore(root, settings=StoreSettings(fsync_interval_s=None)) as store:
        sink = store.sink(namespace="ns", pod="p", job="j")
        cursor = LogCursor(container_id="cid")
        for batch in batches:
            for line in batch:
                cursor.accept(line.ts_ns)
            await sink.write("main", raw_batch("main", batch) if raw else batch, cursor)
        out: list[bytes] = []
        biggest = large = 0
        async for item in reading.read(store.find(namespace="ns", pod="p"), tail=tail, since_ns=since_ns):
            if isinstance(item, reading.LargeLinesBlock):
                large += 1
                pieces = [p async for p in reading.serve_large(item, how)]
            elif isinstance(item, reading.LinesBlock):
                pieces = list(reading.render_block(item, how))
            else:
                continue
            biggest = max([biggest, *map(len, pieces)])
            out.extend(pieces)
        return b"".join(out), biggest, large


_text = st.one_of(
    st.binary(max_size=60),
    st.text(max_size=30).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.sampled_from(["é", "漢字", "😀", "\x00", "\\", '"']).map(str.encode),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.lists(_text, min_size=1, max_size=6), min_size=1, max_size=4),
       raw=st.booleans(), how=st.sampled_from(list(reading.Render)), piece=st.integers(1, 9))
def test_pieces_are_byte_identical_to_whole_rendering(
    monkeypatch: pytest.MonkeyPatch, texts: list[list[bytes]], raw: bool, how: reading.Render, piece: int
) -> None:
    monkeypatch.setattr(chunks, "READ_CHUNK", 64)  # every batch is "large"
    monkeypatch.setattr(rendering, "PIECE", piece)
    if raw:
        texts = [[t.replace(b"\n", b"") for t in batch] for batch in texts]
    batches, n = [], 0
    for batch in texts:
        batches.append([LogLine("main", BASE + n + i, t) for i, t in enumerate(batch)])
        n += len(batch)
    with tempfile.TemporaryDirectory() as tmp:
        got, biggest, large = run_sync(served(Path(tmp), batches, raw=raw, how=how))
    assert got == expected([x for b in batches for x in b], how)
    assert large == len(batches)
    # A piece holds at most PIECE source bytes plus one line's prefix, 6 bytes out per byte in jsonl.
    assert biggest <= 6 * piece + 200 + 6 * 60 * (how is reading.Render.JSONL or piece < 60)


async def test_a_16_mib_line_is_served_in_bounded_pieces(tmp_path: Path) -> None:
    line = bytes(b for b in range(256) if b != 10) * (16 << 12)  # ~16 MiB, invalid UTF-8 all through
    batches = [[LogLine("main", BASE, b"before")], [LogLine("main", BASE + 1, line),
                                                    LogLine("main", BASE + 2, b"after")]]
    for how in reading.Render:
        got, biggest, large = await served(tmp_path / how.value, batches, raw=True, how=how)
        assert large == 1
        assert got == expected([x for b in batches for x in b], how)
        assert biggest <= 6 * reading.PIECE + 256


async def test_tail_and_since_inside_a_large_batch(tmp_path: Path) -> None:
    lines = [LogLine("main", BASE + i, b"%d " % i + b"y" * 100_000) for i in range(6)]
    got, _, large = await served(tmp_path / "tail", [lines], raw=True, how=reading.Render.TEXT, tail=2)
    assert large == 1 and got == expected(lines[4:], reading.Render.TEXT)
    got, _, _ = await served(tmp_path / "since", [lines], raw=False, how=reading.Render.TIMESTAMPS,
                             since_ns=BASE + 3)
    assert got == expected(lines[3:], reading.Render.TIMESTAMPS)


@pytest.mark.parametrize("raw", [True, False])
async def test_clipped_lines_of_a_large_batch_keep_only_the_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raw: bool
) -> None:
    """The report page's read of a 3 MiB line: the same head and note either way; a columnar batch's
    lengths let the rest go unread (a raw one must be scanned for its newline)."""
    text = b"z" * (3 << 20)
    lines = [LogLine("main", BASE, text), LogLine("main", BASE + 1, b"after")]
    async with LogStore(tmp_path, settings=StoreSettings(fsync_interval_s=None)) as store:
        sink = store.sink(namespace="ns", pod="p", job="j")
        cursor = LogCursor(container_id="cid")
        for line in lines:
            cursor.accept(line.ts_ns)
        await sink.write("main", raw_batch("main", lines) if raw else lines, cursor)
        items = [i async for i in reading.read(store.find(namespace="ns", pod="p"))]
    (block,) = [i for i in items if isinstance(i, reading.LargeLinesBlock)]
    read = 0
    pread = os.pread

    def counting(fd: int, n: int, at: int) -> bytes:
        nonlocal read
        data = pread(fd, n, at)
        read += len(data)
        return data

    monkeypatch.setattr(rendering.os, "pread", counting)
    first, second = await reading.read_large_lines(block, 2048)
    assert first.text == b"z" * 2048 + b" [podmortem: %d more bytes]" % (len(text) - 2048)
    assert second.text == b"after"
    if not raw:
        assert read < 256 << 10, read
