"""The on-disk record format of the log store: self-validating batches in segment files.

Why batches, not lines: the follower hands over lines in batches, and the
store must keep up with about a million lines a second. A batch is encoded with
three C-speed operations (a timestamp array, a length array and one join), and
written with one ``write()``; nothing is done per line in Python beyond reading
two attributes.

Why the data is the truth: each batch carries, in its header, the cursor the
follower handed over with it, and a CRC over header and payload. There is no
separate cursor file to keep in step with the data. After a crash, the last
segment is scanned batch by batch (a jump per batch, a CRC per batch) and cut at
the first torn or corrupt batch; the cursor is then the one in the last intact
batch header. Data and cursor can therefore never disagree.

Layout of a segment file::

    b"PMLOGSG1"                                  file magic, 8 bytes
    batch*                                       zero or more batches

    batch := HEADER(68 bytes) payload TRAILER(u32 total batch length)

Payload of a raw lines batch: the API's own ``<RFC3339> <text>\n`` lines, as
the follower received them (no per-line work at all to store or to serve with
timestamps). Payload of a columnar lines batch (``n`` lines)::

    int64[n] timestamps (ns) | uint32[n] text lengths | text0 \\n text1 \\n ... textN-1 \\n

The newline after each text is redundant for framing (the lengths frame them
exactly, so a text may hold any byte), but makes a whole batch servable as plain
text with no per-line work. Gap and end batches carry a small JSON payload. The
trailer repeats the batch length so that ``tail`` can walk backwards from the
end of a file without reading it all. All integers are little-endian.
"""

from __future__ import annotations

import enum
import json
import os
import struct
import sys
import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from podmortem.errors import PodmortemError
from podmortem.logs import timestamps
from podmortem.logs.events import LogLine

FILE_MAGIC = b"PMLOGSG1"
BATCH_MAGIC = b"PMB\x01"

#: magic, kind, n_lines, payload_len, first_ts, last_ts, index_after,
#: cursor.last_ts_ns, cursor.count_at_last, cursor.delivered
#: magic, kind, flags, n_lines, payload_len, first_ts, last_ts, index_after,
#: cursor last_ts, cursor count, cursor last-line CRC (valid if flags has _HAS_LINE_CRC), cursor delivered.
_HEAD = struct.Struct("<4sBB2xIIqqQqIIQ")
#: Header flag: the cursor's last-line checksum is present (segments written before it have 0 there).
_HAS_LINE_CRC = 1
_CRC = struct.Struct("<I")
_TRAILER = struct.Struct("<I")
HEADER_SIZE = _HEAD.size + _CRC.size
TRAILER_SIZE = _TRAILER.size
#: Timestamps stand for "none" as this value (real ones are positive).
NO_TS = -1

_LITTLE = sys.byteorder == "little"


class BatchKind(enum.IntEnum):
    #: Columnar lines: timestamps, lengths, texts (from any ``Sequence[LogLine]``).
    LINES = 1
    GAP = 2
    END = 3
    #: Lines exactly as the API sent them with ``timestamps=true``: ``<RFC3339> <text>\n`` each.
    #: The follower's ``LineBatch`` already holds this block, so storing it costs no per-line work.
    RAW_LINES = 4
    #: Damaged bytes were found here and set aside (JSON: bytes, why, quarantine file).
    DAMAGE = 5

    @property
    def has_lines(self) -> bool:
        return self is BatchKind.LINES or self is BatchKind.RAW_LINES


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """What a batch header says; enough to seek, count and resume without reading the payload."""

    kind: BatchKind
    n_lines: int
    payload_len: int
    #: Timestamp of the first/last line (lines), or after/before of a gap; ``NO_TS`` if none.
    first_ts: int
    last_ts: int
    #: Lines of this container instance stored before the end of this batch (a running index).
    index_after: int
    #: The follower's cursor as handed over with this batch.
    cursor_last_ts: int
    cursor_count: int
    cursor_delivered: int
    #: CRC-32 of the cursor's last delivered line, if the follower knew it (None: unknown).
    cursor_line_crc: int | None = None

    @property
    def total_len(self) -> int:
        return HEADER_SIZE + self.payload_len + TRAILER_SIZE

    @property
    def index_before(self) -> int:
        return self.index_after - self.n_lines


