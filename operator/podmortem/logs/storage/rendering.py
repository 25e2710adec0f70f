"""Stored lines rendered for a reader (as ``kubectl logs`` prints them, with timestamps, or as
jsonl), in pieces of bounded size: a 16 MiB line is never held whole, rendered or not."""

from __future__ import annotations

import codecs
import enum
import json
import os
import sys
from array import array
from collections.abc import AsyncIterator, Generator, Iterator

from podmortem.files import open_nofollow
from podmortem.logs import timestamps
from podmortem.logs.events import LogLine
from podmortem.logs.storage import chunks, read_pool, segments
from podmortem.logs.storage.blocks import LargeLinesBlock, LinesBlock

#: Source bytes per rendered piece of a large batch: the rendering (timestamps, JSON escapes of
#: up to 6 bytes per byte) of one piece stays under 400 KiB.
PIECE = 64 << 10


class Render(enum.Enum):
    """How a large batch is served: as `kubectl logs` prints it, with timestamps, or as jsonl."""

    TEXT = "text"
    TIMESTAMPS = "timestamps"
    JSONL = "jsonl"


def large_lines(block: LargeLinesBlock, clip_at: int | None) -> list[LogLine]:
    out: list[LogLine] = []
    for ts, text in _large_line_texts(block, clip_at):
        out.append(LogLine(block.container, ts, text))
    return out


def _large_line_texts(block: LargeLinesBlock, clip_at: int | None) -> Iterator[tuple[int, bytes]]:
    """(timestamp, text) of each line served, the text cut at ``clip_at`` bytes (None: whole)."""
    ts = 0
    parts: list[bytes] = []
    kept = 0
    dropped = 0
    for event, value in _large_events(block, keep=clip_at):
        if event is _START:
            assert isinstance(value, int)
            ts, parts, kept, dropped = value, [], 0, 0
        elif event is _DROP:
            assert isinstance(value, int)
            dropped += value
        elif event is _BODY:
            assert isinstance(value, bytes)
            if clip_at is None or kept + len(value) <= clip_at:
                parts.append(value)
                kept += len(value)
            else:
                room = max(0, clip_at - kept)
                parts.append(value[:room])
                kept += room
                dropped += len(value) - room
        else:
            text = b"".join(parts)
            yield ts, (text + b" [podmortem: %d more bytes]" % dropped if dropped else text)


_START, _BODY, _END, _DROP = object(), object(), object(), object()
#: (_START, timestamp), (_BODY, bytes), (_END, None): one line, its text in pieces; with ``keep``,
#: (_DROP, n) for the n bytes past it that were not kept.
_Event = tuple[object, int | bytes | None]


def _large_events(block: LargeLinesBlock, keep: int | None = None) -> Iterator[_Event]:
    """A large batch as (start, ts) (body, bytes)* (end, None) per served line, read in pieces.

    ``keep``: bytes of each text to yield; the rest is told as one (drop, n).
    """
    fd = open_nofollow(block.path, os.O_RDONLY)
    try:
        head = block.head
        at = block.offset + head.header_size
        if head.kind is segments.BatchKind.RAW_LINES:
            yield from _raw_events(fd, at, head.payload_len, block, keep)
        else:
            yield from _columnar_events(fd, at, head, block, keep)
    finally:
        os.close(fd)


def _wanted(block: LargeLinesBlock, line: int, ts: int) -> bool:
    return line >= block.start and (block.since_ns is None or ts >= block.since_ns)


def _raw_events(fd: int, at: int, size: int, block: LargeLinesBlock, keep: int | None) -> Iterator[_Event]:
    """Events of ``<RFC3339> text\\n`` lines; a line's text never holds a newline here."""
    pos, end = at, at + size
    line = 0
    while pos < end:
        # The stamp: the API's RFC3339 text, at most ~40 bytes, up to the first space.
        stamp = os.pread(fd, min(64, end - pos), pos)
        cut = len(stamp)
        for sep in (b" ", b"\n"):
            found = stamp.find(sep)
            if 0 <= found < cut:
                cut = found
        try:
            ts = timestamps.parse_ns(stamp[:cut])
        except (ValueError, OverflowError):
            ts = 0
        pos += cut + (1 if cut < len(stamp) and stamp[cut:cut + 1] == b" " else 0)
        wanted = _wanted(block, line, ts)
        if wanted:
            yield _START, ts
        room = keep
        dropped = 0
        while pos < end:
            scanning = room is not None and room <= 0
            piece = os.pread(fd, min(chunks.READ_CHUNK if scanning else PIECE, end - pos), pos)
            nl = piece.find(b"\n")
            body = piece if nl < 0 else piece[:nl]
            if wanted and body:
                if room is None:
                    yield _BODY, body
                else:
                    shown = min(len(body), max(room, 0))
                    if shown:
                        yield _BODY, body[:shown]
                    dropped += len(body) - shown
                    room -= shown
            pos += len(body)
            if nl >= 0:
                pos += 1
                break
        if wanted:
            if dropped:
                yield _DROP, dropped
            yield _END, None
        line += 1


