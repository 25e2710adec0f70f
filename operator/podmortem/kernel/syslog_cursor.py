"""Where the agent stopped reading the kernel log through syslog(2), and what is new since then.

Where /dev/kmsg cannot be opened (a container runtime blocks the device unless
the container is privileged), the agent reads the kernel log with syslog(2)'s
``SYSLOG_ACTION_READ_ALL``: the whole ring buffer as text, one
``<prio>[seconds.micros] message`` line per record, with no sequence numbers and
without consuming anything. Each poll returns the same history plus whatever
is new, so the agent must find where it stopped.

The cursor is the last line handed over: its kernel timestamp, a digest of
the line, and its ordinal among the lines carrying that same timestamp (the
kernel can print several lines within one microsecond, and a multi-line
message repeats its prefix on every line). In a new snapshot the cursor line
is the ``count``-th line with that timestamp; everything after it, in buffer
order (not timestamp order: CPUs can log slightly out of order), is new.

When the ring buffer has wrapped past the cursor line, the line is gone: all
lines are new, and the lines between the cursor and the oldest one left may
have been overwritten unread. `Gap` says how much kernel time that covers
and estimates the lines. Sequence numbers restart at boot, timestamps too, so
the cursor carries the boot id, as the /dev/kmsg position does.

Pure: text in, lines and cursors out; no syscalls, no files, no clock.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: A timestamp-less line gets the timestamp of the line before it; at the very start this one.
NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class SyslogLine:
    """One line of ``SYSLOG_ACTION_READ_ALL`` output."""

    raw: str
    #: Syslog priority with facility (``<6>`` → 6), None when the line has no ``<N>`` prefix.
    prio: int | None
    #: Kernel timestamp in microseconds since boot, None without ``[seconds.micros]``.
    ts_us: int | None
    #: The message with the prefix (priority, timestamp, caller id) removed.
    message: str

    def dmesg_line(self) -> str:
        """The line as ``dmesg`` prints it, which the forensics OOM parser reads."""
        if self.ts_us is None:
            return self.message
        seconds, micros = divmod(self.ts_us, 1_000_000)
        return f"[{seconds:5d}.{micros:06d}] {self.message}"


def _parse_ts(text: str) -> int | None:
    """``"  123.456789"`` → 123456789 µs; None when it is not a kernel timestamp."""
    whole, dot, frac = text.strip().partition(".")
    if not dot or not whole.isdigit() or not frac.isdigit():
        return None
    return int(whole) * 1_000_000 + int(frac[:6].ljust(6, "0"))


def parse_line(raw: str) -> SyslogLine:
    """Split ``<6>[  123.456789][  T123] message`` into its parts; odd lines keep their text."""
    rest = raw
    prio: int | None = None
    if rest.startswith("<"):
        end = rest.find(">", 1, 6)
        if end > 1 and rest[1:end].isdigit():
            prio, rest = int(rest[1:end]), rest[end + 1 :]
    ts: int | None = None
    if rest.startswith("["):
        end = rest.find("]", 1, 24)
        if end > 0:
            ts = _parse_ts(rest[1:end])
            if ts is not None:
                rest = rest[end + 1 :]
                # CONFIG_PRINTK_CALLER adds the caller: "[  T1234]" (task) or "[  C3]" (CPU).
                if rest.startswith("["):
                    close = rest.find("]", 1, 16)
                    inner = rest[1:close].strip() if close > 0 else ""
                    if inner[:1] in ("T", "C") and inner[1:].isdigit():
                        rest = rest[close + 1 :]
                if rest.startswith(" "):
                    rest = rest[1:]
    return SyslogLine(raw=raw, prio=prio, ts_us=ts, message=rest)


def split_lines(text: str) -> list[str]:
    """Complete lines of a READ_ALL snapshot; a trailing piece without its newline is dropped."""
    lines = text.split("\n")
    lines.pop()  # "" after the final newline, or an incomplete last line
    return [line for line in lines if line]


def digest(raw: str) -> str:
    """A stable digest of one line (Python's ``hash`` changes between processes)."""
    return hashlib.blake2b(raw.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


@dataclass(frozen=True, slots=True)
class SyslogCursor:
    """The last line handed over: (timestamp, digest, ordinal among lines with that timestamp)."""

    boot_id: str
    #: Effective kernel timestamp (µs) of the line; `NO_TIMESTAMP` before any stamped line.
    ts_us: int
    digest: str
    #: 1 for the first line with this timestamp in the buffer, 2 for the second, ...
    count: int

    def to_json(self) -> dict[str, Any]:
        return {"boot_id": self.boot_id, "ts_us": self.ts_us, "digest": self.digest, "count": self.count}

    @classmethod
    def from_json(cls, data: Any) -> SyslogCursor | None:
        """None for anything malformed: the caller then starts afresh."""
        try:
            cursor = cls(str(data["boot_id"]), int(data["ts_us"]), str(data["digest"]), int(data["count"]))
        except (KeyError, TypeError, ValueError):
            return None
        return cursor if cursor.count >= 1 else None


@dataclass(frozen=True, slots=True)
class Gap:
    """Lines that may have been overwritten before they were read (the buffer wrapped past the cursor)."""

    #: "wrapped": the oldest line left is newer than the cursor; "cursor-mismatch": the cursor's line
    #: is not where it should be (e.g. the buffer was cleared with ``dmesg -C``).
    reason: str
    #: Kernel time (µs) of the cursor line, and of the first line read after it.
    after_ts_us: int
    before_ts_us: int
    #: Rough count of lines that may be lost: the time span times this snapshot's line rate.
    estimated_lines: int

    @property
    def span_s(self) -> float:
        return max(0, self.before_ts_us - self.after_ts_us) / 1e6

    def describe(self) -> str:
        return (
            f"kernel log between {self.after_ts_us / 1e6:.6f} s and {self.before_ts_us / 1e6:.6f} s "
            f"since boot ({self.span_s:.1f} s, about {self.estimated_lines} lines) may have been "
            f"overwritten before it was read ({self.reason})"
        )


@dataclass(frozen=True, slots=True)
class Diff:
    """What one snapshot adds: new lines in buffer order, the cursor after them, and any gap."""

    lines: list[SyslogLine]
    cursor: SyslogCursor | None
    gap: Gap | None = None


#: How far back (µs) of the cursor's timestamp lines are looked at: CPUs log a few microseconds out
#: of order, never a second, so older lines cannot hold the cursor's line nor come after it.
_REORDER_SLACK_US = 1_000_000


def _effective(parsed: Sequence[SyslogLine], before: int = NO_TIMESTAMP) -> list[int]:
    """Timestamps with timestamp-less lines taking the one before them (``before`` for the first)."""
    result: list[int] = []
    last = before
    for line in parsed:
        if line.ts_us is not None:
            last = line.ts_us
        result.append(last)
    return result


def _region_start(raws: Sequence[str], ts_us: int) -> int:
    """Index after the newest line stamped clearly before ``ts_us`` (0: the whole buffer).

    Only lines from there on can be the cursor's line, share its timestamp, or be new; a poll
    therefore parses the buffer's tail, not the whole of it.
    """
    index = len(raws)
    while index > 0:
        ts = parse_line(raws[index - 1]).ts_us
        if ts is not None and ts < ts_us - _REORDER_SLACK_US:
            break
        index -= 1
    return index


def _region(raws: Sequence[str], ts_us: int) -> tuple[int, list[SyslogLine], list[int]]:
    start = _region_start(raws, ts_us)
    before = NO_TIMESTAMP if start == 0 else (parse_line(raws[start - 1]).ts_us or NO_TIMESTAMP)
    parsed = [parse_line(raw) for raw in raws[start:]]
    return start, parsed, _effective(parsed, before)


def _cursor_for(parsed: Sequence[SyslogLine], eff: Sequence[int], index: int, boot_id: str) -> SyslogCursor:
    ts = eff[index]
    count = sum(1 for i in range(index + 1) if eff[i] == ts)
    return SyslogCursor(boot_id=boot_id, ts_us=ts, digest=digest(parsed[index].raw), count=count)


def _last_cursor(raws: Sequence[str], boot_id: str) -> SyslogCursor:
    newest = parse_line(raws[-1]).ts_us
    if newest is None:  # timestamps off: count over the whole buffer
        parsed = [parse_line(raw) for raw in raws]
        eff = _effective(parsed)
    else:
        _, parsed, eff = _region(raws, newest)
    return _cursor_for(parsed, eff, len(parsed) - 1, boot_id)


def end_cursor(text: str, *, boot_id: str) -> SyslogCursor | None:
    """A cursor at the newest line (a first start skips history); None for an empty buffer."""
    raws = split_lines(text)
    return _last_cursor(raws, boot_id) if raws else None


def _find(
    parsed: Sequence[SyslogLine], eff: Sequence[int], cursor: SyslogCursor, *, buffer_start: bool
) -> int | None:
    """Index of the cursor line among ``parsed`` (the buffer's tail), or None when it is gone."""
    group = [i for i, ts in enumerate(eff) if ts == cursor.ts_us]
    if not group:
        return None
    if len(group) >= cursor.count and digest(parsed[group[cursor.count - 1]].raw) == cursor.digest:
        return group[cursor.count - 1]
    if buffer_start and group[0] == 0:
        # The buffer starts inside the cursor's group: its first lines were overwritten, so the
        # cursor line moved up by as many places. Take the nearest match (assume the fewest lost).
        for position in range(min(cursor.count, len(group)) - 1, -1, -1):
            if digest(parsed[group[position]].raw) == cursor.digest:
                return group[position]
    return None


def _line_rate(eff: Sequence[int]) -> float:
    """Lines per kernel second over this snapshot (0 when it spans no time)."""
    stamped = [ts for ts in eff if ts != NO_TIMESTAMP]
    if len(stamped) < 2 or stamped[-1] <= stamped[0]:
        return 0.0
    return (len(stamped) - 1) / ((stamped[-1] - stamped[0]) / 1e6)


def _ends_with(text: str, cursor: SyslogCursor) -> bool:
    """Whether the snapshot's newest line is the cursor's line, looking only at the buffer's tail.

    The digest covers the timestamp; the ordinal is checked too, by counting the lines with the
    cursor's timestamp from the end back to where the timestamps are clearly older.
    """
    end = len(text) - 1 if text.endswith("\n") else text.rfind("\n")
    count = 0
    first = True
    while end > 0:
        begin = text.rfind("\n", 0, end) + 1
        line = parse_line(text[begin:end])
        if line.ts_us is None:
            return False  # timestamps missing: leave it to the full comparison
        if first:
            if digest(line.raw) != cursor.digest:
                return False
            first = False
        if line.ts_us == cursor.ts_us:
            count += 1
        elif line.ts_us < cursor.ts_us - _REORDER_SLACK_US:
            break
        end = begin - 1
    return not first and count == cursor.count


def diff(text: str, cursor: SyslogCursor | None, *, boot_id: str) -> Diff:
    """The lines of a READ_ALL snapshot that come after ``cursor``.

    ``cursor`` None, or from another boot: every line is new (a boot's whole log is unread).
    The first start of an agent, which should skip history, uses `end_cursor` instead.
    """
    fresh = cursor is None or bool(boot_id and cursor.boot_id and cursor.boot_id != boot_id)
    if cursor is not None and not fresh and _ends_with(text, cursor):
        return Diff([], cursor)  # the common case, nothing new: no need to parse the buffer
    raws = split_lines(text)
    if not raws:
        return Diff([], cursor)
    if cursor is None or fresh:
        parsed = [parse_line(raw) for raw in raws]
        return Diff(parsed, _cursor_for(parsed, _effective(parsed), len(parsed) - 1, boot_id))
    if parse_line(raws[-1]).ts_us is None:
        start, parsed = 0, [parse_line(raw) for raw in raws]  # timestamps off: the whole buffer
        eff = _effective(parsed)
    else:
        start, parsed, eff = _region(raws, cursor.ts_us)
    if not parsed:
        return Diff([], cursor)  # every line is older than the cursor: wait for new ones
    last = _cursor_for(parsed, eff, len(parsed) - 1, boot_id)
    index = _find(parsed, eff, cursor, buffer_start=start == 0)
    if index is not None:
        return Diff(parsed[index + 1 :], last if index + 1 < len(parsed) else cursor)
    # The cursor's line is gone. When the oldest line left is not older than it, the ring buffer
    # wrapped: it drops the oldest lines first, so every line left came after the cursor's, and
    # what lay between may be lost. Otherwise the buffer is not what the cursor describes (cleared
    # and refilled, or an unnoticed reboot): take the lines stamped after the cursor.
    if start == 0 and eff[0] >= cursor.ts_us:
        first, reason = 0, "wrapped"
    else:
        later = [i for i, ts in enumerate(eff) if ts > cursor.ts_us]
        if not later:
            return Diff([], cursor)  # nothing newer yet: wait for new lines
        first, reason = later[0], "cursor-mismatch"
    span_us = max(0, eff[first] - cursor.ts_us)
    estimate = math.ceil(span_us / 1e6 * _line_rate(eff)) if span_us else 0
    gap = Gap(
        reason=reason, after_ts_us=cursor.ts_us, before_ts_us=eff[first], estimated_lines=max(1, estimate)
    )
    return Diff(parsed[first:], last, gap)