@dataclass(frozen=True, slots=True)
class CursorFields:
    """The cursor fields a batch header carries (the container ID lives in the instance's meta)."""

    last_ts: int
    count: int
    delivered: int
    #: ``LogCursor.last_line_crc``: lets a resumed follower recognise its last line after a rotation.
    line_crc: int | None = None


def _to_le(arr: array[int]) -> bytes:
    if not _LITTLE:  # pragma: no cover  # big-endian hosts
        arr = array(arr.typecode, arr)
        arr.byteswap()
    return arr.tobytes()


def _from_le(typecode: str, data: bytes | memoryview) -> array[int]:
    arr = array(typecode)
    arr.frombytes(data)
    if not _LITTLE:  # pragma: no cover
        arr.byteswap()
    return arr


def _frame(
    kind: BatchKind,
    payload: bytes,
    *,
    n_lines: int,
    first_ts: int,
    last_ts: int,
    index_after: int,
    cursor: CursorFields,
) -> bytes:
    flags = 0 if cursor.line_crc is None else _HAS_LINE_CRC
    head = _HEAD.pack(
        BATCH_MAGIC, kind, flags, n_lines, len(payload), first_ts, last_ts, index_after,
        cursor.last_ts, cursor.count, cursor.line_crc or 0, cursor.delivered,
    )
    crc = zlib.crc32(payload, zlib.crc32(head))
    total = HEADER_SIZE + len(payload) + TRAILER_SIZE
    return b"".join((head, _CRC.pack(crc), payload, _TRAILER.pack(total)))


def encode_lines(
    lines: Sequence[LogLine], *, index_before: int, cursor: CursorFields
) -> bytes:
    """Encode a non-empty batch of lines; the per-line work is attribute reads in comprehensions."""
    texts = [line.text for line in lines]
    stamps = array("q", [line.ts_ns for line in lines])
    lengths = array("I", map(len, texts))
    texts.append(b"")
    payload = b"".join((_to_le(stamps), _to_le(lengths), b"\n".join(texts)))
    return _frame(
        BatchKind.LINES, payload,
        n_lines=len(lines), first_ts=stamps[0], last_ts=stamps[-1],
        index_after=index_before + len(lines), cursor=cursor,
    )


def encode_raw(
    raw: bytes, *, n_lines: int, first_ts: int, last_ts: int, index_before: int, cursor: CursorFields
) -> bytes:
    """Encode a block of complete ``<RFC3339> <text>\n`` lines as the API sent them."""
    return _frame(
        BatchKind.RAW_LINES, raw,
        n_lines=n_lines, first_ts=first_ts, last_ts=last_ts,
        index_after=index_before + n_lines, cursor=cursor,
    )


def encode_event(
    kind: BatchKind,
    data: dict[str, Any],
    *,
    first_ts: int,
    last_ts: int,
    index: int,
    cursor: CursorFields,
) -> bytes:
    """Encode a gap or end marker: no lines, a JSON payload."""
    payload = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
    return _frame(kind, payload, n_lines=0, first_ts=first_ts, last_ts=last_ts,
                  index_after=index, cursor=cursor)


class BadBatch(PodmortemError, ValueError):
    """Bytes that are not an intact batch: a torn tail or corruption."""


def decode_header(data: bytes | memoryview) -> BatchHeader:
    if len(data) < HEADER_SIZE:
        raise BadBatch("short header")
    fields = _HEAD.unpack_from(data)
    if fields[0] != BATCH_MAGIC:
        raise BadBatch("bad batch magic")
    try:
        kind = BatchKind(fields[1])
    except ValueError as exc:
        raise BadBatch(f"unknown batch kind {fields[1]}") from exc
    (_, _, flags, n_lines, payload_len, first_ts, last_ts, index_after,
     cursor_last_ts, cursor_count, line_crc, cursor_delivered) = fields
    return BatchHeader(kind, n_lines, payload_len, first_ts, last_ts, index_after, cursor_last_ts,
                       cursor_count, cursor_delivered, line_crc if flags & _HAS_LINE_CRC else None)


