"""Reading a stored container log back: from the start, from a time, the last N lines, and live.

Reads go batch by batch, not line by line: a reader yields whole decoded
batches (``LinesBlock``), so a server can pass a batch's text to a socket as one
buffer. ``tail`` walks batch trailers backwards from the end of the log and
never reads what it will not serve; ``since`` skips whole segments and batches
by their first and last timestamps. Following waits on the store's in-process
notification (no polling) and stops when the instance's log ends, when a newer
instance of the container replaces it, or when the store closes.

File reads happen in the read pool's threads (`read_pool`), in chunks of whole batches.
"""

from __future__ import annotations

import asyncio
import bisect
import codecs
import enum
import json
import logging
import os
import sys
import zlib
from array import array
from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

from podmortem.files import open_nofollow
from podmortem.logs import timestamps, wakeup
from podmortem.logs.events import GapMarker, GapReason, LogEnd, LogLine
from podmortem.logs.storage import read_pool, segments, store
from podmortem.logs.storage.store import Instance
from podmortem.logs.wakeup import Wakeup

logger = logging.getLogger(__name__)

#: Bytes read from a segment per worker-thread call (whole batches up to this size). 256 KiB:
#: large enough that a thread hop is rare per MB served, small enough that 256 stalled readers
#: hold 64 MiB. A batch bigger than this (a line of megabytes) is never read whole: it is
#: checked and served in pieces (`LargeLinesBlock`).
READ_CHUNK = 256 << 10
#: A following reader waits this long after a wake-up before reading, to gather the batches that
#: came meanwhile (followers see lines at most this much later).
FOLLOW_COALESCE_S = 0.25
#: Source bytes per rendered piece of a large batch: the rendering (timestamps, JSON escapes of
#: up to 6 bytes per byte) of one piece stays under 400 KiB.
PIECE = 64 << 10


@dataclass(frozen=True, slots=True)
class LinesBlock:
    """Lines ``start..n`` of one stored batch; ``index`` is the running index of line ``start``."""

    container: str
    index: int
    start: int
    payload: segments.AnyLinesPayload

    def __len__(self) -> int:
        return len(self.payload) - self.start

    def text_bytes(self, *, timestamps: bool = False) -> bytes:
        """The lines as ``text\\n`` each, or ``<RFC3339> text\\n`` as the API sends them."""
        if timestamps:
            return self.payload.raw_block(self.start)
        return self.payload.text_block(self.start)

    def stamps(self) -> list[int]:
        return list(self.payload.stamps()[self.start:])

    def lines(self) -> list[LogLine]:
        c = self.container
        texts = self.payload.texts(self.start)
        return [LogLine(c, ts, text) for ts, text in zip(self.stamps(), texts, strict=True)]


class Render(enum.Enum):
    """How a large batch is served: as `kubectl logs` prints it, with timestamps, or as jsonl."""

    TEXT = "text"
    TIMESTAMPS = "timestamps"
    JSONL = "jsonl"


@dataclass(frozen=True, slots=True)
class LargeLinesBlock:
    """A stored batch bigger than `READ_CHUNK` (its CRC already checked): served in pieces.

    Nothing of it is held but the piece being rendered, so a reader of a log of 16 MiB lines
    holds what a reader of short lines holds.
    """

    container: str
    #: Running index of the first line served, and that line's position in the batch.
    index: int
    start: int
    path: str
    offset: int
    head: segments.BatchHeader
    since_ns: int | None = None

    def __len__(self) -> int:
        return self.head.n_lines - self.start

    async def pieces(self, render: Render) -> AsyncIterator[bytes]:
        """The lines rendered, piece by piece, each piece made in a worker thread."""
        gen = _render_large(self, render)
        try:
            while True:
                piece = await read_pool.run(next, gen, None)
                if piece is None:
                    return
                yield piece
        finally:
            await read_pool.run(gen.close)

    async def clipped_lines(self, max_text_bytes: int) -> list[LogLine]:
        """The lines with texts cut to ``max_text_bytes``: only that much of each is held.

        A columnar batch's lengths let the rest be skipped unread; a raw batch's line has no
        length, so its rest is scanned for the newline in large reads and dropped as it goes.
        """
        return await read_pool.run(_large_lines, self, max_text_bytes)

    async def lines(self) -> list[LogLine]:
        """Every line whole: for tests and tools, never for a server (it holds the whole batch)."""
        return await read_pool.run(_large_lines, self, None)


