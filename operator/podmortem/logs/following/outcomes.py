"""What the follower's loops hand up and out: how one request ended, and why a stream reopens.

``RequestResult`` goes from one request (level 3) to the loop around it; ``InstanceChanged`` stops
a stream that served a newer instance; ``Reconnect`` is told to whoever watches (the CLI prints
it, the operator counts it).
"""

from __future__ import annotations

from dataclasses import dataclass

from podmortem.errors import PodmortemError


class InstanceChanged(PodmortemError):
    """A stream served a newer container instance than the cursor's: drop it, handle the restart."""


@dataclass(frozen=True, slots=True)
class Reconnect:
    """Why a stream is being reopened, for people watching (the CLI prints these on stderr)."""

    container: str
    #: The ``reason`` label of ``reconnects_total`` (eof, read-timeout, reset, restart, ...).
    reason: str
    #: Seconds the follower waits before the next request.
    delay_s: float = 0.0
    detail: str = ""


@dataclass
class RequestResult:
    """How one log request ended."""

    #: The ``reason`` label for the reconnect metric: eof, read-timeout, reset, limit-bytes.
    ended: str
    new_lines: int = 0
    #: An unfinished last line (not delivered); empty when the stream ended on a line boundary.
    partial: bytes = b""
    seconds: float = 0.0
    #: The stream ended while still replaying, and the replay lacked lines we had delivered.
    replay_missed: bool = False
