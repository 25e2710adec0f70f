"""Why a log request, a pod read or a write to the sink failed, sorted by what the follower does about it."""

from __future__ import annotations

from podmortem.errors import PodmortemError


class LogApiError(PodmortemError):
    """Base of the follower's API errors; carries the HTTP status (0 for network failures)."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class PodGone(LogApiError):
    """The pod does not exist (404): its log is over, marked as "pod deleted"."""


class ApiUnavailable(LogApiError):
    """The API could not answer now (5xx, 429, network): assume the pod runs, back off, retry."""

    #: What the follower's back-off counts the wait as (a reconnect reason).
    reason = "api-unavailable"

    def __init__(self, message: str, *, status: int = 0, retry_after_s: float | None = None) -> None:
        super().__init__(message, status=status)
        #: The server's ``Retry-After`` in seconds, if it sent one.
        self.retry_after_s = retry_after_s


class SinkPaused(ApiUnavailable):
    """A batch could not be kept (:class:`SinkFull`): wait and read again from the sink's cursor.

    An ``ApiUnavailable`` so that every place that waits out an outage waits this out too.
    """

    reason = "disk-full"


class LogNotReady(LogApiError):
    """The log cannot be read yet or any more (400): the container is waiting or gone."""


class ApiFatal(LogApiError):
    """An answer that retrying will not change (401, 403, other 4xx): stop with this reason."""


class SinkFull(PodmortemError):
    """The sink cannot keep lines now (its volume is full): pause, keep the cursor, retry later.

    Nothing of the failed batch was kept and the sink's own cursor is unchanged, so the
    follower reloads it and asks the kubelet again from there once space returns.
    """