def check_batch(data: bytes | memoryview, offset: int) -> BatchHeader:
    """Validate the whole batch at ``offset`` (lengths, trailer, CRC) and return its header."""
    head = decode_header(data[offset:offset + HEADER_SIZE])
    end = offset + head.total_len
    if end > len(data):
        raise BadBatch("torn batch")
    (crc,) = _CRC.unpack_from(data, offset + _HEAD.size)
    payload_at = offset + HEADER_SIZE
    head_crc = zlib.crc32(data[offset:offset + _HEAD.size])
    expected = zlib.crc32(data[payload_at:payload_at + head.payload_len], head_crc)
    if crc != expected:
        raise BadBatch("CRC mismatch")
    (trailer,) = _TRAILER.unpack_from(data, end - TRAILER_SIZE)
    if trailer != head.total_len:
        raise BadBatch("trailer mismatch")
    return head


class LinesPayload:
    """A decoded columnar lines batch. ``text_blob`` is ``text\\n`` for every line, in order."""

    def __init__(self, stamps: array[int], lengths: array[int], text_blob: bytes) -> None:
        self._stamps = stamps
        self.lengths = lengths
        self.text_blob = text_blob

    def __len__(self) -> int:
        return len(self._stamps)

    def stamps(self) -> Sequence[int]:
        return self._stamps

    def _offset_of(self, i: int) -> int:
        return sum(self.lengths[:i]) + i

    def texts(self, start: int = 0) -> list[bytes]:
        """The texts from line ``start`` on (exact, even for texts that hold a newline)."""
        out = []
        pos = self._offset_of(start)
        blob = self.text_blob
        for length in self.lengths[start:]:
            out.append(blob[pos:pos + length])
            pos += length + 1
        return out

    def text_block(self, start: int = 0) -> bytes:
        """Lines ``start..`` as ``text\\n`` each: the stored blob, sliced once."""
        return self.text_blob if start == 0 else self.text_blob[self._offset_of(start):]

    def raw_block(self, start: int = 0) -> bytes:
        """Lines ``start..`` as ``<RFC3339> text\\n``, as the API sends them with timestamps."""
        fmt = timestamps.format_ns
        return b"".join(
            fmt(ts).encode() + b" " + text + b"\n"
            for ts, text in zip(self._stamps[start:], self.texts(start), strict=True)
        )


class RawLinesPayload:
    """A decoded raw lines batch: the API's ``<RFC3339> <text>\\n`` lines, parsed only on demand."""

    def __init__(self, raw: bytes, n_lines: int) -> None:
        self.raw = raw
        self._n = n_lines
        self._lines: list[bytes] | None = None
        self._stamps: list[int] | None = None

    def __len__(self) -> int:
        return self._n

    def _split(self) -> list[bytes]:
        if self._lines is None:
            self._lines = self.raw[:-1].split(b"\n")
        return self._lines

    def stamps(self) -> Sequence[int]:
        if self._stamps is None:
            parse = timestamps.parse_ns
            self._stamps = [parse(line.partition(b" ")[0]) for line in self._split()]
        return self._stamps

    def texts(self, start: int = 0) -> list[bytes]:
        return [line.partition(b" ")[2] for line in self._split()[start:]]

    def raw_block(self, start: int = 0) -> bytes:
        if start == 0:
            return self.raw
        return b"\n".join(self._split()[start:]) + b"\n"

    def text_block(self, start: int = 0) -> bytes:
        return b"\n".join(self.texts(start)) + b"\n" if start < self._n else b""


AnyLinesPayload = LinesPayload | RawLinesPayload


def decode_lines(head: BatchHeader, payload: bytes) -> AnyLinesPayload:
    n = head.n_lines
    if head.kind is BatchKind.RAW_LINES:
        return RawLinesPayload(payload, n)
    stamps = _from_le("q", payload[:8 * n])
    lengths = _from_le("I", payload[8 * n:12 * n])
    return LinesPayload(stamps, lengths, payload[12 * n:])


def decode_event(payload: bytes) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(payload)
    return data


