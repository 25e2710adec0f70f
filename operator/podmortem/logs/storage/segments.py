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

Why a secret sync marker: a container prints any bytes it likes, and those bytes are stored
inside batch payloads. If a batch were recognised by a constant magic, a line holding a
CRC-valid batch would be taken for a real one wherever the store resynchronises (after damage,
or at a torn tail after a crash): a forged cursor, a forged end of log. So every batch starts
with the segment's *sync marker*, 16 random bytes drawn when the container instance is created
and written in the segment's file header (and the instance's meta), the technique of Avro's and
Hadoop SequenceFile's sync markers. Content never sees the store, so it cannot know the marker;
a resynchronisation only looks at offsets that start with it, and still checks the CRC there.
A chance match inside content is a 2^-128 event per offset.

Layout of a segment file (format 2)::

    b"PMLOGSG2" SYNC(16) CRC32(magic+sync)(4)    file header, 28 bytes
    batch*                                       zero or more batches

    batch := SYNC(16) HEADER(64 bytes) payload TRAILER(u32 total batch length)

Format 1 segments (``b"PMLOGSG1"``, batches starting with the public magic ``PMB\x01``) are
read too, since a store may hold them; the writer never appends to one, it starts a format 2 segment.

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

#: Format 1 (read only): a constant batch magic that content can forge.
FILE_MAGIC_V1 = b"PMLOGSG1"
BATCH_MAGIC_V1 = b"PMB\x01"
#: Format 2: the file magic, then the segment's sync marker and a CRC of both.
FILE_MAGIC = b"PMLOGSG2"
SYNC_SIZE = 16

#: After the sync: kind, flags, n_lines, payload_len, first_ts, last_ts, index_after,
#: cursor last_ts, cursor count, cursor last-line CRC (valid if flags has _HAS_LINE_CRC), cursor delivered.
_FIELDS = "BB2xIIqqQqIIQ"
#: Header flag: the cursor's last-line checksum is present (segments written before it have 0 there).
_HAS_LINE_CRC = 1
_CRC = struct.Struct("<I")
_TRAILER = struct.Struct("<I")
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
    #: Bytes before the payload (sync or magic, fields, CRC): the framing's ``header_size``.
    header_size: int = 0

    @property
    def total_len(self) -> int:
        return self.header_size + self.payload_len + TRAILER_SIZE

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



class BadBatch(PodmortemError, ValueError):
    """Bytes that are not an intact batch: a torn tail or corruption."""


