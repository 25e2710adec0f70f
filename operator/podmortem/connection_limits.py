"""The deadlines and connection caps of one HTTP server, as a settings model with no I/O.

Kept apart from :mod:`podmortem.serving_limits` (which applies them, with aiohttp) so that the
settings of every component can name them without importing an HTTP server: ``podmortem
diagnose`` reads the log settings' bounds and must start in the memory of a small command.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerLimits:
    """Deadlines and connection caps of one HTTP server; defaults suit a server people and programs call."""

    #: Seconds from a connection (or the first byte after an idle pause) to a complete request line
    #: and headers, and for a TLS handshake. Default 10 s: a client sends a header in one packet;
    #: one that sends it a byte at a time (slowloris) is cut, holding its socket 10 s at most.
    header_timeout_s: float = 10.0
    #: Seconds from the end of the header to the end of the body. Default 10 s: bodies here are
    #: small (an AdmissionReview, a few KiB to 1 MiB), and the API server gives a webhook 30 s at most.
    body_timeout_s: float = 10.0
    #: Seconds a kept-alive connection may wait between requests without sending a byte. Default
    #: 60 s: shorter than Go's 90 s idle pool (the API server's and Prometheus' clients retry a
    #: request on a connection the server closed while idle), long enough to reuse connections.
    idle_timeout_s: float = 60.0
    #: Connections open at once, all peers together. Default 512: each costs a descriptor and
    #: ~30-200 KiB (TLS), so a server stays under ~100 MiB and inside the descriptors kept for the
    #: servers (``podmortem.open_files``).
    max_connections: int = 512
    #: Connections open at once from one peer address. Default 64: far more than a client needs
    #: (the API server, a Prometheus, a user's ``kubectl``), and an eighth of the total, so one
    #: peer cannot hold the room of the others.
    max_connections_per_peer: int = 64

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "idle_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_connections < 1 or self.max_connections_per_peer < 1:
            raise ValueError(f"connection caps must be at least 1, got {self.max_connections} in total "
                             f"and {self.max_connections_per_peer} per peer")
        if self.max_connections_per_peer > self.max_connections:
            raise ValueError(f"the per-peer cap ({self.max_connections_per_peer}) must not exceed the total "
                             f"({self.max_connections})")
