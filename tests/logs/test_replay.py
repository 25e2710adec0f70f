"""Replays after a reconnect: skipped by bisection, told apart from new lines by the last line's checksum."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from podmortem.logs import lines, timestamps
from podmortem.logs.cursor import LogCursor

BASE = 1_714_560_000 * timestamps.NS_PER_SECOND


def render(stamps: list[int], texts: list[bytes] | None = None) -> bytes:
    texts = texts or [b"line %d" % i for i in range(len(stamps))]
    return b"".join(timestamps.format_ns(ts).encode() + b" " + t + b"\n"
                    for ts, t in zip(stamps, texts, strict=True))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=60), st.integers(-2, 70))
def test_bisection_finds_the_first_line_at_or_after(steps: list[int], probe: int) -> None:
    stamps = [BASE]
    for step in steps[1:]:
        stamps.append(stamps[-1] + step)
    block = render(stamps)
    target = BASE + probe
    expected_line = next((i for i, ts in enumerate(stamps) if ts >= target), len(stamps))
    offsets = [0]
    for line in block.split(b"\n")[:-1]:
        offsets.append(offsets[-1] + len(line) + 1)
    assert lines._first_at_or_after(block, target) == offsets[expected_line]


def parse_all(cursor: LogCursor, chunks: list[bytes]) -> tuple[list[bytes], lines.StreamParser]:
    parser = lines.StreamParser(container="main", cursor=cursor)
    out: list[bytes] = []
    for chunk in chunks:
        batch = parser.feed(chunk)
        if batch is not None:
            out.extend(batch.columns()[1])
    batch = parser.finish()
    if batch is not None:
        out.extend(batch.columns()[1])
    return out, parser


def delivered_cursor(block: bytes) -> LogCursor:
    cursor = LogCursor(container_id="c")
    batch = lines.StreamParser(container="main", cursor=cursor).feed(block)
    assert batch is not None
    return cursor


def test_a_normal_replay_skips_exactly_what_was_delivered() -> None:
    stamps = [BASE + 1] * 3 + [BASE + 2] * 5 + [BASE + 3] * 2
    block = render(stamps)
    cursor = delivered_cursor(render(stamps[:6], [b"line %d" % i for i in range(6)]))
    for cut in (1, 7, 50, 150, len(block)):  # chunks cut anywhere, even inside the burst
        chunks = [block[i:i + cut] for i in range(0, len(block), cut)]
        out, parser = parse_all(cursor.copy(), chunks)
        assert out == [b"line %d" % i for i in range(6, 10)], cut
        assert not parser.replay_missed and parser.duplicates == 6


def test_rotation_inside_a_burst_delivers_the_new_file_and_says_so() -> None:
    stamps = [BASE + 2] * 10 + [BASE + 3]
    texts = [b"line %d" % i for i in range(11)]
    cursor = delivered_cursor(render(stamps[:4], texts[:4]))  # delivered 4 of the burst
    rotated = render(stamps[5:], texts[5:])  # the new file starts at line 5: line 4 is gone
    for cut in (3, 40, len(rotated)):
        out, parser = parse_all(cursor.copy(), [rotated[i:i + cut] for i in range(0, len(rotated), cut)])
        assert out == texts[5:], cut  # counting alone would have skipped lines 5..8
        assert parser.replay_missed


def test_rotation_inside_a_burst_that_kept_our_last_line() -> None:
    stamps = [BASE + 2] * 10
    texts = [b"line %d" % i for i in range(10)]
    cursor = delivered_cursor(render(stamps[:6], texts[:6]))
    out, parser = parse_all(cursor, [render(stamps[4:], texts[4:])])  # lines 0..3 rotated away
    assert out == texts[6:]
    assert not parser.replay_missed  # nothing after our last line was lost


def test_a_clean_end_inside_the_burst_settles_by_counting() -> None:
    stamps = [BASE + 2] * 6
    texts = [b"line %d" % i for i in range(6)]
    cursor = delivered_cursor(render(stamps[:4], texts[:4]))
    out, _ = parse_all(cursor.copy(), [render(stamps[:2], texts[:2])])  # cut before our last line
    assert out == []
    cursor.last_line_crc = None  # a cursor saved before checksums existed: counting as before
    out, _ = parse_all(cursor, [render(stamps, texts)])
    assert out == texts[4:]


def test_a_stream_ending_on_our_last_line_after_the_burst_lost_its_head() -> None:
    """A rotation kept only the burst's tail, and the log ends there: all replays, nothing missed."""
    stamps = [BASE + 2] * 4
    texts = [b"line %d" % i for i in range(4)]
    cursor = delivered_cursor(render(stamps, texts))
    for kept in (1, 3):
        tail = render(stamps[-kept:], texts[-kept:])
        for cut in (5, len(tail)):
            c = cursor.copy()
            out, parser = parse_all(c, [tail[i:i + cut] for i in range(0, len(tail), cut)])
            assert out == [] and not parser.replaying, (kept, cut)
            assert parser.duplicates == kept and not c.replay_missed()
            assert c.delivered == 4 and c.count_at_last == 4  # the cursor did not move


def test_lines_after_a_copy_of_our_last_line_at_a_clean_end_are_not_taken_on_its_word() -> None:
    """The end may be a cut, and among repeated texts a copy need not be ours: count, as before.

    Counting then says the replay lacks lines, and the follower rereads, then marks a gap:
    a visible gap rather than a line delivered twice.
    """
    stamps = [BASE + 2] * 8
    texts = [b"a", b"b", b"a", b"b", b"a", b"b", b"c", b"d"]
    cursor = delivered_cursor(render(stamps[:6], texts[:6]))
    out, parser = parse_all(cursor, [render(stamps[4:], texts[4:])])
    assert out == [] and parser.replaying and cursor.replay_missed()
    assert cursor.delivered == 6


def test_cursor_checksum_survives_json() -> None:
    cursor = delivered_cursor(render([BASE, BASE + 5]))
    assert cursor.last_line_crc is not None
    assert LogCursor.from_json(cursor.to_json()) == cursor
    old = {"container_id": "c", "last_ts_ns": 5, "count_at_last": 1}  # saved before checksums existed
    assert LogCursor.from_json(old).last_line_crc is None
