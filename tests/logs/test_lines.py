"""Splitting byte chunks into lines: never a partial line, never a duplicate, bytes kept exactly."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podmortem.logs import timestamps
from podmortem.logs.cursor import LogCursor
from podmortem.logs.lines import LineBatch, StreamParser, strip_timestamps

BASE = 1_714_564_800 * 1_000_000_000

texts = st.one_of(
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")),
    st.sampled_from([b"", b"progress 10%\r progress 20%\r", b"\x1b[31mred\x1b[0m", b"\xff\xfe\xfd",
                     "ünïcödé 世界 🙂".encode(), b"x" * (17 * 1024), b"two  spaces  inside"]),
)


@st.composite
def logs(draw: st.DrawFn) -> list[tuple[int, bytes]]:
    n = draw(st.integers(min_value=0, max_value=60))
    ts = BASE
    out = []
    for _ in range(n):
        ts += draw(st.sampled_from([0, 0, 1, 999, 1_000_000_000]))
        out.append((ts, draw(texts)))
    return out


def render(lines: list[tuple[int, bytes]]) -> bytes:
    return b"".join(timestamps.format_ns(ts).encode() + b" " + text + b"\n" for ts, text in lines)


def collect(parser: StreamParser, data: bytes, cuts: list[int]) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    prev = 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        batch = parser.feed(data[prev:cut])
        prev = max(prev, cut)
        if batch is not None:
            assert len(batch) == batch.n_lines > 0
            stamps, texts_ = batch.columns()
            assert [(line.ts_ns, line.text) for line in batch] == list(zip(stamps, texts_, strict=True))
            out.extend(zip(stamps, texts_, strict=True))
    return out


@settings(max_examples=80, deadline=None)
@given(lines=logs(), cuts=st.lists(st.integers(min_value=0, max_value=10**6), max_size=30))
def test_any_chunking_delivers_exactly_the_lines(lines: list[tuple[int, bytes]], cuts: list[int]) -> None:
    data = render(lines)
    parser = StreamParser(container="c", cursor=LogCursor())
    assert collect(parser, data, cuts) == lines
    assert parser.partial == b""


@settings(max_examples=80, deadline=None)
@given(lines=logs(), stop=st.integers(min_value=0, max_value=10**6),
       cuts=st.lists(st.integers(min_value=0, max_value=10**6), max_size=10))
def test_a_cut_stream_resumed_from_whole_seconds_loses_and_repeats_nothing(
    lines: list[tuple[int, bytes]], stop: int, cuts: list[int],
) -> None:
    data = render(lines)
    stop %= len(data) + 1
    cursor = LogCursor()
    first = StreamParser(container="c", cursor=cursor)
    got = collect(first, data[:stop], cuts)
    # The partial line is neither delivered nor counted.
    assert cursor.delivered == len(got) == data[:stop].count(b"\n")
    # Resume as the apiserver does: from the cursor's second, rounded down.
    since = (cursor.last_ts_ns // 1_000_000_000) * 1_000_000_000 if cursor.last_ts_ns is not None else BASE
    replay = render([(ts, text) for ts, text in lines if ts >= since])
    second = StreamParser(container="c", cursor=cursor)
    got += collect(second, replay, cuts)
    assert got == lines
    assert not second.replay_missed


def test_partial_line_inside_a_multibyte_character_waits_for_the_rest() -> None:
    line = timestamps.format_ns(BASE).encode() + b" " + "世界".encode() + b"\n"
    parser = StreamParser(container="c", cursor=LogCursor())
    assert parser.feed(line[:-3]) is None
    batch = parser.feed(line[-3:])
    assert batch is not None and [x.text.decode() for x in batch] == ["世界"]


def test_text_block_strips_only_the_first_space_separated_stamp() -> None:
    raw = render([(BASE, b"a b"), (BASE + 1, b""), (BASE + 2, b" lead")])
    batch = LineBatch(container="c", raw=raw, count=3, first_ts_ns=BASE, last_ts_ns=BASE + 2)
    assert batch.text_block() == b"a b\n\n lead\n" == strip_timestamps(raw)
    assert batch.text_block(timestamps=True) == raw


def _stream(parser: StreamParser, data: bytes, chunk: int) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    for i in range(0, len(data), chunk):
        batch = parser.feed(data[i:i + chunk])
        if batch is not None:
            out.extend(zip(*batch.columns(), strict=True))
    return out


@pytest.mark.timeout(60)
def test_a_long_line_in_small_chunks_is_joined_once_not_once_per_chunk() -> None:
    # 12 MiB in 2 KiB chunks: re-copying the unfinished line per chunk is ~6,000 copies of up to
    # 12 MiB (about 38 GB moved, minutes); joining once is a fraction of a second.
    text = b"y" * (12 << 20)
    data = render([(BASE, b"before"), (BASE + 1, text), (BASE + 2, b"after")])
    got = _stream(StreamParser(container="c", cursor=LogCursor()), data, 2048)
    assert got == [(BASE, b"before"), (BASE + 1, text), (BASE + 2, b"after")]


def test_a_line_beyond_the_cap_keeps_its_head_and_says_how_much_was_dropped() -> None:
    cap = 4096
    text = b"z" * 100_000
    data = render([(BASE, text), (BASE + 1, b"next")])
    stamp = len(timestamps.format_ns(BASE)) + 1
    for chunk in (1000, 5000, len(data)):  # unfinished across chunks, and whole in one chunk
        parser = StreamParser(container="c", cursor=LogCursor(), max_line_bytes=cap)
        peak = 0
        out: list[tuple[int, bytes]] = []
        for i in range(0, len(data), chunk):
            batch = parser.feed(data[i:i + chunk])
            peak = max(peak, len(parser.partial))
            if batch is not None:
                out.extend(zip(*batch.columns(), strict=True))
        assert peak <= cap
        note = b" [podmortem: %d more bytes of this line were not kept]" % (len(text) + stamp - cap)
        assert out == [
            (BASE, b"z" * (cap - stamp) + note),
            (BASE + 1, b"next"),
        ], chunk


def test_a_capped_line_is_recognised_on_replay() -> None:
    data = render([(BASE, b"a" * 10_000), (BASE, b"b")])
    cursor = LogCursor()
    first = _stream(StreamParser(container="c", cursor=cursor, max_line_bytes=1024), data, 700)
    assert len(first) == 2
    again = render([(BASE, b"a" * 10_000), (BASE, b"b"), (BASE + 5, b"new")])
    second = _stream(StreamParser(container="c", cursor=cursor, max_line_bytes=1024), again, 700)
    assert second == [(BASE + 5, b"new")]
