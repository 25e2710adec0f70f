"""The open-files limit, raised at start-up to what the container allows.

Since containerd 2.0 (and Docker 29) a container starts with a soft ``RLIMIT_NOFILE`` of 1,024
and a hard one of 524,288. Go programs raise the soft limit to the hard one by themselves; Python
does not, and the operator holds about 2.6 descriptors per followed pod (a stream's socket, an
open segment file): under 1,024 it would stop following at about 390 pods. Raising the soft limit
needs no privilege; the hard limit stays the container runtime's decision.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

#: Linux refuses a soft limit above ``fs.nr_open`` (its default when that cannot be read).
_NR_OPEN = Path("/proc/sys/fs/nr_open")
_NR_OPEN_DEFAULT = 1 << 20


@dataclass(frozen=True)
class OpenFilesLimit:
    """The soft limit before and after, and the hard limit, as ``getrlimit`` gives them."""

    before: int
    after: int
    hard: int
    #: Why the soft limit could not be raised; None when it was, or had nothing to gain.
    error: str | None = None


def _ceiling(hard: int) -> int:
    if hard != resource.RLIM_INFINITY:
        return hard
    try:
        return int(_NR_OPEN.read_text().strip())
    except (OSError, ValueError):
        return _NR_OPEN_DEFAULT


def raise_open_files_limit() -> OpenFilesLimit:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (or ``fs.nr_open`` when that is unlimited)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _ceiling(hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as exc:
            return OpenFilesLimit(before=soft, after=soft, hard=hard, error=str(exc))
    after = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return OpenFilesLimit(before=soft, after=after, hard=hard)


def _shown(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else f"{value:,}"


def raise_and_log() -> OpenFilesLimit:
    """`raise_open_files_limit`, said in the log: both limits, and whether the soft one moved."""
    limit = raise_open_files_limit()
    if limit.error is not None:
        logger.warning("open files: soft limit %s (hard %s) could not be raised: %s",
                       _shown(limit.before), _shown(limit.hard), limit.error)
    elif limit.after != limit.before:
        logger.info("open files: soft limit %s raised to %s (hard %s)",
                     _shown(limit.before), _shown(limit.after), _shown(limit.hard))
    else:
        logger.info("open files: soft limit %s (hard %s)", _shown(limit.after), _shown(limit.hard))
    return limit


#: Out of descriptors: the process's limit (EMFILE) or the system's (ENFILE).
_EXHAUSTED = (errno.EMFILE, errno.ENFILE)


def out_of_descriptors(exc: BaseException) -> bool:
    """``exc``, or an error it was raised from, is EMFILE or ENFILE: wait and try again, nothing is wrong.

    aiohttp wraps the socket's error (``ClientConnectorError`` keeps its errno), a store's open does
    not; the chain is followed a few links.
    """
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno in _EXHAUSTED:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


#: Descriptors kept out of the log followers' and the segment pool's reach: the servers' accepts,
#: kopf's watches, the API calls, the store's own small files. Followers that took the last ones
#: would leave the servers unable to accept (asyncio then logs each failed accept, thousands a second)
#: and the store unable to fsync.
RESERVED_MIN = 128
RESERVED_SHARE = 0.10
#: The least a budget gives followers and segment files, however low the limit.
BUDGET_FLOOR = 16


@dataclass(frozen=True)
class DescriptorBudget:
    """How the soft limit is shared: connections for log requests, segment files kept open, the rest."""

    limit: int
    connections: int | None
    segments: int
    reserved: int


def budget(*, segments: int, limit: int | None = None) -> DescriptorBudget:
    """Share ``limit`` (the soft limit now by default): a reserve first, then at most ``segments``
    segment files (and at most an eighth of what is left, counted twice: see below), then
    connections for log requests."""
    if limit is None:
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if limit == resource.RLIM_INFINITY:
        return DescriptorBudget(limit=limit, connections=None, segments=segments, reserved=0)
    reserved = max(RESERVED_MIN, int(limit * RESERVED_SHARE))
    pool = max(BUDGET_FLOOR, min(segments, (limit - reserved) // 8))
    # Twice the pool: the store's group fsync works on duplicates of the open segment files.
    connections = max(BUDGET_FLOOR, limit - reserved - 2 * pool)
    return DescriptorBudget(limit=limit, connections=connections, segments=pool, reserved=reserved)


#: Headroom below which readiness says the descriptors are running low: this share of the limit, and
#: at least this many (a follower holds about 2.6 while it streams).
LOW_SHARE = 0.05
LOW_MIN = 64


def headroom() -> str:
    """``open files 312 of 524,288``, and ``(low: ...)`` when little is left: readiness shows it."""
    used, limit = in_use()
    if used < 0:
        return "open files unknown (no /proc/self/fd)"
    text = f"open files {used:,} of {limit:,}"
    if limit - used < max(LOW_MIN, LOW_SHARE * limit):
        text += " (low: followers that run out wait and resume; raise the hard limit)"
    return text


def in_use() -> tuple[int, int]:
    """(descriptors open now, the soft limit): the headroom readiness and the log show."""
    try:
        count = len(os.listdir("/proc/self/fd"))
    except OSError:
        count = -1
    return count, resource.getrlimit(resource.RLIMIT_NOFILE)[0]
