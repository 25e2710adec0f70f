"""Reading a stored container log back: from the start, from a time, the last N lines, and live.

Reads go batch by batch, not line by line: a reader yields whole decoded
batches (``LinesBlock``), so a server can pass a batch's text to a socket as one
buffer. ``tail`` walks batch trailers backwards from the end of the log and
never reads what it will not serve; ``since`` skips whole segments and batches
by their first and last timestamps. Following waits on the store's in-process
notification (no polling) and stops when the instance's log ends, when a newer
instance of the container replaces it, or when the store closes.

File reads happen in a worker thread, in chunks of whole batches.
"""

from __future__ import annotations

import asyncio
import bisect
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass

from podmortem.logs import segments, store
from podmortem.logs.events import GapMarker, GapReason, LogEnd, LogLine
from podmortem.logs.store import Instance

#: Bytes read from a segment per worker-thread call (at least one whole batch). 256 KiB: large
#: enough that a thread hop is rare per MB served, small enough that 256 stalled readers hold 64 MiB.
READ_CHUNK = 256 << 10


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
    #: ``corrupt`` or ``torn`` (a write a crash interrupted).
    why: str = "corrupt"


LogItem = LinesBlock | GapMarker | LogEnd | RetentionCut | Damaged


@dataclass(frozen=True, slots=True)
class _DamageAt:
    offset: int
    length: int


Batches = list[tuple[segments.BatchHeader, bytes] | _DamageAt]


def _read_chunk(path: os.PathLike[str] | str, offset: int, limit: int) -> tuple[Batches, int]:
    """Whole, CRC-checked batches from ``offset`` up to ``limit`` (at least one, up to about ``READ_CHUNK``).

    Damage comes back as one ``_DamageAt`` for the bytes up to the next intact batch (found by
    its magic and CRC), so a reader goes on after it instead of stopping or serving bad bytes.
    """
    out: Batches = []
    with open(path, "rb", buffering=0) as f:
        f.seek(offset)
        data = f.read(min(limit - offset, READ_CHUNK))
        pos = 0
        while offset + pos < limit:
            if pos + segments.HEADER_SIZE > len(data):
                if out:
                    break
                if offset + pos + segments.HEADER_SIZE > limit:
                    return [_DamageAt(offset + pos, limit - offset - pos)], limit
                data += f.read(segments.HEADER_SIZE - (len(data) - pos))
            try:
                head = segments.decode_header(data[pos:pos + segments.HEADER_SIZE])
                end = pos + head.total_len
                if offset + end > limit:
                    raise segments.BadBatch("a batch runs past the committed end")
                if end > len(data):
                    if out:
                        break
                    data += f.read(end - len(data))  # a batch bigger than a chunk: read it whole
                    if end > len(data):
                        raise segments.BadBatch("torn batch below the committed size")
                with memoryview(data) as view:
                    segments.check_batch(view, pos)
            except segments.BadBatch:
                if out:
                    break  # serve the good batches first; the next call starts at the damage
                rest = data[pos:] + f.read(max(0, limit - offset - len(data)))
                found = segments.next_batch(rest, 1)
                length = len(rest) if found is None else found
                return [_DamageAt(offset + pos, length)], offset + pos + length
            payload_at = pos + segments.HEADER_SIZE
            out.append((head, data[payload_at:payload_at + head.payload_len]))
            pos = end
    return out, offset + pos


def _first_header(path: os.PathLike[str] | str) -> segments.BatchHeader | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return segments.read_first_header(fd, os.fstat(fd).st_size)
    except segments.BadBatch:
        return None  # damaged: its first time is unknown, so start earlier
    finally:
        os.close(fd)


