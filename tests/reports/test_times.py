"""One RFC 3339 parser and printer for pod statuses, reports and timelines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from podmortem.reports.times import parse_time, rfc3339, rfc3339_or_none


def test_the_forms_the_api_and_reports_write() -> None:
    at = datetime(2024, 5, 1, 10, 0, 0, tzinfo=UTC)
    assert parse_time("2024-05-01T10:00:00Z") == at
    assert parse_time("2024-05-01T12:00:00+02:00") == at
    assert parse_time("2024-05-01T10:00:00.123456Z") == at + timedelta(microseconds=123456)
    assert parse_time("2024-05-01T10:00:00") == at  # no offset: UTC, never a naive time
    assert parse_time(datetime(2024, 5, 1, 10)) == at
    assert parse_time(at) is at


def test_anything_else_is_none() -> None:
    for value in (None, "", "yesterday", "2024-13-01T00:00:00Z", 1714557600, b"2024-05-01T10:00:00Z", [], {}):
        assert parse_time(value) is None
    assert rfc3339_or_none(None) is None


@given(st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9999, 12, 30),
                    timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)),
                                               timezone(timedelta(hours=-8))])))
def test_printed_times_read_back_to_the_same_second(at: datetime) -> None:
    text = rfc3339(at)
    assert text.endswith("Z") and len(text) == 20
    back = parse_time(text)
    assert back is not None and back == at.replace(microsecond=0)
    assert rfc3339_or_none(at) == text
