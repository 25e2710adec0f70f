"""Times as the Kubernetes API and podmortem's reports write them (RFC 3339, UTC, ``Z``).

One parser and one printer for every module that reads a pod's status, a stored report or a
timeline, so that all of them read a naive time, and input that is not a string, the same way.
"""

from __future__ import annotations

from datetime import UTC, datetime


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 time (``2024-05-01T10:00:00Z``, fractions and offsets allowed), always aware
    (a time without an offset is taken as UTC); a datetime as it is; None when absent or malformed.
    """
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value:
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def rfc3339(at: datetime) -> str:
    """Whole seconds in UTC with ``Z``: how reports and the API write times."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_or_none(at: datetime | None) -> str | None:
    return rfc3339(at) if at is not None else None
