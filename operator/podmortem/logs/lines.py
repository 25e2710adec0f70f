"""Turning a ``timestamps=true`` byte stream into complete, deduplicated lines.

Chunks from the API cut lines anywhere, even inside a multi-byte character.
A :class:`StreamParser` keeps the unfinished tail of the last chunk, so only
complete lines are ever delivered or counted in the cursor; the tail comes
again after a reconnect. Lines stay bytes: ``\\r``, ANSI escapes and invalid
UTF-8 pass through untouched. An unfinished line is kept as a list of chunks, so
a long line costs one copy, not one per chunk; a line longer than
``MAX_LINE_BYTES`` keeps its first ``MAX_LINE_BYTES`` and says how much was
dropped (the same on every replay, so a cursor still recognises it).

Speed matters here (a training job can log a million short lines a second),
so lines travel in :class:`LineBatch` blocks: one ``bytes`` of complete lines
as the API sent them. Per-line Python work happens only while a reconnect
replays lines that were already delivered; after the first new line, a block
costs a few C-level scans (``find``, ``rfind``, ``count``) and at most one copy,
and the cursor parses one stamp (the last line's) and compares the few before it
that share it. Printing without timestamps (:func:`strip_timestamps`) is the
one step with work per line: an object per line, most of the path's time for
short lines (docs/benchmarks.md, ``bench/logs_throughput.py``); for such a sink
the parser counts lines with the split the strip then reuses
(:attr:`StreamParser.split_lines`).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import overload

from podmortem.logs import timestamps
from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import LogLine

#: The most bytes of one line kept (timestamp included). Default 16 MiB: far above any real
#: log line (the CRI splits lines at 16 KiB and the kubelet joins them), far below memory trouble.
MAX_LINE_BYTES = 16 << 20


def _dropped_note(n: int) -> bytes:
    return b" [podmortem: %d more bytes of this line were not kept]" % n


def strip_timestamps(block: bytes, split: list[bytes] | None = None) -> bytes:
    """Drop the ``<RFC3339> `` prefix of every line of a block of complete lines.

    Splitting and re-joining is about twice as fast as a regex substitution,
    and ``partition`` takes the first space whatever the timestamp's width.
    ``split``: ``block.split(b"\\n")`` if the caller has it already.
    """
    if split is None:
        split = block.split(b"\n")
    return b"\n".join([line.partition(b" ")[2] for line in split])


def split_line(line: bytes) -> tuple[int, bytes]:
    """One timestamped line (without its newline) -> (ts_ns, text)."""
    space = line.find(b" ")
    if space < 0:  # an empty line may come without the separating space
        return timestamps.parse_ns(line), b""
    return timestamps.parse_ns(line[:space]), line[space + 1:]


class LineBatch(Sequence[LogLine]):
    """Complete lines of one container, in stream order, kept as the raw block they came in.

    It is a ``Sequence[LogLine]`` (built lazily on first index), so simple sinks
    can iterate lines; fast sinks use :attr:`raw` (``<ts> <text>\\n`` per line)
    or :meth:`text_block` and never build a per-line object.
    """

    __slots__ = ("_lines", "_split", "container", "first_ts_ns", "last_ts_ns", "n_lines", "raw")

    def __init__(self, *, container: str, raw: bytes, count: int, first_ts_ns: int, last_ts_ns: int,
                 split: list[bytes] | None = None) -> None:
        self.container = container
        #: The lines exactly as the API sent them: ``<RFC3339> <text>\n`` each; never a partial line.
        self.raw = raw
        self.n_lines = count
        self.first_ts_ns = first_ts_ns
        self.last_ts_ns = last_ts_ns
        self._lines: list[LogLine] | None = None
        #: The block split at its newlines, when the parser split it to count its lines.
        self._split = split

    @classmethod
    def of(cls, container: str, lines: Sequence[LogLine]) -> LineBatch:
        """Lines as the API would have sent them (``<RFC3339> <text>\\n`` each), for writers other than
        the follower: podmortem's own lines, a replay, a test. ``lines`` must not be empty."""
        raw = b"".join(timestamps.format_ns(x.ts_ns).encode() + b" " + x.text + b"\n" for x in lines)
        return cls(container=container, raw=raw, count=len(lines), first_ts_ns=lines[0].ts_ns,
                   last_ts_ns=lines[-1].ts_ns)

    def text_block(self, *, timestamps: bool = False) -> bytes:
        """The lines as ``kubectl logs`` prints them: with or without the timestamp prefix."""
        return self.raw if timestamps else strip_timestamps(self.raw, self._split)

    def columns(self) -> tuple[list[int], list[bytes]]:
        """(timestamps in ns, texts) of all lines: what a columnar store needs, with no LogLine."""
        parts = [line.partition(b" ") for line in self.raw[:-1].split(b"\n")]
        parse = timestamps.parse_ns
        return [parse(p[0]) for p in parts], [p[2] for p in parts]

    def lines(self) -> list[LogLine]:
        if self._lines is None:
            container = self.container
            self._lines = [
                LogLine(container, ts, text)
                for ts, text in map(split_line, self.raw[:-1].split(b"\n"))
            ]
        return self._lines

    def __len__(self) -> int:
        return self.n_lines

    @overload
    def __getitem__(self, index: int) -> LogLine: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[LogLine]: ...
    def __getitem__(self, index: int | slice) -> LogLine | Sequence[LogLine]:
        return self.lines()[index]

    def __iter__(self) -> Iterator[LogLine]:
        return iter(self.lines())

    def __repr__(self) -> str:
        return f"LineBatch(container={self.container!r}, n_lines={self.n_lines}, bytes={len(self.raw)})"


