"""Whether the log a person looks at was still being written when the process died."""

from __future__ import annotations

from datetime import datetime, timedelta

from podmortem.reports.findings import Finding, Severity

#: A last log line older than this before the kill means the log view is not the end of the story.
STALE_AFTER = timedelta(minutes=10)


def stale_log(
    *, last_log_at: datetime | None, killed_at: datetime | None, threshold: timedelta = STALE_AFTER
) -> Finding | None:
    """The last log line is far older than the kill: the stream was lost, or the process went quiet."""
    if last_log_at is None or killed_at is None:
        return None
    age = killed_at - last_log_at
    if age <= threshold:
        return None
    return Finding(
        code="stale-log",
        severity=Severity.WARNING,
        message=(
            f"The last log line is {_duration(age)} older than the kill, so the log tail shown "
            f"is not what the process was doing when it died."
        ),
        evidence={
            "last_log_at": last_log_at.isoformat(),
            "killed_at": killed_at.isoformat(),
            "age_seconds": int(age.total_seconds()),
        },
        action=(
            "Check whether the log follower lost the stream (a kubelet stream cut) or the process "
            "stopped logging; read the memory findings rather than the log tail."
        ),
    )


def _duration(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes = rest // 60
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"
