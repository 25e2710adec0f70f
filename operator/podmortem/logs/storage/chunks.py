"""A stored segment read as intact batches, a chunk at a time, resynchronising past damage.

A reader never trusts bytes it cannot check: each batch's CRC and trailer are verified, damage is
skipped to the next intact batch found at the instance's secret sync marker (which log content
cannot forge), and a file that got shorter under the reader is told as truncated, never served.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass

from podmortem.files import open_nofollow
from podmortem.logs.storage import segments

#: Bytes read from a segment per worker-thread call (whole batches up to this size). 256 KiB:
#: large enough that a thread hop is rare per MB served, small enough that 256 stalled readers
#: hold 64 MiB. A batch bigger than this (a line of megabytes) is never read whole: it is
#: checked and served in pieces (`LargeLinesBlock`).
READ_CHUNK = 256 << 10


@dataclass(frozen=True, slots=True)
class DamageAt:
    offset: int
    length: int
    why: str = "corrupt"


@dataclass(frozen=True, slots=True)
class LargeAt:
    offset: int
    head: segments.BatchHeader


#: A batch's payload: a lines batch's decoded lines (in ``reading``), or an event's bytes.
Batches = list[tuple[segments.BatchHeader, bytes | segments.AnyLinesPayload] | DamageAt | LargeAt]


class Window:
    """Bytes of a segment read ahead in one call, falling back to ``pread`` outside them."""

    def __init__(self, fd: int, base: int, data: bytes) -> None:
        self.fd, self.base, self.data = fd, base, data

    def get(self, at: int, n: int) -> bytes:
        lo = at - self.base
        if lo >= 0 and lo + n <= len(self.data):
            return self.data[lo:lo + n]
        return os.pread(self.fd, n, at)


def verify_streaming(fd: int, framing: segments.Framing, at: int, head: segments.BatchHeader) -> bool:
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


def intact_at(win: Window, framing: segments.Framing, at: int, end: int) -> segments.BatchHeader | None:
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
    return head if verify_streaming(win.fd, framing, at, head) else None


def next_intact(win: Window, framing: segments.Framing, start: int, end: int) -> int | None:
    """Offset of the next intact batch in ``[start, end)``, looking only where the sync marker is."""
    sync = framing.sync
    pos = start
    while pos < end:
        window = os.pread(win.fd, min(READ_CHUNK + len(sync) - 1, end - pos), pos)
        if not window:
            return None
        found = window.find(sync)
        while found >= 0:
            if intact_at(win, framing, pos + found, end) is not None:
                return pos + found
            found = window.find(sync, found + 1)
        pos += max(1, len(window) - len(sync) + 1)
    return None


def read_chunk(
    path: os.PathLike[str] | str, framing: segments.Framing | None, offset: int, limit: int
) -> tuple[Batches, int]:
    """Intact batches from ``offset`` up to ``limit`` (the committed size): up to about `READ_CHUNK`.

    Always makes progress while ``offset < limit``: damage comes back as one ``DamageAt`` for
    the bytes up to the next intact batch (found at a sync marker, CRC-checked), and bytes the
    file no longer has (truncated under the reader) as ``truncated`` damage, so a reader goes on
    after it instead of stopping, spinning or serving bad bytes. A batch bigger than a chunk
    comes back as ``LargeAt``, checked but not read.
    """
    if framing is None:
        return [DamageAt(offset, limit - offset)], limit
    fd = open_nofollow(path, os.O_RDONLY)
    try:
        end = min(limit, os.fstat(fd).st_size)
        if offset >= end:
            if offset < limit:  # the file got shorter under us: what it lost is told, once
                return [DamageAt(offset, limit - offset, "truncated")], limit
            return [], offset
        win = Window(fd, offset, os.pread(fd, min(end - offset, READ_CHUNK), offset))
        out: Batches = []
        taken = 0
        pos = offset
        while pos < end and taken < READ_CHUNK:
            head = intact_at(win, framing, pos, end)
            if head is None:
                if out:
                    break  # serve the good batches first; the next call starts at the damage
                found = next_intact(win, framing, pos + 1, end)
                if found is not None:
                    return [DamageAt(pos, found - pos)], found
                damage: Batches = [DamageAt(pos, end - pos)]
                if end < limit:
                    damage.append(DamageAt(end, limit - end, "truncated"))
                return damage, limit
            if head.total_len > READ_CHUNK:
                if out:
                    break
                if head.kind.has_lines:
                    out.append(LargeAt(pos, head))
                else:  # markers are small JSON the store wrote; one this big is no marker of ours
                    out.append(DamageAt(pos, head.total_len))
                pos += head.total_len
                break
            payload_at = pos + head.header_size
            out.append((head, win.get(payload_at, head.payload_len)))
            taken += head.total_len
            pos += head.total_len
        if pos >= end and end < limit:
            out.append(DamageAt(end, limit - end, "truncated"))
            pos = limit
        return out, pos
    finally:
        os.close(fd)