def _stamp_at(block: bytes, start: int) -> int:
    """Timestamp of the line starting at ``start``."""
    nl = block.find(b"\n", start)
    space = block.find(b" ", start, nl)
    return timestamps.parse_ns(block[start:space if space >= 0 else nl])


def _first_at_or_after(block: bytes, ts_ns: int) -> int:
    """Offset of the first line with a timestamp >= ``ts_ns`` (``len(block)`` if none).

    Bisects over byte offsets, parsing O(log lines) stamps. Timestamps never
    go back within one instance's log, the same premise as
    :meth:`LogCursor.advance_block`.
    """
    if _stamp_at(block, 0) >= ts_ns:
        return 0
    lo, hi = 0, len(block)  # lo: a line start older than ts_ns; hi: the answer's upper bound
    while True:
        nl = block.find(b"\n", (lo + hi) // 2, hi)
        if nl < 0 or nl + 1 >= hi:
            nl = block.find(b"\n", lo, hi)  # no line starts between mid and hi: try lo's next line
            if nl + 1 >= hi:
                return hi
        candidate = nl + 1
        if _stamp_at(block, candidate) < ts_ns:
            lo = candidate
        else:
            hi = candidate


#: Bytes of lines at the cursor's timestamp held back while deciding which are replays.
_HOLD_MAX = 4 << 20


def _last_line_start(block: bytes, end: int) -> int:
    """Index where the line ending at ``block[end] == '\\n'`` starts."""
    return block.rfind(b"\n", 0, end) + 1


@dataclass
class StreamParser:
    """Parses one HTTP response's body: splits lines, drops replays, advances the cursor.

    Create one per request; the cursor outlives it. After the stream ends,
    :attr:`partial` holds an unfinished last line (never delivered, never counted).
    """

    container: str
    cursor: LogCursor
    #: Most bytes of one line kept; the rest of a longer line is dropped and counted in its text.
    max_line_bytes: int = MAX_LINE_BYTES
    #: Count a block's lines by splitting it, and keep the split in the batch: for a sink that
    #: prints without stamps (:attr:`LogSink.splits_lines`), which splits every block anyway. Otherwise
    #: counting alone is the cheaper scan.
    split_lines: bool = False
    #: Still skipping lines that an earlier connection already delivered.
    replaying: bool = True
    #: Set when the first new line showed that the replay lacked lines we had delivered.
    replay_missed: bool = False
    #: Timestamp of the last delivered line before this stream (for a gap marker).
    resumed_after_ns: int | None = None
    #: Replayed lines skipped as duplicates in this stream.
    duplicates: int = 0
    #: Bytes received in this stream.
    bytes_seen: int = 0
    #: Complete lines at the cursor's timestamp not yet known to be replays or new (see feed).
    held: bytes = b""
    #: In ``held``: the end of the latest copy of our last delivered line (0: none).
    held_match_end: int = 0
    #: The unfinished last line, as the chunks it came in (joined once, when it ends).
    _parts: list[bytes] = field(default_factory=list)
    _parts_len: int = 0
    #: Bytes of the unfinished line dropped beyond ``max_line_bytes``.
    _dropped: int = 0

    def __post_init__(self) -> None:
        if self.max_line_bytes < 64:
            raise ValueError("max_line_bytes must be at least 64")
        self.cursor.begin_replay()
        self.resumed_after_ns = self.cursor.last_ts_ns
        self.replaying = self.cursor.last_ts_ns is not None

    @property
    def partial(self) -> bytes:
        """Bytes after the last newline seen: a line not finished yet (as kept)."""
        return b"".join(self._parts)

    def _extend_partial(self, piece: bytes) -> None:
        room = self.max_line_bytes - self._parts_len
        if len(piece) > room:
            self._dropped += len(piece) - max(room, 0)
            piece = piece[:max(room, 0)]
        if piece:
            self._parts.append(piece)
            self._parts_len += len(piece)

    def _take_partial(self) -> bytes:
        """The finished line (newline included); the partial state starts over."""
        line = b"".join(self._parts)
        if self._dropped:
            line += _dropped_note(self._dropped)
        self._parts, self._parts_len, self._dropped = [], 0, 0
        return line + b"\n"

    def feed(self, data: bytes) -> LineBatch | None:
        """Take the next chunk; return the complete new lines it finishes, if any."""
        self.bytes_seen += len(data)
        head = b""
        start = 0  # where the chunk's own complete lines begin
        if self._parts or self._dropped:
            nl = data.find(b"\n")
            if nl < 0:
                self._extend_partial(data)
                return None
            self._extend_partial(data[:nl])
            head = self.held + self._take_partial()  # already capped: never cut twice
            start = nl + 1
        elif self.held:
            head = self.held
        self.held = b""
        cut = data.rfind(b"\n", start)
        if cut < 0:
            self._extend_partial(data[start:])
            block = head
        else:
            end = cut + 1
            if end < len(data):
                self._extend_partial(data[end:])
            # The block is copied once at most, whatever the cut: a chunk is mostly lines.
            if end - start > self.max_line_bytes:
                block = head + self._cap_lines(data[start:end])
            elif head:
                block = b"".join((head, memoryview(data)[start:end]))
            elif start or end < len(data):
                block = data[start:end]
            else:
                block = data
        if not block:
            return None
        if self.replaying:
            first_new = self._skip_replayed(block)
            if first_new is None:
                return None
            if first_new == len(block):
                return None
            if first_new:
                block = block[first_new:]
        return self._advance(block)

    def _cap_lines(self, block: bytes) -> bytes:
        """Cut every line of a block longer than ``max_line_bytes`` (rare: only huge chunks)."""
        limit = self.max_line_bytes
        lines = block[:-1].split(b"\n")
        if max(map(len, lines)) <= limit:
            return block
        out = []
        for line in lines:
            out.append(line if len(line) <= limit else line[:limit] + _dropped_note(len(line) - limit))
        out.append(b"")
        return b"\n".join(out)

    def finish(self) -> LineBatch | None:
        """At a clean end of the stream: settle held lines; return the new ones.

        All replays if they end on a copy of our last line; otherwise by counting alone.
        """
        if not self.held:
            return None
        block, self.held = self.held, b""
        if self.held_match_end == len(block):
            # The stream ends on a copy of our last delivered line, with fewer lines of its burst
            # before it than we delivered: a rotation kept only the burst's tail. Nothing here is
            # new, and nothing is missing. Lines after a copy are never delivered on its word here:
            # the end may be a cut, and a copy among identical lines is not necessarily ours.
            self.duplicates += block.count(b"\n")
            self.cursor.replay_reached_last()
            self.replaying = False
            return None
        start = self._count_replayed(block, 0)
        return self._advance(block[start:]) if start < len(block) else None

    def _skip_replayed(self, block: bytes) -> int | None:
        """Skip lines an earlier connection delivered; return the offset of the first new one.

        Lines older than the cursor's timestamp are replays whatever their number,
        so they are skipped in one step, found by bisection (a replay may resend
        up to a second of lines: tens of thousands for a busy trainer). Of the
        lines at the cursor's own timestamp, the replays end with the last
        delivered line, recognised by its checksum: if the file was rotated
        inside that burst, fewer of them come back than were delivered, and
        counting alone would take new lines for replays. While the burst is not
        over and the last line not seen yet, its lines are held (None returned)
        until more data decides; a clean end settles them (:meth:`finish`).
        """
        cursor = self.cursor
        last = cursor.last_ts_ns
        if last is None:
            self.replaying = False
            return 0
        pos = _first_at_or_after(block, last)
        if pos:
            self.duplicates += block.count(b"\n", 0, pos)
        crc = cursor.last_line_crc
        if crc is None:
            return self._count_replayed(block, pos)
        run_start = pos
        size = len(block)
        count = cursor.count_at_last
        seen = 0  # lines of the burst looked at
        best_end = -1  # end of the last line matching our last line's checksum, within ``count``
        best_seen = 0
        while pos < size and seen < count:
            nl = block.index(b"\n", pos)
            space = block.find(b" ", pos, nl)
            if timestamps.parse_ns(block[pos:space if space >= 0 else nl]) != last:
                break  # the burst at the cursor's timestamp is over
            seen += 1
            if zlib.crc32(block[pos:nl]) == crc:
                best_end, best_seen = nl + 1, seen  # the latest match wins: identical lines repeat
            pos = nl + 1
        if pos >= size and seen < count:
            if run_start == size:
                return size  # only older lines so far
            if size - run_start > _HOLD_MAX:
                return self._count_replayed(block, run_start)  # a burst too long to hold: count
            self.held = block[run_start:]  # the burst may go on in the next chunk: decide then
            self.held_match_end = best_end - run_start if best_end >= 0 else 0
            return None
        self.replaying = False
        if best_end >= 0:
            # Our last delivered line: up to it, replays; after it, new lines. Found before the
            # count was reached, it means the file lost the burst's first lines (we had them).
            self.duplicates += best_seen
            cursor.replay_reached_last()
            return best_end
        # The burst holds no line we delivered last: the file was rotated inside it (or after
        # it), and every line of it here is new.
        self.replay_missed = count > 0
        return run_start

    def _count_replayed(self, block: bytes, pos: int) -> int:
        """Offer lines to the cursor one by one until the first new one; return its offset."""
        cursor = self.cursor
        size = len(block)
        while pos < size:
            nl = block.index(b"\n", pos)
            space = block.find(b" ", pos, nl)
            ts = timestamps.parse_ns(block[pos:space if space >= 0 else nl])
            if not cursor.is_replayed(ts):
                self.replaying = False
                self.replay_missed = cursor.replay_missed()
                return pos
            self.duplicates += 1
            pos = nl + 1
        return pos

    def _advance(self, block: bytes) -> LineBatch:
        split = block.split(b"\n") if self.split_lines else None
        count = block.count(b"\n") if split is None else len(split) - 1
        end = len(block) - 1
        start = _last_line_start(block, end)
        last_crc = zlib.crc32(block[start:end])
        space = block.find(b" ", start, end)
        last_stamp = block[start:space if space >= 0 else end]
        last_ts = timestamps.parse_ns(last_stamp)
        # Lines at the end of the block sharing the last timestamp (usually one; a burst may share).
        trailing = 1
        width = len(last_stamp)
        while trailing < count:
            end = start - 1
            start = _last_line_start(block, end)
            # The same stamp: the line starts with it, and it ends there (a space, or an empty line
            # sent without one: either form may follow the other).
            if not block.startswith(last_stamp, start) or (
                    start + width != end and block[start + width] != 0x20):
                break
            trailing += 1
        if trailing == count:
            first_ts = last_ts
        else:
            space = block.find(b" ", 0, block.index(b"\n"))
            first_ts = timestamps.parse_ns(block[:space if space >= 0 else block.index(b"\n")])
        self.cursor.advance_block(last_ts_ns=last_ts, trailing=trailing, count=count, last_line_crc=last_crc)
        return LineBatch(
            container=self.container, raw=block, count=count, first_ts_ns=first_ts, last_ts_ns=last_ts,
            split=split,
        )
