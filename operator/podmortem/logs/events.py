"""What the follower hands on: complete lines, gap markers and the end of a container's log.

These are the contract between the follower (which reads the API) and the
sinks that keep or print lines (the durable store, the CLI's stdout writer).
They are plain data, free of I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LogLine:
    """One complete log line, without its timestamp prefix and without the trailing newline.

    ``text`` stays bytes: lines may hold invalid UTF-8, ``\\r`` and ANSI escapes,
    and a store must keep them exactly as the container wrote them.
    """

    container: str
    ts_ns: int
    text: bytes


class GapReason(enum.StrEnum):
    #: The first line after a reconnect is much later than the last one while the
    #: container kept writing: the kubelet probably rotated the file meanwhile.
    ROTATION = "rotation"
    #: The stream ended because ``limitBytes`` was reached.
    LIMIT_BYTES = "limit-bytes"
    #: The container restarted more than once while the follower was away (or the previous
    #: instance's log was already removed): whole instances' logs cannot be read any more.
    RESTARTS = "restarts"
    #: The store's volume was full, and when space returned the kubelet no longer had the
    #: lines written meanwhile (while it still had them, nothing is missing and no gap is marked).
    DISK_FULL = "disk-full"


@dataclass(frozen=True, slots=True)
class GapMarker:
    """Lines may have been lost between ``after_ts_ns`` and ``before_ts_ns`` (both may be None)."""

    container: str
    reason: GapReason
    after_ts_ns: int | None
    before_ts_ns: int | None
    detail: str = ""


class EndReason(enum.StrEnum):
    TERMINATED = "terminated"            # the container finished and its tail was drained
    POD_DELETED = "pod-deleted"          # the pod is gone (404)
    RESTARTED = "restarted"              # this instance was replaced by a new containerID
    STOPPED = "stopped"                  # the follower itself was asked to stop


@dataclass(frozen=True, slots=True)
class LogEnd:
    container: str
    container_id: str | None
    reason: EndReason
