"""Faults the emulated kubelet injects into log requests and pod reads, one per request.

Each container has a queue of faults; every log request takes the next one
(none: served normally). Faults that cut a stream "after N lines" count lines
of that response, and ``extra_bytes`` then sends the first bytes of the next
line, so a cut can fall inside a line or a multi-byte character.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EofAfter:
    """End the response cleanly after ``lines`` lines (+ ``extra_bytes`` of the next one)."""

    lines: int
    extra_bytes: int = 0


@dataclass(frozen=True)
class EofAfterSeconds:
    """End the response cleanly after this many seconds, like the kubelet's 4-hour cut."""

    seconds: float


@dataclass(frozen=True)
class Stall:
    """Send ``after_lines`` lines (+ ``extra_bytes``), then nothing until the client gives up."""

    after_lines: int = 0
    extra_bytes: int = 0


@dataclass(frozen=True)
class Reset:
    """Send ``after_lines`` lines (+ ``extra_bytes``), then abort the TCP connection."""

    after_lines: int = 0
    extra_bytes: int = 0


@dataclass(frozen=True)
class HttpError:
    """Answer with this status (500, 503, 429...) and, if given, a ``Retry-After`` header."""

    status: int
    retry_after: float | None = None


@dataclass(frozen=True)
class Rotate:
    """Before serving, write ``write_before`` lines and rotate the file: all earlier lines are gone.

    The follower is disconnected at that moment, so the lines it had not read yet are lost.
    ``keep`` lines at the end stay in the new file: the runtime wrote them after the switch,
    so a rotation can fall inside a burst of lines that share one timestamp.
    """

    write_before: int = 0
    keep: int = 0


@dataclass(frozen=True)
class Restart:
    """Serve ``after_lines`` lines, then the container restarts: the stream ends, a new instance
    (new containerID) starts with ``new_lines`` lines; unread lines stay in the old instance."""

    after_lines: int = 0
    new_lines: int = 0


@dataclass(frozen=True)
class Delete:
    """Serve ``after_lines`` lines, then delete the pod: the stream ends, reads answer 404."""

    after_lines: int = 0


@dataclass(frozen=True)
class Write:
    """Before serving, the container writes ``lines`` more lines (e.g. while the follower was away)."""

    lines: int


LogFault = EofAfter | EofAfterSeconds | Stall | Reset | HttpError | Rotate | Restart | Delete | Write
