"""The chunk path (``StreamParser`` + ``StdoutSink``) against a line-at-a-time reference.

The parser works on whole chunks: it scans for newlines, parses only the stamps the cursor needs,
and the sink strips stamps from a whole block and writes it at once. The reference here does
everything one line at a time, the obvious way: split the stream at newlines, cap each line, parse
every stamp, ``LogCursor.accept`` each line, print each line. For any log (stamps of every width
the API may send, ``\\r``, ANSI, invalid UTF-8, lines with and without the separating space, lines
beyond the cap) cut into any chunks, and resumed after a cut from the cursor's whole second, both
must print the same bytes and leave the same cursor.
"""

from __future__ import annotations

import asyncio
import io
import zlib

from hypothesis import example, given, settings
from hypothesis import strategies as st

from podmortem.logs import timestamps
from podmortem.logs.cursor import LogCursor
from podmortem.logs.following.sinks import StdoutSink
from podmortem.logs.lines import StreamParser

BASE = 1_714_564_800 * 1_000_000_000
NS = 1_000_000_000
CAP = 96

texts = st.one_of(
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")),
    st.sampled_from([b"", b"progress 10%\r progress 20%\r", b"\x1b[31mred\x1b[0m", b"\xff\xfe\xfd",
                     "ünïcödé 世界 🙂".encode(), b"two  spaces  inside", b" lead", b"x" * 150]),
)
#: How the API may write stamps: the runtime's 9 digits, Go's RFC3339Nano (trailing zeros trimmed, no
#: fraction at all on a whole second: widths vary from line to line), or a zone offset. One stream is
#: written one way: the same instant is always the same bytes.
STYLES = ("nano9", "trimmed", "offset")


def stamp(ts: int, style: str) -> bytes:
    if style == "nano9":
        return timestamps.format_ns(ts).encode()
    seconds, frac = divmod(ts, NS)
    digits = f"{frac:09d}".rstrip("0")
    fraction = f".{digits}" if digits else ""
    if style == "trimmed":
        return timestamps.format_seconds(seconds * NS).removesuffix("Z").encode() + fraction.encode() + b"Z"
    local = timestamps.format_seconds((seconds + 2 * 3600) * NS).removesuffix("Z")
    return f"{local}{fraction}+02:00".encode()


@st.composite
def logs(draw: st.DrawFn) -> list[bytes]:
    """Complete lines (without their newline) as the API sends them, timestamps never going back."""
    n = draw(st.integers(min_value=0, max_value=50))
    style = draw(st.sampled_from(STYLES))
    ts = BASE
    out = []
    for _ in range(n):
        ts += draw(st.sampled_from([0, 0, 1, 10, 999_000, NS, 2 * NS]))
        text = draw(st.one_of(st.none(), texts))  # None: an empty line sent without the space
        head = stamp(ts, style)
        out.append(head if text is None else head + b" " + text)
    return out


def capped(line: bytes) -> bytes:
    if len(line) <= CAP:
        return line
    return line[:CAP] + b" [podmortem: %d more bytes of this line were not kept]" % (len(line) - CAP)


def ts_of(line: bytes) -> int:
    return timestamps.parse_ns(line.split(b" ", 1)[0])


def reference(lines: list[bytes], cursor: LogCursor, *, stamps: bool, tag: bytes) -> bytes:
    """Line at a time: every new line accepted by the cursor and printed on its own."""
    out = []
    for line in map(capped, lines):
        if cursor.accept(ts_of(line)):
            out.append(tag + (line if stamps else line.partition(b" ")[2]) + b"\n")
            cursor.last_line_crc = zlib.crc32(line)
    return b"".join(out)


def chunked(data: bytes, cuts: list[int], cursor: LogCursor, *, stamps: bool, tag: bytes, split: bool
            ) -> bytes:
    """The chunk path: the parser fed the chunks, the stdout sink writing what it returns.

    ``split``: the parser counts lines by splitting blocks and hands the split to the sink (what the
    follower asks for when the sink prints without stamps), else by a count of newlines.
    """
    async def run() -> bytes:
        out = io.BytesIO()
        sink = StdoutSink(out, timestamps=stamps, prefix=(lambda _c: tag) if tag else False)
        parser = StreamParser(container="c", cursor=cursor, max_line_bytes=CAP, split_lines=split)
        prev = 0
        for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
            batch = parser.feed(data[prev:cut])
            prev = max(prev, cut)
            if batch is not None:
                await sink.write("c", batch, cursor)
        batch = parser.finish()
        if batch is not None:
            await sink.write("c", batch, cursor)
        sink.flush()
        return out.getvalue()

    loop = asyncio.new_event_loop()  # its own loop, closed here: hypothesis runs many examples per test
    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()


def state(cursor: LogCursor) -> tuple[object, ...]:
    return cursor.last_ts_ns, cursor.count_at_last, cursor.delivered, cursor.last_line_crc


options = st.tuples(st.booleans(), st.sampled_from([b"", b"pod c ", b"\x1b[31mpod\x1b[0m "]), st.booleans())


@settings(max_examples=100, deadline=None)
@given(lines=logs(), cuts=st.lists(st.integers(min_value=0, max_value=10**5), max_size=20),
       partial=st.binary(max_size=200).map(lambda b: b.replace(b"\n", b"")), how=options)
# Two empty lines of one instant, with and without the separating space: both count at that instant.
@example(lines=[b"2024-05-01T12:00:00.000000000Z ", b"2024-05-01T12:00:00.000000000Z"], cuts=[],
         partial=b"", how=(False, b"", False))
def test_one_stream_in_any_chunks_prints_and_counts_as_line_at_a_time(
    lines: list[bytes], cuts: list[int], partial: bytes, how: tuple[bool, bytes, bool],
) -> None:
    stamps, tag, split = how
    data = b"".join(line + b"\n" for line in lines) + partial  # an unfinished last line: never printed
    fast, slow = LogCursor(), LogCursor()
    printed = chunked(data, cuts, fast, stamps=stamps, tag=tag, split=split)
    assert printed == reference(lines, slow, stamps=stamps, tag=tag)
    assert state(fast) == state(slow)


@settings(max_examples=100, deadline=None)
@given(lines=logs(), stop=st.integers(min_value=0, max_value=10**5),
       cuts=st.lists(st.integers(min_value=0, max_value=10**5), max_size=12), how=options)
def test_a_stream_cut_anywhere_and_resumed_prints_every_line_once_as_line_at_a_time(
    lines: list[bytes], stop: int, cuts: list[int], how: tuple[bool, bytes, bool],
) -> None:
    stamps, tag, split = how
    data = b"".join(line + b"\n" for line in lines)
    stop %= len(data) + 1
    fast, slow = LogCursor(), LogCursor()
    printed = chunked(data[:stop], cuts, fast, stamps=stamps, tag=tag, split=split)
    # The apiserver resumes from the cursor's second, rounded down: the rest of that second comes again.
    since = fast.last_ts_ns // NS * NS if fast.last_ts_ns is not None else 0
    replay = b"".join(line + b"\n" for line in lines if ts_of(line) >= since)
    printed += chunked(replay, cuts, fast, stamps=stamps, tag=tag, split=split)
    assert printed == reference(lines, slow, stamps=stamps, tag=tag)
    assert state(fast) == state(slow)
