"""What goes wrong with the log store itself, as exceptions a caller can tell apart."""

from __future__ import annotations

import errno
from collections.abc import Sequence

from podmortem.errors import PodmortemError
from podmortem.logs.errors import SinkFull


class StoreError(PodmortemError):
    """A problem with the log store itself."""


class StoreFull(StoreError, SinkFull):
    """The store's volume is full (ENOSPC or a quota); nothing of the batch was kept."""


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the volume is full (ENOSPC, or a quota: EDQUOT)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


class StoreLocked(StoreError):
    """Another process has this store open for writing."""


class StoreClosed(StoreError):
    """The store is not open (use it as ``async with LogStore(...)``)."""


class LogNotFound(StoreError):
    """No stored log for this pod or container."""


class ContainerRequired(StoreError):
    """The pod has several containers and none was chosen."""

    def __init__(self, message: str, containers: Sequence[str]) -> None:
        super().__init__(message)
        self.containers = list(containers)