@dataclass(frozen=True, slots=True)
class RetentionCut:
    """Earlier lines of this log were deleted by retention."""

    container: str
    removed_lines: int


@dataclass(frozen=True, slots=True)
class Damaged:
    """Bytes of the stored log that are no intact batch: set aside (or met by a reader), not served."""

    container: str
    length: int
    #: ``corrupt``, ``torn`` (a write a crash interrupted) or ``truncated`` (the file got shorter
    #: under the reader).
    why: str = "corrupt"
    #: Lines that the damaged bytes held, where the batches around them tell (0: unknown or none).
    lines: int = 0


LogItem = LinesBlock | LargeLinesBlock | GapMarker | LogEnd | RetentionCut | Damaged


class Idle:
    """A following read is about to wait for new lines (with ``idle_marks``): time to flush."""

    __slots__ = ()


IDLE = Idle()


@dataclass(frozen=True, slots=True)
class _DamageAt:
    offset: int
    length: int
    why: str = "corrupt"


@dataclass(frozen=True, slots=True)
class _LargeAt:
    offset: int
    head: segments.BatchHeader


#: A batch's payload: a lines batch's decoded lines (in `_framed_chunk`), or an event's bytes.
Batches = list[tuple[segments.BatchHeader, bytes | segments.AnyLinesPayload] | _DamageAt | _LargeAt]


class _Window:
    """Bytes of a segment read ahead in one call, falling back to ``pread`` outside them."""

    def __init__(self, fd: int, base: int, data: bytes) -> None:
        self.fd, self.base, self.data = fd, base, data

    def get(self, at: int, n: int) -> bytes:
        lo = at - self.base
        if lo >= 0 and lo + n <= len(self.data):
            return self.data[lo:lo + n]
        return os.pread(self.fd, n, at)


def _verify_streaming(fd: int, framing: segments.Framing, at: int, head: segments.BatchHeader) -> bool:
    """Check a large batch's CRC and trailer reading it in `READ_CHUNK` pieces."""
    stored, crc = framing.crc_of_fields(os.pread(fd, framing.header_size, at))
    pos = at + framing.header_size
    end = pos + head.payload_len
    while pos < end:
        piece = os.pread(fd, min(READ_CHUNK, end - pos), pos)
        if not piece:
            return False
        crc = zlib.crc32(piece, crc)
        pos += len(piece)
    trailer = os.pread(fd, segments.TRAILER_SIZE, end)
    return crc == stored and len(trailer) == segments.TRAILER_SIZE and \
        int.from_bytes(trailer, "little") == head.total_len


def _intact_at(win: _Window, framing: segments.Framing, at: int, end: int) -> segments.BatchHeader | None:
    """The header of the intact batch at ``at`` ending by ``end``, or None."""
    try:
        head = framing.decode_header(win.get(at, framing.header_size))
    except segments.BadBatch:
        return None
    if at + head.total_len > end:
        return None
    if head.total_len <= READ_CHUNK:
        try:
            framing.check_batch(win.get(at, head.total_len), 0)
        except segments.BadBatch:
            return None
        return head
    return head if _verify_streaming(win.fd, framing, at, head) else None


def _next_intact(win: _Window, framing: segments.Framing, start: int, end: int) -> int | None:
    """Offset of the next intact batch in ``[start, end)``, looking only where the sync marker is."""
    sync = framing.sync
    pos = start
    while pos < end:
        window = os.pread(win.fd, min(READ_CHUNK + len(sync) - 1, end - pos), pos)
        if not window:
            return None
        found = window.find(sync)
        while found >= 0:
            if _intact_at(win, framing, pos + found, end) is not None:
                return pos + found
            found = window.find(sync, found + 1)
        pos += max(1, len(window) - len(sync) + 1)
    return None


