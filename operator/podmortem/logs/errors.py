"""Why a log request or a pod read failed, sorted by what the follower does about it."""

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

    def __init__(self, message: str, *, status: int = 0, retry_after_s: float | None = None) -> None:
        super().__init__(message, status=status)
        #: The server's ``Retry-After`` in seconds, if it sent one.
        self.retry_after_s = retry_after_s


class LogNotReady(LogApiError):
    """The log cannot be read yet or any more (400): the container is waiting or gone."""


class ApiFatal(LogApiError):
    """An answer that retrying will not change (401, 403, other 4xx): stop with this reason."""
