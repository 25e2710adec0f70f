"""Where a container's log was read up to, and the exact resume rule.

The apiserver passes ``sinceTime`` to the kubelet in whole seconds, so a resume
replays the rest of that second, and several lines may carry the very same
timestamp. A cursor therefore remembers the last delivered timestamp *and* how
many delivered lines carried it. A replayed line is skipped when it is older
than the cursor, or when it is one of the first ``count`` lines at the cursor's
own timestamp.

A cursor also keeps a checksum of the last delivered line. If the log file was
rotated in the middle of a burst of lines sharing the cursor's timestamp, the
new file holds fewer of them than were delivered, and counting alone would skip
new lines as replays; finding (or not finding) the last line by its checksum
tells where the new lines start (see ``lines.StreamParser``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from podmortem.logs import timestamps

NS_PER_SECOND = timestamps.NS_PER_SECOND


@dataclass
class LogCursor:
    """Resume point of one container instance's log. Serializable to JSON, so it can persist."""

    #: The container instance (``containerID`` from the pod status); a new one starts a new log.
    container_id: str | None = None
    #: Timestamp of the last delivered line, in integer nanoseconds since the epoch.
    last_ts_ns: int | None = None
    #: How many delivered lines carried exactly ``last_ts_ns``.
    count_at_last: int = 0
    #: Lines delivered from this container instance in all.
    delivered: int = 0
    #: CRC-32 of the last delivered line as the API sent it (``<stamp> <text>``, no newline);
    #: None when unknown (cursors saved before it existed, or inherited across a restart).
    last_line_crc: int | None = None
    #: Working state of one replay: lines seen at ``last_ts_ns`` since the last reconnect.
    _replay_seen: int = field(default=0, repr=False, compare=False)

    def since_time_param(self) -> str | None:
        """The ``sinceTime`` query value to resume from: RFC3339 in whole seconds, rounded down."""
        if self.last_ts_ns is None:
            return None
        return timestamps.format_seconds(self.last_ts_ns)

    def begin_replay(self) -> None:
        """Call at every (re)connect, before the first line of the new stream."""
        self._replay_seen = 0

    def is_replayed(self, ts_ns: int) -> bool:
        """Whether a line with this timestamp was delivered before (counting it if so).

        Lines must be offered in stream order. A False answer leaves the cursor as
        it was: the caller then delivers the line and advances the cursor.
        """
        last = self.last_ts_ns
        if last is None or ts_ns > last:
            return False
        if ts_ns < last:
            return True
        if self._replay_seen < self.count_at_last:
            self._replay_seen += 1
            return True
        return False

    def accept(self, ts_ns: int) -> bool:
        """Decide whether a complete line with this timestamp is new; if so, advance past it.

        Lines must be offered in stream order. Returns False for a replayed duplicate.
        """
        if self.is_replayed(ts_ns):
            return False
        if ts_ns == self.last_ts_ns:
            self.count_at_last += 1
        else:
            self.last_ts_ns = ts_ns
            self.count_at_last = 1
        self._replay_seen = self.count_at_last
        self.delivered += 1
        self.last_line_crc = None  # the line's bytes are not known here
        return True

    def replay_reached_last(self) -> None:
        """The replay just passed the last delivered line itself (found by its checksum)."""
        self._replay_seen = self.count_at_last

    def replay_missed(self) -> bool:
        """Whether the replay so far lacks lines we delivered at ``last_ts_ns``.

        Asked when the first new line of a reconnect arrives. ``sinceTime`` is the
        cursor's second rounded down, so a complete log file replays every line
        at ``last_ts_ns`` first; when they are missing, the file was rotated while
        we were away, and lines between the two may be lost.
        """
        return self.last_ts_ns is not None and self._replay_seen < self.count_at_last

    def advance_block(self, *, last_ts_ns: int, trailing: int, count: int,
                      last_line_crc: int | None = None) -> None:
        """Advance past ``count`` new lines at once (the fast path, once the replay is over).

        ``trailing`` is how many of them, at the end, carry ``last_ts_ns``.
        Timestamps within one container's log never go back, so this equals
        calling :meth:`accept` for each line.
        """
        if trailing == count and last_ts_ns == self.last_ts_ns:
            self.count_at_last += count
        else:
            self.last_ts_ns = last_ts_ns
            self.count_at_last = trailing
        self._replay_seen = self.count_at_last
        self.delivered += count
        self.last_line_crc = last_line_crc

    def copy(self) -> LogCursor:
        """A snapshot to persist or hand over; the follower keeps advancing its own."""
        return LogCursor(
            container_id=self.container_id,
            last_ts_ns=self.last_ts_ns,
            count_at_last=self.count_at_last,
            delivered=self.delivered,
            last_line_crc=self.last_line_crc,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "container_id": self.container_id,
            "last_ts_ns": self.last_ts_ns,
            "count_at_last": self.count_at_last,
            "delivered": self.delivered,
            "last_line_crc": self.last_line_crc,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LogCursor:
        return cls(
            container_id=data.get("container_id"),
            last_ts_ns=data.get("last_ts_ns"),
            count_at_last=int(data.get("count_at_last", 0)),
            delivered=int(data.get("delivered", 0)),
            last_line_crc=data.get("last_line_crc"),
        )