def _read_chunk(
    path: os.PathLike[str] | str, framing: segments.Framing | None, offset: int, limit: int
) -> tuple[Batches, int]:
    """Intact batches from ``offset`` up to ``limit`` (the committed size): up to about `READ_CHUNK`.

    Always makes progress while ``offset < limit``: damage comes back as one ``_DamageAt`` for
    the bytes up to the next intact batch (found at a sync marker, CRC-checked), and bytes the
    file no longer has (truncated under the reader) as ``truncated`` damage, so a reader goes on
    after it instead of stopping, spinning or serving bad bytes. A batch bigger than a chunk
    comes back as ``_LargeAt``, checked but not read.
    """
    if framing is None:
        return [_DamageAt(offset, limit - offset)], limit
    fd = open_nofollow(path, os.O_RDONLY)
    try:
        end = min(limit, os.fstat(fd).st_size)
        if offset >= end:
            if offset < limit:  # the file got shorter under us: what it lost is told, once
                return [_DamageAt(offset, limit - offset, "truncated")], limit
            return [], offset
        win = _Window(fd, offset, os.pread(fd, min(end - offset, READ_CHUNK), offset))
        out: Batches = []
        taken = 0
        pos = offset
        while pos < end and taken < READ_CHUNK:
            head = _intact_at(win, framing, pos, end)
            if head is None:
                if out:
                    break  # serve the good batches first; the next call starts at the damage
                found = _next_intact(win, framing, pos + 1, end)
                if found is not None:
                    return [_DamageAt(pos, found - pos)], found
                damage: Batches = [_DamageAt(pos, end - pos)]
                if end < limit:
                    damage.append(_DamageAt(end, limit - end, "truncated"))
                return damage, limit
            if head.total_len > READ_CHUNK:
                if out:
                    break
                if head.kind.has_lines:
                    out.append(_LargeAt(pos, head))
                else:  # markers are small JSON the store wrote; one this big is no marker of ours
                    out.append(_DamageAt(pos, head.total_len))
                pos += head.total_len
                break
            payload_at = pos + head.header_size
            out.append((head, win.get(payload_at, head.payload_len)))
            taken += head.total_len
            pos += head.total_len
        if pos >= end and end < limit:
            out.append(_DamageAt(end, limit - end, "truncated"))
            pos = limit
        return out, pos
    finally:
        os.close(fd)


def _large_lines(block: LargeLinesBlock, clip_at: int | None) -> list[LogLine]:
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
            piece = os.pread(fd, min(READ_CHUNK if scanning else PIECE, end - pos), pos)
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


def _render_large(block: LargeLinesBlock, render: Render) -> Generator[bytes, None, None]:
    """Rendered pieces of a large batch, each from at most about `PIECE` source bytes."""
    yield from _render_events(_large_events(block), render)


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


def _data_start(inst: Instance, seq: int) -> int:
    """Where segment ``seq``'s first batch is (0 if its framing cannot be told: all of it is damage)."""
    framing = inst.framing(seq)
    return framing.data_start if framing is not None else 0


def _first_header(inst: Instance, seq: int) -> segments.BatchHeader | None:
    framing = inst.framing(seq)
    if framing is None:
        return None
    try:
        fd = open_nofollow(inst.segment_path(seq), os.O_RDONLY)
    except OSError:
        return None
    try:
        return framing.read_first_header(fd, os.fstat(fd).st_size)
    except segments.BadBatch:
        return None  # damaged: its first time is unknown, so start earlier
    finally:
        os.close(fd)


def _tail_start(inst: Instance, seqs: list[int], tail: int) -> tuple[int, int]:
    """Walk trailers backwards until ``tail`` lines are behind us: the (segment, offset) to read from."""
    need = tail
    pos = (seqs[0], _data_start(inst, seqs[0])) if seqs else (0, 0)
    for seq in reversed(seqs):
        size = inst.committed_size(seq)
        framing = inst.framing(seq)
        if size is None:
            continue
        try:
            fd = open_nofollow(inst.segment_path(seq), os.O_RDONLY)
        except OSError:
            continue
        try:
            if framing is None:
                batches = []
            else:
                try:
                    batches = _line_batches_backwards(fd, framing, size)
                except segments.BadBatch:
                    # damage: trailers cannot be walked past it
                    batches = _line_batches_scanned(fd, framing, min(size, os.fstat(fd).st_size))
            for n_lines, end in batches:
                if need <= 0:
                    return seq, end  # this batch holds only lines before the tail
                need -= n_lines
            pos = (seq, framing.data_start if framing is not None else 0)
        finally:
            os.close(fd)
    return pos