def _tail_start(inst: Instance, seqs: list[int], tail: int) -> tuple[int, int]:
    """Walk trailers backwards until ``tail`` lines are behind us: the (segment, offset) to read from."""
    need = tail
    pos = (seqs[0], len(segments.FILE_MAGIC)) if seqs else (0, 0)
    for seq in reversed(seqs):
        size = inst.committed_size(seq)
        if size is None:
            continue
        try:
            fd = os.open(inst.segment_path(seq), os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            try:
                batches = _line_batches_backwards(fd, size)
            except segments.BadBatch:
                batches = _line_batches_scanned(fd, size)  # damage: trailers cannot be walked past it
            for n_lines, end in batches:
                if need <= 0:
                    return seq, end  # this batch holds only lines before the tail
                need -= n_lines
            pos = (seq, len(segments.FILE_MAGIC))
        finally:
            os.close(fd)
    return pos


def _line_batches_backwards(fd: int, size: int) -> list[tuple[int, int]]:
    """(lines, end offset) of a segment's line batches, last first, by walking the trailers."""
    out = []
    end = size
    while end > len(segments.FILE_MAGIC):
        found = segments.read_last_header(fd, end)
        if found is None:
            break
        head, start = found
        if head.kind.has_lines:
            out.append((head.n_lines, end))
        end = start
    return out


def _line_batches_scanned(fd: int, size: int) -> list[tuple[int, int]]:
    """`_line_batches_backwards` for a damaged segment: a forward scan that resynchronises."""
    data = os.pread(fd, size, 0)
    out = []
    pos = len(segments.FILE_MAGIC)
    with memoryview(data) as view:
        while pos < len(data):
            try:
                head = segments.check_batch(view, pos)
            except segments.BadBatch:
                found = segments.next_batch(data, pos + 1)
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
        head = _first_header(inst.segment_path(seq))
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
    stop: asyncio.Event | None = None,
) -> AsyncIterator[LogItem]:
    """Yield a container instance's stored log in order, optionally waiting for more.

    ``tail``: only the last N lines (as of the call); ``since_ns``: only lines at or after
    this time. Gap markers within the range come in place; the end marker comes last.
    ``stop``: when set, a follow ends at the next wait (the server is shutting down).
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
        seq, offset = await asyncio.to_thread(_tail_start, inst, seqs, tail)
    elif since_ns is not None and seqs:
        chosen = await asyncio.to_thread(_since_segment, inst, seqs, since_ns)
        seq, offset = seqs[chosen], len(segments.FILE_MAGIC)
    else:
        seq, offset = (seqs[0] if seqs else 0), len(segments.FILE_MAGIC)
    # Under ``since``, skipping earlier segments is intended, not a retention cut.
    first = since_ns is None
    while True:
        changed = inst.changed
        size = inst.committed_size(seq)
        if size is not None and offset < size:
            try:
                batches, offset = await asyncio.to_thread(_read_chunk, inst.segment_path(seq), offset, size)
            except FileNotFoundError:
                batches = []
                offset = size
            for batch in batches:
                if isinstance(batch, _DamageAt):
                    inst.on_damage(inst.segment_path(seq), batch.offset, batch.length)
                    yield Damaged(container, batch.length)
                    continue
                head, payload = batch
                if first:
                    first = False
                    if head.index_before > start_index:
                        yield RetentionCut(container, head.index_before - start_index)
                item = _item(container, head, payload, start_index=start_index, since_ns=since_ns)
                if item is not None:
                    yield item
            continue
        later = [s for s in inst.segment_seqs() if s > seq]
        if later:
            seq, offset = later[0], len(segments.FILE_MAGIC)
            continue
        if inst.ended is not None:
            if first and inst.index > start_index:
                yield RetentionCut(container, inst.index - start_index)
            if inst.active_seq is None or inst.committed_size(inst.active_seq) is None:
                yield inst.ended  # its segments are gone, but the end is known
            return
        if not follow or inst.superseded or (stop is not None and stop.is_set()):
            return
        if stop is None:
            await changed.wait()
        else:
            await _either(changed, stop)


async def _either(first: asyncio.Event, second: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(first.wait()), asyncio.ensure_future(second.wait())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


def _item(
    container: str,
    head: segments.BatchHeader,
    payload: bytes,
    *,
    start_index: int,
    since_ns: int | None,
) -> LogItem | None:
    if head.kind.has_lines:
        if head.index_after <= start_index:
            return None
        if since_ns is not None and head.last_ts < since_ns:
            return None
        lines = segments.decode_lines(head, payload)
        start = max(0, start_index - head.index_before)
        if since_ns is not None and head.first_ts < since_ns:
            start = max(start, bisect.bisect_left(lines.stamps(), since_ns))
        return LinesBlock(container, head.index_before + start, start, lines)
    if head.index_after < start_index:
        return None
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
        elif isinstance(item, RetentionCut | Damaged):
            continue
        else:
            out.append(item)
    return out
