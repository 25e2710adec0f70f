"""RFC3339 timestamps of ``timestamps=true`` log lines, parsed to integer nanoseconds.

This is on the hot path (once per chunk, and once per line while replaying), so
it avoids ``datetime.strptime`` per line: the ``YYYY-MM-DDTHH:MM:SS`` prefix is
turned into epoch seconds once and cached (a log has few distinct seconds per
chunk), and the fraction digits are read directly, whatever their width.
"""

from __future__ import annotations

import calendar
import time

from podmortem.errors import PodmortemError

NS_PER_SECOND = 1_000_000_000

#: Bounded cache of ``YYYY-MM-DDTHH:MM:SS`` -> epoch seconds (UTC, before any offset).
_SECONDS: dict[bytes, int] = {}
_SECONDS_MAX = 4096
_POW10 = [10 ** (9 - n) for n in range(10)]


class BadTimestamp(PodmortemError, ValueError):
    """The bytes before the first space of a line are not an RFC3339 timestamp."""


def _seconds(prefix: bytes) -> int:
    try:
        return _SECONDS[prefix]
    except KeyError:
        pass
    try:
        parsed = time.strptime(prefix.decode("ascii"), "%Y-%m-%dT%H:%M:%S")
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadTimestamp(f"not an RFC3339 timestamp: {prefix!r}") from exc
    seconds = calendar.timegm(parsed)
    if len(_SECONDS) >= _SECONDS_MAX:
        _SECONDS.clear()
    _SECONDS[prefix] = seconds
    return seconds


def parse_ns(stamp: bytes) -> int:
    """Parse ``2024-05-01T12:00:00.123456789Z`` (any fraction width, ``Z`` or ``±HH:MM``) to ns."""
    if len(stamp) == 30 and stamp[29] == 0x5A and stamp[19] == 0x2E:
        # The runtime's own format (9 digits, UTC): one dict lookup and one int().
        seconds = _SECONDS.get(stamp[:19])
        if seconds is None:
            seconds = _seconds(stamp[:19])
        if stamp[20:29].isdigit():
            return seconds * NS_PER_SECOND + int(stamp[20:29])
    if len(stamp) < 20:
        raise BadTimestamp(f"not an RFC3339 timestamp: {stamp!r}")
    seconds = _seconds(stamp[:19])
    pos = 19
    frac_ns = 0
    if stamp[19] == 0x2E:  # "."
        end = 20
        size = len(stamp)
        while end < size and 0x30 <= stamp[end] <= 0x39:
            end += 1
        digits = stamp[20:end]
        if not digits:
            raise BadTimestamp(f"empty fraction in timestamp: {stamp!r}")
        if len(digits) > 9:
            digits = digits[:9]  # finer than ns: truncate, as Go does when formatting
        frac_ns = int(digits) * _POW10[len(digits)]
        pos = end
    zone = stamp[pos:]
    if zone == b"Z" or zone == b"z":
        offset = 0
    elif len(zone) == 6 and zone[0] in b"+-" and zone[3] == 0x3A:
        hours, minutes = zone[1:3], zone[4:6]
        # bytes.isdigit() is ASCII-only; int() alone would also take b" 1", b"-1" and b"+1".
        if not (hours.isdigit() and minutes.isdigit()):
            raise BadTimestamp(f"bad zone offset in timestamp: {stamp!r}")
        offset = int(hours) * 3600 + int(minutes) * 60
        if zone[0] == 0x2B:  # "+": local time is ahead of UTC
            offset = -offset
    else:
        raise BadTimestamp(f"bad zone in timestamp: {stamp!r}")
    return (seconds + offset) * NS_PER_SECOND + frac_ns


def format_ns(ts_ns: int) -> str:
    """Format ns since the epoch as RFC3339 with 9 fraction digits, as the container runtime does."""
    seconds, frac = divmod(ts_ns, NS_PER_SECOND)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{frac:09d}Z"


def format_seconds(ts_ns: int) -> str:
    """Format as RFC3339 in whole seconds, rounded down: the only precision ``sinceTime`` keeps."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts_ns // NS_PER_SECOND))