def _line_batches_backwards(fd: int, framing: segments.Framing, size: int) -> list[tuple[int, int]]:
    """(lines, end offset) of a segment's line batches, last first, by walking the trailers."""
    out = []
    end = size
    while end > framing.data_start:
        found = framing.read_last_header(fd, end)
        if found is None:
            break
        head, start = found
        if head.kind.has_lines:
            out.append((head.n_lines, end))
        end = start
    return out


def _line_batches_scanned(fd: int, framing: segments.Framing, size: int) -> list[tuple[int, int]]:
    """`_line_batches_backwards` for a damaged segment: a forward walk that resynchronises."""
    win = _Window(fd, 0, b"")
    out = []
    pos = framing.data_start
    while pos < size:
        head = _intact_at(win, framing, pos, size)
        if head is None:
            found = _next_intact(win, framing, pos + 1, size)
            if found is None:
                break
            pos = found
            continue
        pos += head.total_len
        if head.kind.has_lines:
            out.append((head.n_lines, pos))
    out.reverse()
    return out


def _since_segment(inst: Instance, seqs: list[int], since_ns: int) -> int:
    """The last segment whose first line is not after ``since_ns`` (lines before it are older)."""
    chosen = 0
    for i, seq in enumerate(seqs):
        head = _first_header(inst, seq)
        if head is None or not head.kind.has_lines:
            continue  # starts with a marker: its first line's time is unknown; start earlier
        if head.first_ts > since_ns:
            break
        chosen = i
    return chosen