def _columnar_events(
    fd: int, at: int, head: segments.BatchHeader, block: LargeLinesBlock, keep: int | None
) -> Iterator[_Event]:
    """Events of a columnar batch: stamps and lengths read a few thousand lines at a time."""
    n = head.n_lines
    text_at = at + 12 * n
    step = 4096
    for first in range(0, n, step):
        count = min(step, n - first)
        stamps = array("q")
        stamps.frombytes(os.pread(fd, 8 * count, at + 8 * first))
        lengths = array("I")
        lengths.frombytes(os.pread(fd, 4 * count, at + 8 * n + 4 * first))
        if sys.byteorder != "little":  # pragma: no cover
            stamps.byteswap()
            lengths.byteswap()
        for i in range(count):
            line = first + i
            ts, length = stamps[i], lengths[i]
            if _wanted(block, line, ts):
                yield _START, ts
                shown = length if keep is None else min(length, keep)
                pos, stop = text_at, text_at + shown
                while pos < stop:
                    piece = os.pread(fd, min(PIECE, stop - pos), pos)
                    if not piece:
                        break
                    yield _BODY, piece
                    pos += len(piece)
                if shown < length:
                    yield _DROP, length - shown  # never read: the lengths say how much
                yield _END, None
            text_at += length + 1


def render_large(block: LargeLinesBlock, render: Render) -> Generator[bytes, None, None]:
    """Rendered pieces of a large batch, each from at most about `PIECE` source bytes."""
    yield from _render_events(_large_events(block), render)


async def serve_large(block: LargeLinesBlock, render: Render) -> AsyncIterator[bytes]:
    """A large batch's lines rendered, piece by piece, each piece made in a read-pool thread: nothing of
    the batch is held but the piece being rendered."""
    gen = render_large(block, render)
    try:
        while True:
            piece = await read_pool.run(next, gen, None)
            if piece is None:
                return
            yield piece
    finally:
        await read_pool.run(gen.close)


async def read_large_lines(block: LargeLinesBlock, clip_at: int | None) -> list[LogLine]:
    """A large batch's lines with texts cut to ``clip_at`` bytes (None: whole, for tests and tools, never
    for a server: it holds the whole batch), read in a read-pool thread.

    A columnar batch's lengths let the rest of a line be skipped unread; a raw batch's line has no
    length, so its rest is scanned for the newline in large reads and dropped as it goes.
    """
    return await read_pool.run(large_lines, block, clip_at)


def _block_events(block: LinesBlock) -> Iterator[_Event]:
    for ts, text in zip(block.stamps(), block.payload.texts(block.start), strict=True):
        yield _START, ts
        for at in range(0, len(text), PIECE):
            yield _BODY, text[at:at + PIECE]
        yield _END, None


def render_block(block: LinesBlock, render: Render) -> Iterator[bytes]:
    """A batch's lines rendered in pieces of at most about `PIECE` source bytes each.

    Plain text (and timestamped text of a batch stored as the API sent it) is a slice of the
    stored bytes, never bigger than them; jsonl and timestamps added per line expand, so
    they go line by line, a long line in pieces. A whole batch's rendering is kept on its
    payload, which the readers that read it together share (`read`): a hundred followers of
    one log render each batch once per format, not a hundred times.
    """
    if block.start:
        return _render_block(block, render)
    memo = block.payload.rendered
    pieces = memo.get(render)
    if pieces is None:
        pieces = memo[render] = tuple(_render_block(block, render))
    return iter(pieces)


def _render_block(block: LinesBlock, render: Render) -> Iterator[bytes]:
    if render is Render.TEXT:
        yield block.text_bytes()
    elif render is Render.TIMESTAMPS and isinstance(block.payload, segments.RawLinesPayload):
        yield block.text_bytes(timestamps=True)
    else:
        yield from _render_events(_block_events(block), render)


def _render_events(events: Iterator[_Event], render: Render) -> Generator[bytes, None, None]:
    out: list[bytes] = []
    size = 0
    decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
    fmt = timestamps.format_ns
    for event, value in events:
        if event is _START:
            assert isinstance(value, int)
            if render is Render.TIMESTAMPS:
                out.append(fmt(value).encode() + b" ")
            elif render is Render.JSONL:
                decoder.reset()
                prefix = json.dumps({"type": "line", "ts": fmt(value), "ts_ns": value, "text": ""})
                out.append(prefix[:-2].encode())  # up to the text's opening quote
            size += 64
        elif event is _BODY:
            assert isinstance(value, bytes)
            if render is Render.JSONL:
                out.append(json.dumps(decoder.decode(value))[1:-1].encode())
            else:
                out.append(value)
            size += len(value)
        elif render is Render.JSONL:
            out.append(json.dumps(decoder.decode(b"", final=True))[1:-1].encode() + b'"}\n')
        else:
            out.append(b"\n")
        if size >= PIECE:
            yield b"".join(out)
            out, size = [], 0
    if out:
        yield b"".join(out)
