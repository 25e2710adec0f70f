"""Running the sidecar: look at the trainer container every interval and at every exit, then leave evidence.

It ends in one of two ways, and writes the termination message in both: the
trainer container was seen and none of its processes runs any more, or SIGTERM
(SIGINT) came, as the kubelet sends a native sidecar once the pod's main
containers have ended. Either way one last look comes first, so a kill in the
last moment is in the document. Plain blocking code on one thread: the process
sleeps in ``poll`` between looks and has no event loop to keep.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from types import FrameType

from podmortem.sidecar import evidence as ev
from podmortem.sidecar.exits import ExitWaiter
from podmortem.sidecar.settings import SidecarSettings
from podmortem.sidecar.watch import ContainerWatch, Reason

logger = logging.getLogger("podmortem.sidecar")

EXIT_OK = 0
#: The termination message could not be written (its directory is missing or read-only).
EXIT_UNWRITTEN = 1


def write_message(settings: SidecarSettings, doc: ev.SidecarEvidence) -> bool:
    """Write the document to the termination log, whole (at most 4096 bytes); False if it cannot be."""
    text = ev.render(doc)
    try:
        with open(settings.termination_log, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError as exc:
        logger.error("cannot write the evidence to %s: %s", settings.termination_log, exc)
        return False
    logger.info(
        "wrote %d bytes of evidence to %s (%s%s)", len(text.encode()), settings.termination_log, doc.reason,
        f"; OOM kill of pid {doc.kill.victim.pid}" if doc.kill is not None else "; no OOM kill seen",
    )
    return True


def run_sidecar(settings: SidecarSettings, *, clock: Callable[[], float] = time.monotonic) -> int:
    """Watch until the trainer is gone or a signal comes; write the evidence; return the exit code."""
    stopping: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stopping.append(signum)

    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    previous_wake = signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    waiter = ExitWaiter(wake_fd=wake_read, use_pidfds=_is_own_proc(settings))
    watch = ContainerWatch(settings)
    reason: Reason = "sigterm"
    logger.info(
        "sidecar watching for the trainer container (%s), a sample every %g s; evidence to %s",
        _rule(settings), settings.interval_s, settings.termination_log,
    )
    try:
        next_sample = clock()
        while True:
            now = clock()
            due = now >= next_sample
            if due:
                next_sample = max(next_sample + settings.interval_s, now + settings.interval_s / 2)
            if not watch.look(now=now, sample=due):
                reason = "trainer-gone"
                logger.info("every process of the trainer container has exited")
                break
            if stopping:
                logger.info("got %s", signal.Signals(stopping[0]).name)
                break
            waiter.track(watch.pids)
            waiter.wait(max(0.0, next_sample - clock()))
        written = write_message(settings, watch.evidence(reason=reason, now=clock()))
    finally:
        waiter.close()
        watch.close()
        signal.set_wakeup_fd(previous_wake)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(wake_read)
        os.close(wake_write)
    return EXIT_OK if written else EXIT_UNWRITTEN


def _is_own_proc(settings: SidecarSettings) -> bool:
    """Whether ``proc_root`` is this kernel's /proc (pidfds of its pids are then the right processes)."""
    return os.path.realpath(settings.proc_root) == os.path.realpath("/proc")


def _rule(settings: SidecarSettings) -> str:
    if settings.container_cgroup is not None:
        return f"the processes in cgroup {settings.container_cgroup}"
    if settings.comm is not None:
        return f"the cgroup of the first process named like {settings.comm.pattern!r}"
    return "the cgroup of the lowest pid outside the sidecar's own cgroup, pid 1 'pause' left out"