class Framing:
    """How one segment frames its batches: the sync marker every batch starts with.

    Format 2 segments have a secret 16-byte marker (see the module docstring); format 1
    segments, still read, have the public batch magic in its place.
    """

    __slots__ = ("_head", "data_start", "header_size", "sync", "version")

    def __init__(self, sync: bytes, *, version: int = 2) -> None:
        if version == 2 and len(sync) != SYNC_SIZE:
            raise ValueError(f"a sync marker has {SYNC_SIZE} bytes")
        self.sync = sync
        self.version = version
        self._head = struct.Struct(f"<{len(sync)}s{_FIELDS}")
        self.header_size = self._head.size + _CRC.size
        #: Offset of the first batch: after the file header.
        self.data_start = len(FILE_MAGIC_V1) if version == 1 else len(FILE_MAGIC) + SYNC_SIZE + _CRC.size

    @classmethod
    def new(cls) -> Framing:
        """A format 2 framing with a fresh random sync marker."""
        return cls(os.urandom(SYNC_SIZE))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Framing) and (self.sync, self.version) == (other.sync, other.version)

    def __hash__(self) -> int:
        return hash((self.sync, self.version))

    def __repr__(self) -> str:
        return f"Framing(version={self.version})"  # the marker stays out of logs

    # --- writing ---------------------------------------------------------------------------------

    def file_header(self) -> bytes:
        if self.version == 1:
            return FILE_MAGIC_V1
        return FILE_MAGIC + self.sync + _CRC.pack(zlib.crc32(FILE_MAGIC + self.sync))

    def _frame(
        self,
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
        head = self._head.pack(
            self.sync, kind, flags, n_lines, len(payload), first_ts, last_ts, index_after,
            cursor.last_ts, cursor.count, cursor.line_crc or 0, cursor.delivered,
        )
        crc = zlib.crc32(payload, zlib.crc32(head))
        total = self.header_size + len(payload) + TRAILER_SIZE
        return b"".join((head, _CRC.pack(crc), payload, _TRAILER.pack(total)))

    def encode_lines(self, lines: Sequence[LogLine], *, index_before: int, cursor: CursorFields) -> bytes:
        """Encode a non-empty batch of lines; the per-line work is attribute reads in comprehensions."""
        texts = [line.text for line in lines]
        stamps = array("q", [line.ts_ns for line in lines])
        lengths = array("I", map(len, texts))
        texts.append(b"")
        payload = b"".join((_to_le(stamps), _to_le(lengths), b"\n".join(texts)))
        return self._frame(
            BatchKind.LINES, payload,
            n_lines=len(lines), first_ts=stamps[0], last_ts=stamps[-1],
            index_after=index_before + len(lines), cursor=cursor,
        )

    def encode_raw(self, raw: bytes, *, n_lines: int, first_ts: int, last_ts: int, index_before: int,
                   cursor: CursorFields) -> bytes:
        """Encode a block of complete ``<RFC3339> <text>\n`` lines as the API sent them."""
        return self._frame(
            BatchKind.RAW_LINES, raw,
            n_lines=n_lines, first_ts=first_ts, last_ts=last_ts,
            index_after=index_before + n_lines, cursor=cursor,
        )

    def encode_event(self, kind: BatchKind, data: dict[str, Any], *, first_ts: int, last_ts: int,
                     index: int, cursor: CursorFields) -> bytes:
        """Encode a gap, end or damage marker: no lines, a JSON payload."""
        payload = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
        return self._frame(kind, payload, n_lines=0, first_ts=first_ts, last_ts=last_ts,
                           index_after=index, cursor=cursor)

    # --- reading ---------------------------------------------------------------------------------

    def decode_header(self, data: bytes | memoryview) -> BatchHeader:
        if len(data) < self.header_size:
            raise BadBatch("short header")
        fields = self._head.unpack_from(data)
        if fields[0] != self.sync:
            raise BadBatch("no sync marker")
        try:
            kind = BatchKind(fields[1])
        except ValueError as exc:
            raise BadBatch(f"unknown batch kind {fields[1]}") from exc
        (_, _, flags, n_lines, payload_len, first_ts, last_ts, index_after,
         cursor_last_ts, cursor_count, line_crc, cursor_delivered) = fields
        return BatchHeader(kind, n_lines, payload_len, first_ts, last_ts, index_after, cursor_last_ts,
                           cursor_count, cursor_delivered, line_crc if flags & _HAS_LINE_CRC else None,
                           self.header_size)

    def check_batch(self, data: bytes | memoryview, offset: int) -> BatchHeader:
        """Validate the whole batch at ``offset`` (sync, lengths, trailer, CRC) and return its header."""
        head = self.decode_header(data[offset:offset + self.header_size])
        end = offset + head.total_len
        if end > len(data):
            raise BadBatch("torn batch")
        fields_len = self._head.size
        (crc,) = _CRC.unpack_from(data, offset + fields_len)
        payload_at = offset + self.header_size
        head_crc = zlib.crc32(data[offset:offset + fields_len])
        expected = zlib.crc32(data[payload_at:payload_at + head.payload_len], head_crc)
        if crc != expected:
            raise BadBatch("CRC mismatch")
        (trailer,) = _TRAILER.unpack_from(data, end - TRAILER_SIZE)
        if trailer != head.total_len:
            raise BadBatch("trailer mismatch")
        return head

    def crc_of_fields(self, head_bytes: bytes | memoryview) -> tuple[int, int]:
        """(stored CRC, CRC of the header fields): a streaming check continues the second over the payload."""
        (crc,) = _CRC.unpack_from(head_bytes, self._head.size)
        return crc, zlib.crc32(head_bytes[:self._head.size])

    def next_batch(self, data: bytes, start: int) -> int | None:
        """Offset of the first intact batch at or after ``start``, if any.

        Resynchronising after damage: only offsets that start with the sync marker are looked
        at, and each must pass the CRC. Content cannot hold the marker (format 2), so no line
        a container printed is ever taken for a batch.
        """
        view = memoryview(data)
        try:
            pos = data.find(self.sync, start)
            while pos >= 0:
                try:
                    self.check_batch(view, pos)
                    return pos
                except BadBatch:
                    pos = data.find(self.sync, pos + 1)
            return None
        finally:
            view.release()

    def read_last_header(self, fd: int, size: int) -> tuple[BatchHeader, int] | None:
        """Header and offset of the last batch of an intact file of ``size`` bytes, via its trailer."""
        if size < self.data_start + self.header_size + TRAILER_SIZE:
            return None
        trailer = os.pread(fd, TRAILER_SIZE, size - TRAILER_SIZE)
        if len(trailer) < TRAILER_SIZE:
            raise BadBatch("the file is shorter than its committed size")
        (total,) = _TRAILER.unpack(trailer)
        start = size - total
        if start < self.data_start:
            raise BadBatch("trailer points before the file start")
        head = self.decode_header(os.pread(fd, self.header_size, start))
        if head.total_len != total:
            raise BadBatch("trailer mismatch")
        return head, start

    def read_last_content_header(self, fd: int, size: int) -> BatchHeader | None:
        """The last batch of an intact file that is not a damage marker (those follow a repair)."""
        end = size
        for _ in range(64):
            found = self.read_last_header(fd, end)
            if found is None:
                return None
            head, start = found
            if head.kind is not BatchKind.DAMAGE:
                return head
            end = start
        return None

    def read_first_header(self, fd: int, size: int) -> BatchHeader | None:
        if size < self.data_start + self.header_size:
            return None
        return self.decode_header(os.pread(fd, self.header_size, self.data_start))


#: Format 1 segments: the batch magic in the sync's place.
LEGACY = Framing(BATCH_MAGIC_V1, version=1)
#: Bytes of a file header that tell its framing (the longest header, format 2's).
FILE_HEADER_SIZE = len(FILE_MAGIC) + SYNC_SIZE + _CRC.size


def framing_of(header: bytes, fallback: bytes | None = None) -> Framing | None:
    """The framing a segment's first bytes announce.

    A damaged file header is no loss where the instance's meta keeps the marker
    (``fallback``); without it the segment cannot be read safely (None): guessing a marker
    from the content would let content choose it.
    """
    if header.startswith(FILE_MAGIC_V1):
        return LEGACY
    if header.startswith(FILE_MAGIC) and len(header) >= FILE_HEADER_SIZE:
        sync = header[len(FILE_MAGIC):len(FILE_MAGIC) + SYNC_SIZE]
        (crc,) = _CRC.unpack_from(header, len(FILE_MAGIC) + SYNC_SIZE)
        if crc == zlib.crc32(FILE_MAGIC + sync):
            return Framing(sync)
    if fallback is not None:
        return Framing(fallback)
    return None


def read_framing(fd: int, fallback: bytes | None = None) -> Framing | None:
    """`framing_of` for an open segment file."""
    return framing_of(os.pread(fd, FILE_HEADER_SIZE, 0), fallback)


class LinesPayload:
    """A decoded columnar lines batch. ``text_blob`` is ``text\\n`` for every line, in order."""

    def __init__(self, stamps: array[int], lengths: array[int], text_blob: bytes) -> None:
        self._stamps = stamps
        self.lengths = lengths
        self.text_blob = text_blob
        #: The whole batch as each reader's format renders it, made once for every reader that
        #: shares this payload (``reading.render_block``).
        self.rendered: dict[object, tuple[bytes, ...]] = {}

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
        #: As `LinesPayload.rendered`.
        self.rendered: dict[object, tuple[bytes, ...]] = {}

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
    #: How the segment frames its batches (None: it could not be told, the whole file is damage).
    framing: Framing | None = None

    @property
    def tail(self) -> Damage | None:
        """Damage that runs to the end of the file (what a writer must cut before appending)."""
        if self.damage and self.damage[-1].offset >= self.valid_len:
            return self.damage[-1]
        return None

    @property
    def problem(self) -> str | None:
        return None if not self.damage else f"{sum(d.length for d in self.damage)} bytes {self.damage[0].why}"


def _tail_why(framing: Framing, data: bytes, offset: int) -> str:
    """A tail is torn when it is the start of one batch the file ends inside (or zeros after a crash)."""
    rest = data[offset:]
    if not rest.strip(b"\0"):
        return "torn"
    if len(rest) < framing.header_size:
        return "torn" if framing.sync.startswith(rest[:len(framing.sync)]) else "corrupt"
    try:
        head = framing.decode_header(rest)
    except BadBatch:
        return "corrupt"
    return "torn" if head.total_len > len(rest) else "corrupt"


def scan(data: bytes, fallback: bytes | None = None) -> ScanResult:
    """Walk a whole segment's bytes batch by batch, validating each; resynchronise past damage.

    Damage never hides what follows it: after a bad batch (or a bad file header) the scan
    looks for the next offset that starts with the sync marker and holds an intact batch,
    and goes on from there. ``fallback``: the instance's sync marker, for a damaged header.
    """
    if not data:
        return ScanResult(0, None, None)
    framing = framing_of(data[:FILE_HEADER_SIZE], fallback)
    if framing is None:
        return ScanResult(0, None, None, (Damage(0, len(data), "corrupt"),))
    damage: list[Damage] = []
    valid_len = 0
    start = framing.data_start
    if data[:start] == framing.file_header():
        offset = valid_len = start
    else:
        found = framing.next_batch(data, 0)
        end = len(data) if found is None else found
        damage.append(Damage(0, end, "corrupt" if len(data) >= start else "torn"))
        offset = end
    first: BatchHeader | None = None
    last: BatchHeader | None = None
    last_content: BatchHeader | None = None
    last_content_at = 0
    view = memoryview(data)
    try:
        while offset < len(data):
            try:
                head = framing.check_batch(view, offset)
            except BadBatch:
                found = framing.next_batch(data, offset + 1)
                if found is None:
                    damage.append(Damage(offset, len(data) - offset, _tail_why(framing, data, offset)))
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
    return ScanResult(valid_len, last, first, tuple(damage), last_content, last_content_at, framing)
