"""Waiting for the next sample, woken at once when one of the trainer's processes exits or a signal comes.

The kill-to-message time is what the operator waits for, so an exit must not wait for the next 2 s
sample. A pidfd (``pidfd_open``, Linux 5.3+) of each watched process becomes readable when it exits,
zombie or not, and costs nothing while it does not; any process of the same pid namespace can be
watched so, no permission needed. Where pidfds are refused (an old kernel, a seccomp profile) or the
/proc is not this kernel's (tests' fake trees), the wait is cut into `POLL_S` slices instead.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select

logger = logging.getLogger("podmortem.sidecar")

#: Seconds between two looks at the processes where exits cannot be waited for: the kill-to-message
#: time's bound then (the goal is under 1 s).
POLL_S = 0.25
#: Pidfds held at most: the trainer and the largest processes (the likely victims); the others'
#: exits are seen at the next look. One descriptor per process let 1,100 processes exhaust a soft
#: limit of 1,024.
MAX_PIDFDS = 64


class ExitWaiter:
    """Pidfds of the watched processes plus a wake-up fd (the signal handler's), polled together."""

    def __init__(self, *, wake_fd: int, use_pidfds: bool) -> None:
        self._wake_fd = wake_fd
        self._use_pidfds = use_pidfds and hasattr(os, "pidfd_open")
        self._pidfds: dict[int, int] = {}
        #: A watched pid had exited before its pidfd could be opened: look again at once.
        self._missed = False

    @property
    def pidfds(self) -> bool:
        return self._use_pidfds

    def track(self, pids: tuple[int, ...]) -> None:
        """Watch these pids from now on (at most `MAX_PIDFDS`; new ones opened, the others closed)."""
        wanted = set(sorted(pids)[:MAX_PIDFDS])
        for pid in [p for p in self._pidfds if p not in wanted]:
            os.close(self._pidfds.pop(pid))
        if not self._use_pidfds:
            return
        for pid in wanted - set(self._pidfds):
            try:
                self._pidfds[pid] = os.pidfd_open(pid)
            except ProcessLookupError:
                self._missed = True
            except OSError as exc:
                if exc.errno in (errno.ENOSYS, errno.EPERM, errno.EACCES):
                    logger.info("pidfd_open refused (%s): looking for exits every %.2f s", exc, POLL_S)
                    self._use_pidfds = False
                    self.track(())
                    return
                # EMFILE, ENFILE, ENOMEM: this one's exit is seen at the next look; never a busy loop
                logger.info("pidfd_open of pid %d failed (%s): its exit is seen at the next look", pid, exc)
                return

    def wait(self, timeout_s: float) -> None:
        """Return after ``timeout_s``, or as soon as a watched process exits or the wake-up fd is written."""
        if self._missed:
            self._missed = False
            return
        if not self._use_pidfds:
            timeout_s = min(timeout_s, POLL_S)
        poller = select.poll()
        poller.register(self._wake_fd, select.POLLIN)
        for fd in self._pidfds.values():
            poller.register(fd, select.POLLIN)
        ready = poller.poll(max(0, int(timeout_s * 1000 + 0.999)))
        if any(fd == self._wake_fd for fd, _ in ready):
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wake_fd, 512):
                    pass

    def pause(self, timeout_s: float) -> None:
        """Sleep ``timeout_s``, woken only by the wake-up fd (a signal), not by exits."""
        poller = select.poll()
        poller.register(self._wake_fd, select.POLLIN)
        poller.poll(max(0, int(timeout_s * 1000 + 0.999)))

    def close(self) -> None:
        self.track(())
