"""Tunables of the log follower and the log server, each with its unit and the reason for its default."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from podmortem.connection_limits import ServerLimits
from podmortem.logs.tls import ServerCertificate


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

    #: Requests per second this process's followers make to the API on average (pod reads and log
    #: requests together), and how many may go at once: client-go's QPS and burst. An operator
    #: restarting over 10,000 pods (one stream each, no pod read when the watch delivered the pod)
    #: then opens their streams over about 18 s instead of all at once; a log request is a
    #: long-running request to the API server, proxied to the pod's kubelet. None: no limit (the CLI
    #: following one pod).
    api_qps: float | None = 500.0
    api_burst: int = 1000
    #: Log requests open at once, at most (each holds a socket; a follow holds it for hours): the
    #: followers' share of the open-files limit (``podmortem.open_files.budget``), set by the
    #: operator at start-up. Past it, followers wait for one another. None: no limit.
    max_connections: int | None = None
    #: Requests waiting for their answer's headers at once, at most (a connection being opened, a
    #: request sent; a stream until its first read's turn): every one of them can complete in the same
    #: event-loop iteration, and an operator starting over 10,000 pods had thousands do so, a stall of
    #: seconds. Past it, requests wait for one another; the streams once read are not counted. Too few
    #: would hold start-up to that many streams per API answer's time. None: no limit.
    max_setups: int | None = 256

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
        if self.api_qps is not None and (not self.api_qps > 0 or self.api_burst < 1):
            raise ValueError(f"api_qps must be positive (or None) and api_burst at least 1, got "
                             f"{self.api_qps} and {self.api_burst}")
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, or None, got {self.max_connections}")
        if self.max_setups is not None and self.max_setups < 1:
            raise ValueError(f"max_setups must be at least 1, or None, got {self.max_setups}")
        if self.start_attempts is not None and self.start_attempts < 1:
            raise ValueError(f"start_attempts must be at least 1, or None, got {self.start_attempts}")

    def backoff(self, attempt: int) -> float:
        """The back-off before retry number ``attempt`` (0-based), before jitter."""
        return float(min(self.backoff_max_s, self.backoff_min_s * (2 ** min(attempt, 30))))


@dataclass(frozen=True)
class HttpSettings:
    """How the log server listens, and the bounds that keep it inside the operator's memory limit.

    The server shares a process with kopf and every follower, so every reader is bounded: how many
    may read at once (in total and per caller), how much each holds (one read chunk), and how long
    a reader may leave a write unread before it is dropped.
    """

    #: Address to bind. Default all interfaces: the Service in front decides who reaches it.
    host: str = "0.0.0.0"
    #: TCP port. Default 8080, the usual unprivileged HTTP port (the chart's Service maps it).
    port: int = 8080
    #: Readers streaming at once, all callers together. Default 256: each holds at most about
    #: ``reading.READ_CHUNK`` twice (read and rendered) plus the socket buffer, ~1 MiB, so the whole
    #: server stays near 256 MiB in the worst case; beyond it a reader gets 429 and Retry-After.
    max_readers: int = 256
    #: Readers streaming at once per caller (the authenticated user, or the client address when
    #: authentication is off). Default 32: a dashboard following a job's pods, not a whole cluster.
    max_readers_per_caller: int = 32
    #: Seconds a reader may leave one write unread (a full socket buffer) before it is dropped.
    #: Default 60 s: far longer than any live client needs, short enough that stalled ones go.
    write_deadline_s: float = 60.0
    #: Header, body and idle deadlines, and connections per peer and in total
    #: (`podmortem.serving_limits`): a client that sends a header a byte at a time is cut after
    #: 10 s, and one address holds 64 connections at most, whatever it sends.
    connections: ServerLimits = field(default_factory=ServerLimits)
    #: Seconds open requests get to finish at shutdown, after following readers were told to stop.
    #: Default 2 s, so the whole operator stops well within the chart's 30 s grace period.
    shutdown_timeout_s: float = 2.0
    #: Failed authentications one client address may cause per minute before the tokens it sends
    #: that are not known good (accepted by a TokenReview within the auth cache's 30 s) get 429
    #: without a review. Default 300: at most 5 reviews a second per address, while the users
    #: behind one port-forward or ingress may each fail their own token budget ten times over.
    auth_failures_per_minute: int = 300
    #: Failed authentications one token (counted by its SHA-256) may have per minute before it
    #: gets 429 without a review, from any address. Default 30: a user retrying a stale token is
    #: told to stop, and only that token is refused, not the others sent from the same address.
    auth_failures_per_token_per_minute: int = 30
    #: Tokens, and addresses, whose failures are counted at most (10,000 of each take ~2.3 MB);
    #: the least recently failing goes first, so a sprayer of distinct tokens or addresses cannot
    #: grow the operator's memory.
    auth_failure_entries: int = 10_000
    #: PEM certificate chain and key: serve HTTPS instead of HTTP (both or neither).
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None

    def __post_init__(self) -> None:
        for name in ("max_readers", "max_readers_per_caller", "auth_failures_per_minute",
                     "auth_failures_per_token_per_minute", "auth_failure_entries"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.write_deadline_s > 0:
            raise ValueError(f"write_deadline_s must be positive, got {self.write_deadline_s}")
        if self.shutdown_timeout_s < 0:
            raise ValueError(f"shutdown_timeout_s must be >= 0, got {self.shutdown_timeout_s}")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("TLS needs both a certificate file and a key file")

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert_file is not None else "http"

    def certificate(self) -> ServerCertificate | None:
        """The server's certificate (reloaded when its files change), or None for plain HTTP.

        A pair that does not load raises ``OSError``/``SSLError``: a bad setting stops the start.
        """
        if self.tls_cert_file is None or self.tls_key_file is None:
            return None
        return ServerCertificate(self.tls_cert_file, self.tls_key_file)
