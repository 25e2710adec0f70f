import pytest

from podmortem.logs import timestamps

BASE = 1_714_564_800 * 1_000_000_000  # 2024-05-01T12:00:00Z


@pytest.mark.parametrize(("stamp", "expected"), [
    (b"2024-05-01T12:00:00Z", BASE),
    (b"2024-05-01T12:00:00.5Z", BASE + 500_000_000),
    (b"2024-05-01T12:00:00.000001Z", BASE + 1_000),
    (b"2024-05-01T12:00:00.123456789Z", BASE + 123_456_789),
    (b"2024-05-01T12:00:00.1234567891234Z", BASE + 123_456_789),
    (b"2024-05-01T14:00:00.25+02:00", BASE + 250_000_000),
    (b"2024-05-01T10:30:00-01:30", BASE),
])
def test_parse_any_fraction_width_and_zone(stamp: bytes, expected: int) -> None:
    assert timestamps.parse_ns(stamp) == expected


BAD_STAMPS = [
    b"", b"hello", b"2024-05-01T12:00:00", b"2024-05-01T12:00:00.Z",
    b"2024-05-01T12:00:00.1", b"2024-13-01T12:00:00Z", b"2024-05-01 12:00:00Z",
]


@pytest.mark.parametrize("stamp", BAD_STAMPS)
def test_bad_stamps_are_refused(stamp: bytes) -> None:
    with pytest.raises(timestamps.BadTimestamp):
        timestamps.parse_ns(stamp)


def test_format_round_trips() -> None:
    ts = BASE + 7
    assert timestamps.format_ns(ts) == "2024-05-01T12:00:00.000000007Z"
    assert timestamps.parse_ns(timestamps.format_ns(ts).encode()) == ts
    assert timestamps.format_seconds(ts + 999_999_990) == "2024-05-01T12:00:00Z"
