import json

from podmortem.logs.cursor import LogCursor


def test_fresh_cursor_takes_everything_and_has_no_since() -> None:
    cursor = LogCursor()
    assert cursor.since_time_param() is None
    assert [cursor.accept(t) for t in (5, 5, 7)] == [True, True, True]
    assert (cursor.last_ts_ns, cursor.count_at_last, cursor.delivered) == (7, 1, 3)


def test_replay_skips_older_and_the_delivered_lines_at_the_same_timestamp() -> None:
    cursor = LogCursor()
    for t in (1, 2, 2, 2):
        cursor.accept(t)
    cursor.begin_replay()
    # The replay restarts at the whole second: 1, then the three lines at 2, then a fourth at 2.
    assert [cursor.accept(t) for t in (1, 2, 2, 2, 2, 3)] == [False, False, False, False, True, True]
    assert cursor.delivered == 6


def test_replay_missing_delivered_lines_is_noticed() -> None:
    cursor = LogCursor()
    for t in (2, 2):
        cursor.accept(t)
    cursor.begin_replay()
    assert cursor.is_replayed(2)
    assert cursor.replay_missed()  # only one of the two lines at ts=2 came back
    assert not cursor.is_replayed(3)


def test_complete_replay_is_not_a_gap() -> None:
    cursor = LogCursor()
    cursor.accept(2)
    cursor.begin_replay()
    assert cursor.is_replayed(2)
    assert not cursor.replay_missed()


def test_advance_block_equals_accepting_each_line() -> None:
    by_line, by_block = LogCursor(), LogCursor()
    for t in (1, 4, 4, 4):
        by_line.accept(t)
    by_block.advance_block(last_ts_ns=4, trailing=3, count=4)
    assert by_line == by_block
    for t in (4, 4):
        by_line.accept(t)
    by_block.advance_block(last_ts_ns=4, trailing=2, count=2)
    assert by_line == by_block and by_block.count_at_last == 5


def test_serializes_through_json_and_since_rounds_down() -> None:
    cursor = LogCursor(container_id="containerd://abc")
    cursor.accept(1_714_564_800_999_999_999)
    restored = LogCursor.from_json(json.loads(json.dumps(cursor.to_json())))
    assert restored == cursor
    assert restored.since_time_param() == "2024-05-01T12:00:00Z"