async def read(
    inst: Instance,
    *,
    since_ns: int | None = None,
    tail: int | None = None,
    follow: bool = False,
    stop: Wakeup | None = None,
    idle_marks: bool = False,
) -> AsyncIterator[LogItem | Idle]:
    """Yield a container instance's stored log in order, optionally waiting for more.

    ``tail``: only the last N lines (as of the call); ``since_ns``: only lines at or after
    this time. Gap markers within the range come in place; the end marker comes last.
    ``stop``: when set, a follow ends at the next wait (the server is shutting down).
    ``idle_marks``: yield `IDLE` before each wait, so a server can send what it gathered.
    """
    if tail is not None and tail < 0:
        raise ValueError("tail must be >= 0")
    container = inst.container
    seqs = inst.segment_seqs()
    if inst.active_seq is not None and inst.active_seq not in seqs:
        seqs.append(inst.active_seq)  # (cannot happen on a healthy disk; be robust)
    start_index = 0
    if tail is not None:
        start_index = max(0, inst.index - tail)
        seq, offset = await read_pool.run(_tail_start, inst, seqs, tail)
    elif since_ns is not None and seqs:
        chosen = await read_pool.run(_since_segment, inst, seqs, since_ns)
        seq = seqs[chosen]
        offset = await read_pool.run(_data_start, inst, seq)
    else:
        seq = seqs[0] if seqs else 0
        offset = await read_pool.run(_data_start, inst, seq) if seqs else 0
    # Under ``since``, skipping earlier segments is intended, not a retention cut.
    first = since_ns is None
    # The running index after the last intact batch served (None before the first).
    seen: int | None = None
    # Damage met but not yet told: held until the next intact batch says how many lines it hid.
    pending: Damaged | None = None
    while True:
        # One chunk read, rendered and sent is a reader's step: a few per turn of the loop
        # (`wakeup.Turns`), however many readers were woken at once.
        await wakeup.take_turn()
        changed = inst.changed
        size = inst.committed_size(seq)
        if size is not None and offset < size:
            path = inst.segment_path(seq)
            try:
                batches, offset = await _shared_chunk(inst, seq, path, offset, size)
            except FileNotFoundError:
                batches, offset = [], size  # deleted by retention under us: go on with the next
            except OSError as exc:  # a link planted in the store (ELOOP), a bad disk: not served
                batches, offset = [_DamageAt(offset, size - offset, "unreadable")], size
                logger.warning("log store: cannot read %s: %s", path, exc)
            for batch in batches:
                if isinstance(batch, _DamageAt):
                    if batch.why == "corrupt":
                        inst.on_damage(path, batch.offset, batch.length)
                    # One marker for adjacent pieces; a file that got shorter explains the whole of it.
                    why = batch.why if pending is None or batch.why == "truncated" else pending.why
                    pending = Damaged(container, (pending.length if pending else 0) + batch.length, why)
                    continue
                head = batch[0] if isinstance(batch, tuple) else batch.head
                if seen is not None and head.index_before < seen:
                    # Lines this log already had (a segment copied over another): never served twice.
                    pending = Damaged(container, (pending.length if pending else 0) + head.total_len,
                                      pending.why if pending else "out-of-order")
                    continue
                if pending is not None:
                    behind = seen if seen is not None else start_index
                    yield Damaged(container, pending.length, pending.why, max(0, head.index_before - behind))
                    pending = None
                    first = False  # lines before the damage were lost to it, not to retention
                if first:
                    first = False
                    if head.index_before > start_index:
                        yield RetentionCut(container, head.index_before - start_index)
                seen = head.index_after
                if isinstance(batch, _LargeAt):
                    large = _large_item(container, str(path), batch, start_index=start_index,
                                        since_ns=since_ns)
                    if large is not None:
                        yield large
                    continue
                item = _item(container, head, batch[1], start_index=start_index, since_ns=since_ns)
                if item is not None:
                    yield item
            continue
        # The writer's own segment is the newest: no directory listing per wake-up while on it.
        on_active = inst.active_seq == seq and not inst.finished
        later = [] if on_active else [s for s in inst.segment_seqs() if s > seq]
        if later:
            seq = later[0]
            offset = await read_pool.run(_data_start, inst, seq)
            continue
        if pending is not None:
            yield pending
            pending = None
        if inst.ended is not None:
            if first and inst.index > start_index:
                yield RetentionCut(container, inst.index - start_index)
            if inst.active_seq is None or inst.committed_size(inst.active_seq) is None:
                yield inst.ended  # its segments are gone, but the end is known
            return
        if not follow or inst.superseded or (stop is not None and stop.is_set()):
            return
        if idle_marks:
            yield IDLE
        if stop is None:
            await changed.wait()
        else:
            await changed.wait(stop)
        # A busy log wakes its followers at every batch: gather a few batches per read, so that a
        # hundred followers cost the loop tens of wake-ups a second each, not thousands.
        if stop is None or not stop.is_set():
            await asyncio.sleep(FOLLOW_COALESCE_S)


#: Chunk reads in flight, by (loop, path, offset, limit), with the readers waiting for each:
#: readers woken by the same batch ask for the same bytes at once, and one read, check and decode
#: serves them all.
_IN_FLIGHT: dict[tuple[object, str, int, int], list[asyncio.Future[tuple[Batches, int] | None]]] = {}


async def _shared_chunk(inst: Instance, seq: int, path: Path, offset: int, limit: int) -> tuple[Batches, int]:
    """`_framed_chunk` in the read pool, shared with the readers that ask for the same bytes meanwhile.

    Only reads in flight are shared, never a finished one, so a reader never gets bytes older
    than its own request. The first asker's task does the read (and is charged for it); if it
    is cancelled, the others read for themselves.
    """
    loop = asyncio.get_running_loop()
    key = (loop, str(path), offset, limit)
    while (waiting := _IN_FLIGHT.get(key)) is not None:
        mine: asyncio.Future[tuple[Batches, int] | None] = loop.create_future()
        waiting.append(mine)
        result = await mine
        if result is not None:
            return result
    waiting = _IN_FLIGHT[key] = []
    try:
        result = await read_pool.run(_framed_chunk, inst, seq, path, offset, limit)
    except asyncio.CancelledError:
        del _IN_FLIGHT[key]
        _settle_all(waiting, None)  # the others read for themselves
        raise
    except BaseException as exc:
        del _IN_FLIGHT[key]
        _settle_all(waiting, exc)
        raise
    del _IN_FLIGHT[key]
    _settle_all(waiting, result)
    return result


