"""Tunables of the log follower, each with its unit and the reason for its default."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FollowSettings:
    """How a follower reads, waits and retries. Defaults suit an operator following many pods."""

    #: Seconds without a single byte before a stream counts as dead and is reopened.
    #: Load balancers drop idle connections silently; without a read timeout a follower
    #: would wait forever on a dead socket. A reconnect costs one pod read and a replay of
    #: at most one second of lines, so 2 minutes keeps 1,000 quiet streams at ~8 requests/s.
    read_timeout_s: float = 120.0

    #: Seconds to wait for a TCP/TLS connection and the response headers of any request.
    connect_timeout_s: float = 30.0

    #: Seconds for a whole pod read (a small JSON object).
    pod_read_timeout_s: float = 30.0

    #: First back-off in seconds when the API is unreadable (5xx, 429, network) or a stream
    #: ends without progress; it doubles up to ``backoff_max_s`` and resets after progress.
    backoff_min_s: float = 2.0

    #: Ceiling of the back-off in seconds: a pod that comes back is picked up within this time.
    backoff_max_s: float = 30.0

    #: Each back-off is shortened by a random fraction up to this much, so that many followers
    #: cut at once (an apiserver restart) do not come back in lock-step.
    backoff_jitter: float = 0.5

    #: ``limitBytes`` for each log request, or None for no limit. The stream ends there even
    #: while following; the follower resumes from its cursor, so nothing is lost unless one
    #: line alone is longer than the limit (then that line is skipped and marked as a gap).
    limit_bytes: int | None = None

    #: ``tailLines`` for the very first request of a container without a cursor, or None for
    #: the whole log. Resumes always use the cursor, never this.
    tail_lines: int | None = None

    #: Reads of a terminated container that end with the same unfinished last line before
    #: that line is taken as the log's true end (a program that exited without a newline).
    final_partial_reads: int = 3

    #: Reads of the pod at the start (before any line was read) while the API is unreadable,
    #: before giving up with :class:`~podmortem.logs.errors.ApiUnavailable`; None: retry forever.
    #: An operator retries forever; the CLI gives up after a few (``podmortem logs`` at a dead
    #: address is more often a wrong kubeconfig than an API hiccup). Once following, errors are
    #: always retried.
    start_attempts: int | None = None

    def __post_init__(self) -> None:
        for name in ("read_timeout_s", "connect_timeout_s", "pod_read_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0 < self.backoff_min_s <= self.backoff_max_s:
            raise ValueError(
                f"the back-off needs 0 < min <= max, got {self.backoff_min_s} s and {self.backoff_max_s} s"
            )
        if not 0 <= self.backoff_jitter <= 1:
            raise ValueError(f"backoff_jitter must be 0..1, got {self.backoff_jitter}")
        if self.limit_bytes is not None and self.limit_bytes < 1:
            raise ValueError(f"limit_bytes must be positive or None, got {self.limit_bytes}")
        if self.tail_lines is not None and self.tail_lines < 0:
            raise ValueError(f"tail_lines must be 0 or more, or None, got {self.tail_lines}")
        if self.final_partial_reads < 1:
            raise ValueError(f"final_partial_reads must be at least 1, got {self.final_partial_reads}")
        if self.start_attempts is not None and self.start_attempts < 1:
            raise ValueError(f"start_attempts must be at least 1, or None, got {self.start_attempts}")

    def backoff(self, attempt: int) -> float:
        """The back-off before retry number ``attempt`` (0-based), before jitter."""
        return float(min(self.backoff_max_s, self.backoff_min_s * (2 ** min(attempt, 30))))