def next_batch(data: bytes, start: int) -> int | None:
    """Offset of the first intact batch at or after ``start`` (magic, lengths and CRC check), if any.

    Resynchronising after damage: a batch magic inside damaged bytes or inside a payload is
    rejected by its CRC, so the first offset that passes is a real batch boundary.
    """
    view = memoryview(data)
    try:
        pos = data.find(BATCH_MAGIC, start)
        while pos >= 0:
            try:
                check_batch(view, pos)
                return pos
            except BadBatch:
                pos = data.find(BATCH_MAGIC, pos + 1)
        return None
    finally:
        view.release()


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes of a segment that are no intact batch."""

    offset: int
    length: int
    #: ``torn``: the file ends inside a batch that was being written (a crash);
    #: ``corrupt``: anything else (flipped bits, a bad disk, an overwrite).
    why: str


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What a whole segment holds: its intact batches and its damaged bytes."""

    #: End of the last intact batch (the file magic's end if there is none; 0 without a magic).
    valid_len: int
    #: The last intact batch, or None if there is none.
    last: BatchHeader | None
    #: The first intact batch, or None if there is none.
    first: BatchHeader | None
    #: Damaged byte ranges, in file order; one that ends at the file's end is the tail.
    damage: tuple[Damage, ...] = ()
    #: The last intact batch that is not a damage marker, and its offset (an end marker there
    #: still ends the log when a damage marker was appended after it).
    last_content: BatchHeader | None = None
    last_content_at: int = 0

    @property
    def tail(self) -> Damage | None:
        """Damage that runs to the end of the file (what a writer must cut before appending)."""
        if self.damage and self.damage[-1].offset >= self.valid_len:
            return self.damage[-1]
        return None

    @property
    def problem(self) -> str | None:
        return None if not self.damage else f"{sum(d.length for d in self.damage)} bytes {self.damage[0].why}"


def _tail_why(data: bytes, offset: int) -> str:
    """A tail is torn when it is the start of one batch the file ends inside (or zeros after a crash)."""
    rest = data[offset:]
    if not rest.strip(b"\0"):
        return "torn"
    if len(rest) < HEADER_SIZE:
        return "torn" if BATCH_MAGIC.startswith(rest[:4]) else "corrupt"
    try:
        head = decode_header(rest)
    except BadBatch:
        return "corrupt"
    return "torn" if head.total_len > len(rest) else "corrupt"


def scan(data: bytes) -> ScanResult:
    """Walk a whole segment's bytes batch by batch, validating each; resynchronise past damage.

    Damage never hides what follows it: after a bad batch (or a bad file magic) the scan
    looks for the next offset that holds an intact batch and goes on from there.
    """
    if not data:
        return ScanResult(0, None, None)
    damage: list[Damage] = []
    valid_len = 0
    if data[:len(FILE_MAGIC)] == FILE_MAGIC:
        offset = valid_len = len(FILE_MAGIC)
    else:
        found = next_batch(data, 0)
        end = len(data) if found is None else found
        damage.append(Damage(0, end, "corrupt" if len(data) >= len(FILE_MAGIC) else "torn"))
        offset = end
    first: BatchHeader | None = None
    last: BatchHeader | None = None
    last_content: BatchHeader | None = None
    last_content_at = 0
    view = memoryview(data)
    try:
        while offset < len(data):
            try:
                head = check_batch(view, offset)
            except BadBatch:
                found = next_batch(data, offset + 1)
                if found is None:
                    damage.append(Damage(offset, len(data) - offset, _tail_why(data, offset)))
                    break
                damage.append(Damage(offset, found - offset, "corrupt"))
                offset = found
                continue
            if first is None:
                first = head
            last = head
            if head.kind is not BatchKind.DAMAGE:
                last_content, last_content_at = head, offset
            offset += head.total_len
            valid_len = offset
    finally:
        view.release()
    return ScanResult(valid_len, last, first, tuple(damage), last_content, last_content_at)


def read_last_header(fd: int, size: int) -> tuple[BatchHeader, int] | None:
    """Header and offset of the last batch of an intact file of ``size`` bytes, via its trailer."""
    if size < len(FILE_MAGIC) + HEADER_SIZE + TRAILER_SIZE:
        return None
    (total,) = _TRAILER.unpack(os.pread(fd, TRAILER_SIZE, size - TRAILER_SIZE))
    start = size - total
    if start < len(FILE_MAGIC):
        raise BadBatch("trailer points before the file start")
    return decode_header(os.pread(fd, HEADER_SIZE, start)), start


def read_last_content_header(fd: int, size: int) -> BatchHeader | None:
    """The last batch of an intact file that is not a damage marker (those follow a repair)."""
    end = size
    for _ in range(64):
        found = read_last_header(fd, end)
        if found is None:
            return None
        head, start = found
        if head.kind is not BatchKind.DAMAGE:
            return head
        end = start
    return None


def read_first_header(fd: int, size: int) -> BatchHeader | None:
    if size < len(FILE_MAGIC) + HEADER_SIZE:
        return None
    return decode_header(os.pread(fd, HEADER_SIZE, len(FILE_MAGIC)))