def _settle_all(waiting: list[asyncio.Future[tuple[Batches, int] | None]],
                outcome: tuple[Batches, int] | BaseException | None) -> None:
    for w in waiting:
        if w.done():
            continue  # its reader went away
        if isinstance(outcome, BaseException):
            w.set_exception(outcome)
        else:
            w.set_result(outcome)


def _framed_chunk(inst: Instance, seq: int, path: Path, offset: int, limit: int) -> tuple[Batches, int]:
    """`_read_chunk` with the segment's framing, lines decoded, in one worker-thread hop."""
    batches, end = _read_chunk(path, inst.framing(seq), offset, limit)
    return [_decoded(b) for b in batches], end


def _decoded(batch: _DamageAt | _LargeAt | tuple[segments.BatchHeader, bytes | segments.AnyLinesPayload]
             ) -> _DamageAt | _LargeAt | tuple[segments.BatchHeader, bytes | segments.AnyLinesPayload]:
    if isinstance(batch, tuple) and batch[0].kind.has_lines and isinstance(batch[1], bytes):
        return batch[0], segments.decode_lines(batch[0], batch[1])
    return batch


def _large_item(container: str, path: str, at: _LargeAt, *, start_index: int,
                since_ns: int | None) -> LargeLinesBlock | None:
    head = at.head
    if head.index_after <= start_index:
        return None
    if since_ns is not None and head.last_ts < since_ns:
        return None
    start = max(0, start_index - head.index_before)
    return LargeLinesBlock(container, head.index_before + start, start, path, at.offset, head,
                           since_ns if since_ns is not None and head.first_ts < since_ns else None)


def _item(
    container: str,
    head: segments.BatchHeader,
    payload: bytes | segments.AnyLinesPayload,
    *,
    start_index: int,
    since_ns: int | None,
) -> LogItem | None:
    if head.kind.has_lines:
        if head.index_after <= start_index:
            return None
        if since_ns is not None and head.last_ts < since_ns:
            return None
        lines = segments.decode_lines(head, payload) if isinstance(payload, bytes) else payload
        start = max(0, start_index - head.index_before)
        if since_ns is not None and head.first_ts < since_ns:
            start = max(start, bisect.bisect_left(lines.stamps(), since_ns))
        return LinesBlock(container, head.index_before + start, start, lines)
    if head.index_after < start_index:
        return None
    if not isinstance(payload, bytes):
        return None  # (a lines payload is decoded only for a lines batch)
    data = segments.decode_event(payload)
    if head.kind is segments.BatchKind.DAMAGE:
        return Damaged(container, int(data.get("bytes", 0)), str(data.get("why", "corrupt")))
    if head.kind is segments.BatchKind.GAP:
        if since_ns is not None and head.last_ts != segments.NO_TS and head.last_ts < since_ns:
            return None
        try:
            reason = GapReason(str(data.get("reason")))
        except ValueError:
            reason = GapReason.ROTATION
        return GapMarker(
            container, reason, data.get("after_ts_ns"), data.get("before_ts_ns"), str(data.get("detail", ""))
        )
    return store.end_from_event(container, data)


async def read_lines(
    inst: Instance, *, since_ns: int | None = None, tail: int | None = None
) -> list[LogLine | GapMarker | LogEnd]:
    """Everything stored, one item per line, without following (for tests and small logs)."""
    out: list[LogLine | GapMarker | LogEnd] = []
    async for item in read(inst, since_ns=since_ns, tail=tail):
        if isinstance(item, LinesBlock):
            out.extend(item.lines())
        elif isinstance(item, LargeLinesBlock):
            out.extend(await item.lines())
        elif isinstance(item, RetentionCut | Damaged | Idle):
            continue
        else:
            out.append(item)
    return out
