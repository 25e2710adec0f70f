"""A container that failed after another container of its pod was OOM-killed: the other one is the cause.

A trainer beside a sidecar (a data proxy, a log shipper, a native sidecar init container) fails
when the sidecar it talks to is OOM-killed: a connection reset, a broken pipe, a hung read ended
by SIGTERM. Its own report would name the trainer's exit 1 or 143 and a traceback; the kill that
started it is in the sidecar's status. Pure: reads the pod object only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from podmortem.kube.bodies import PodBody, Terminated
from podmortem.reports.findings import Finding, Severity

#: How long before a container's end a sibling's OOM kill still counts as its cause. NCCL's and most
#: RPC clients' timeouts are 10 minutes at most; a sidecar killed an hour earlier and restarted is not it.
WINDOW = timedelta(minutes=10)
#: Termination times have 1 s resolution: a sibling "after" by less is the same moment.
SLACK = timedelta(seconds=1)


@dataclass(frozen=True)
class SiblingOom:
    """The other container of the pod that the kernel OOM-killed."""

    container: str
    finished_at: datetime | None
    exit_code: int | None
    #: A native sidecar (an init container with restartPolicy Always) or other init container.
    init: bool = False


def find(pod: Mapping[str, Any], container: str, finished_at: datetime | None) -> SiblingOom | None:
    """The earliest other container OOM-killed at most `WINDOW` before ``container`` ended, if any."""
    found: list[SiblingOom] = []
    body = PodBody(pod)
    for init, statuses in ((False, body.statuses), (True, body.init_statuses)):
        for cs in statuses:
            for term in cs.terminations():
                if cs.name != container and term.reason == "OOMKilled":
                    found.extend(_within(cs.name, init, term, finished_at))
    found.sort(key=lambda s: (s.finished_at is None, s.finished_at or datetime.min))
    return found[0] if found else None


def _within(name: str, init: bool, term: Terminated, finished_at: datetime | None) -> list[SiblingOom]:
    """The sibling's kill, when it came within the window of ``finished_at`` (or either time is unknown)."""
    at = _time(term.finished_at)
    if at is not None and finished_at is not None and not finished_at - WINDOW <= at <= finished_at + SLACK:
        return []
    return [SiblingOom(container=name, finished_at=at, exit_code=term.exit_code, init=init)]


def finding(
    *, container: str, exit_code: int | None, finished_at: datetime | None, sibling: SiblingOom
) -> Finding:
    """``sidecar-oom``: this container's end follows the sibling's OOM kill."""
    kind = "init/sidecar container" if sibling.init else "container"
    when = "before"
    if sibling.finished_at is not None and finished_at is not None:
        when = f"{(finished_at - sibling.finished_at).total_seconds():.0f} s before"
    return Finding(
        code="sidecar-oom",
        severity=Severity.CRITICAL,
        message=(
            f"The {kind} {sibling.container!r} of this pod was OOM-killed (exit {sibling.exit_code}) "
            f"{when} {container!r} ended with exit {exit_code}: {container!r} failed because "
            f"{sibling.container!r} died."
        ),
        evidence={
            "container": sibling.container,
            "oom_killed_at": sibling.finished_at.isoformat() if sibling.finished_at else None,
            "exit_code": sibling.exit_code,
            "this_container": container,
            "this_exit_code": exit_code,
        },
        action=(
            f"Raise {sibling.container!r}'s memory limit (resources.limits.memory) or bound what it "
            f"keeps; its own report names what filled it."
        ),
    )



def _time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None
