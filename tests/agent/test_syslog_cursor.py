"""The syslog(2) cursor on recorded READ_ALL text: what is new, restarts, same-timestamp lines, wraps."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from podmortem.kernel import syslog_cursor as sc
from podmortem.kernel.oom_parser import parse_lines

#: A real SYSLOG_ACTION_READ_ALL excerpt from this machine: the tail of one OOM record (its header
#: already overwritten, as at the start of a wrapped buffer) and one whole record. Several lines
#: share a microsecond timestamp.
RECORDED = (Path(__file__).parent / "data/syslog-read-all-oom.txt").read_text()
BOOT = "5c0a0c8e-0000-4000-8000-000000000001"


def _lines(text: str) -> list[str]:
    return sc.split_lines(text)


def _text(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def test_parse_line_forms() -> None:
    line = sc.parse_line("<6>[ 2930.506050] oom-kill:constraint=CONSTRAINT_MEMCG,task=python")
    assert (line.prio, line.ts_us, line.message) == (
        6,
        2930506050,
        "oom-kill:constraint=CONSTRAINT_MEMCG,task=python",
    )
    assert line.dmesg_line() == "[ 2930.506050] oom-kill:constraint=CONSTRAINT_MEMCG,task=python"
    caller = sc.parse_line("<4>[    5.000001][  T1234] python invoked oom-killer: gfp_mask=0xcc0")
    assert (caller.ts_us, caller.message) == (5_000_001, "python invoked oom-killer: gfp_mask=0xcc0")
    cpu = sc.parse_line("<6>[    0.100000][    C1] hello")
    assert cpu.message == "hello"
    # A task-table row starts with "[" too: it is message text, not a timestamp.
    row = sc.parse_line("<6>[  17.000000] [  17924]     0 17924    28215 python")
    assert row.message == "[  17924]     0 17924    28215 python"
    bare = sc.parse_line("<6>printk.time=0 line")
    assert (bare.prio, bare.ts_us, bare.message, bare.dmesg_line()) == (
        6,
        None,
        "printk.time=0 line",
        "printk.time=0 line",
    )
    odd = sc.parse_line("<x>[abc] not a prefix")
    assert (odd.prio, odd.ts_us, odd.message) == (None, None, "<x>[abc] not a prefix")


def test_split_lines_drops_an_incomplete_last_line() -> None:
    assert sc.split_lines("<6>[ 1.000000] a\n<6>[ 1.000001] b\n<6>[ 1.0") == [
        "<6>[ 1.000000] a",
        "<6>[ 1.000001] b",
    ]
    assert sc.split_lines("") == []


def test_recorded_snapshot_feeds_the_oom_parser() -> None:
    found = sc.diff(RECORDED, None, boot_id=BOOT)
    records = parse_lines(line.dmesg_line() for line in found.lines)
    assert [(r.victim_pid, r.task_memcg) for r in records] == [
        (17924, "/podmortem-test-4a6722ff345f"),
        (18017, "/podmortem-test-4a6722ff345f"),
    ]
    assert records[0].missing == ["header"] and records[1].missing == []
    assert records[1].monotonic_s == 2930.505474


def test_first_start_skips_history_then_takes_only_new_lines() -> None:
    lines = _lines(RECORDED)
    old, new = lines[:40], lines[40:]
    cursor = sc.end_cursor(_text(old), boot_id=BOOT)
    assert cursor is not None
    assert sc.diff(_text(old), cursor, boot_id=BOOT).lines == []
    found = sc.diff(_text(lines), cursor, boot_id=BOOT)
    assert [line.raw for line in found.lines] == new and found.gap is None
    assert found.cursor == sc.end_cursor(_text(lines), boot_id=BOOT)
    # Polling again gives nothing, with the cursor unchanged.
    again = sc.diff(_text(lines), found.cursor, boot_id=BOOT)
    assert again.lines == [] and again.cursor == found.cursor


def test_cursor_inside_a_group_of_lines_with_one_timestamp() -> None:
    lines = _lines(RECORDED)
    stamps = [sc.parse_line(raw).ts_us for raw in lines]
    # The first line of a pair sharing one microsecond: the cursor must not skip the second.
    first_of_pair = next(i for i in range(len(lines) - 1) if stamps[i] == stamps[i + 1])
    cursor = sc.end_cursor(_text(lines[: first_of_pair + 1]), boot_id=BOOT)
    assert cursor is not None and cursor.count == 1
    found = sc.diff(RECORDED, cursor, boot_id=BOOT)
    assert [line.raw for line in found.lines] == lines[first_of_pair + 1 :]
    # Identical lines with one timestamp are told apart by their ordinal.
    dup = "<6>[   10.000000] same"
    two = sc.end_cursor(_text([dup, dup]), boot_id=BOOT)
    assert two is not None and two.count == 2
    assert [line.raw for line in sc.diff(_text([dup, dup, dup]), two, boot_id=BOOT).lines] == [dup]
    one = sc.end_cursor(_text([dup]), boot_id=BOOT)
    assert [line.raw for line in sc.diff(_text([dup, dup, dup]), one, boot_id=BOOT).lines] == [dup, dup]


def test_wrap_past_the_cursor_reports_a_gap() -> None:
    lines = _lines(RECORDED)
    cursor = sc.end_cursor(_text(lines[:10]), boot_id=BOOT)
    assert cursor is not None
    # The ring buffer overwrote everything up to line 30 before the next poll.
    found = sc.diff(_text(lines[30:]), cursor, boot_id=BOOT)
    assert [line.raw for line in found.lines] == lines[30:]
    assert found.gap is not None and found.gap.reason == "wrapped"
    first_left = sc.parse_line(lines[30]).ts_us
    assert (found.gap.after_ts_us, found.gap.before_ts_us) == (cursor.ts_us, first_left)
    assert found.gap.estimated_lines >= 1
    assert "may have been overwritten" in found.gap.describe()


def test_wrap_inside_the_cursor_group_keeps_the_cursor() -> None:
    a, b, c = "<6>[    7.000000] a", "<6>[    7.000000] b", "<6>[    7.000000] c"
    cursor = sc.end_cursor(_text(["<6>[    6.000000] z", a, b]), boot_id=BOOT)
    assert cursor is not None and cursor.count == 2
    # "z" and "a" were overwritten: the buffer now starts at "b", the cursor line.
    found = sc.diff(_text([b, c, "<6>[    8.000000] d"]), cursor, boot_id=BOOT)
    assert [line.raw for line in found.lines] == [c, "<6>[    8.000000] d"] and found.gap is None


def test_another_boot_reads_everything() -> None:
    cursor = sc.end_cursor(RECORDED, boot_id="old-boot")
    found = sc.diff(RECORDED, cursor, boot_id=BOOT)
    assert len(found.lines) == len(_lines(RECORDED)) and found.gap is None


def test_cleared_buffer_waits_for_new_lines() -> None:
    lines = _lines(RECORDED)
    cursor = sc.end_cursor(RECORDED, boot_id=BOOT)
    assert sc.diff("", cursor, boot_id=BOOT).lines == []
    # Older lines only (the cursor's own line gone): nothing new yet.
    assert sc.diff(_text(lines[:5]), cursor, boot_id=BOOT) == sc.Diff([], cursor)


def test_lines_without_timestamps_take_the_previous_one() -> None:
    text = _text(["<6>[    1.000000] a", "<6>b", "<6>c"])
    cursor = sc.end_cursor(text, boot_id=BOOT)
    assert cursor is not None and (cursor.ts_us, cursor.count) == (1_000_000, 3)
    found = sc.diff(text + "<6>d\n", cursor, boot_id=BOOT)
    assert [line.raw for line in found.lines] == ["<6>d"]


def test_cursor_json_round_trip() -> None:
    cursor = sc.SyslogCursor(boot_id=BOOT, ts_us=5, digest="ab", count=2)
    assert sc.SyslogCursor.from_json(cursor.to_json()) == cursor
    for bad in (
        None,
        {},
        {"boot_id": "b", "ts_us": "x", "digest": "d", "count": 1},
        [1],
        {**cursor.to_json(), "count": 0},
    ):
        assert sc.SyslogCursor.from_json(bad) is None


@settings(max_examples=150, deadline=None)
@given(
    # Per poll: how many lines the kernel writes, and how many of them share the previous timestamp.
    steps=st.lists(st.tuples(st.integers(0, 25), st.integers(0, 3)), min_size=1, max_size=25),
    capacity=st.integers(3, 30),
)
def test_every_line_once_in_order_or_a_gap_says_so(steps: list[tuple[int, int]], capacity: int) -> None:
    """A ring of ``capacity`` lines, polled between bursts: lines are delivered once, in order, and a
    line is missing only from a poll that reported a gap."""
    produced: list[str] = []
    buffer = ["<6>[    0.500000] before the agent started"]
    ts = 1_000_000
    serial = 0
    cursor = sc.end_cursor(_text(buffer), boot_id=BOOT)
    delivered: list[str] = []
    missing_ok = set(buffer)  # history from before the start is not for the agent to deliver
    for burst, same in steps:
        for i in range(burst):
            if i >= same:
                ts += 17
            serial += 1
            line = f"<6>[{ts // 1_000_000:5d}.{ts % 1_000_000:06d}] line {serial}"
            produced.append(line)
            buffer.append(line)
        overwritten = buffer[:-capacity] if len(buffer) > capacity else []
        del buffer[: len(buffer) - capacity if len(buffer) > capacity else 0]
        found = sc.diff(_text(buffer), cursor, boot_id=BOOT)
        if found.gap is not None:
            missing_ok.update(overwritten)
        got = [line.raw for line in found.lines]
        delivered.extend(got)
        if got:
            assert found.cursor == sc.end_cursor(_text(buffer), boot_id=BOOT)
        cursor = found.cursor
        # Lines overwritten without being delivered, without a gap, would be silent loss.
        seen = set(delivered)
        assert not [line for line in overwritten if line not in seen and line not in missing_ok]
    assert len(delivered) == len(set(delivered)), "a line was delivered twice"
    order = {line: i for i, line in enumerate(produced)}
    assert [order[line] for line in delivered] == sorted(order[line] for line in delivered)
    assert set(produced) - set(delivered) <= missing_ok
