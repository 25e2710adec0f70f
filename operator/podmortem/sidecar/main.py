"""Running the sidecar: look at the trainer container every interval and at every exit, then leave evidence.

It ends in one of two ways, and writes the termination message in both: the
trainer container was seen and none of its processes runs any more, or SIGTERM
(SIGINT) came, as the kubelet sends a native sidecar once the pod's main
containers have ended. Either way one last look comes first, so a kill in the
last moment is in the document. Plain blocking code on one thread: the process
sleeps in ``poll`` between looks and has no event loop to keep.

The trainer runs as the same user (docs/sidecar.md, "Trust model"). So the sidecar first makes
itself non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``: its ``/proc/<pid>/root``, ``fd`` and memory
then need CAP_SYS_PTRACE, which the trainer lacks, instead of the same uid), opens its termination
log once at the start and keeps that descriptor (a trainer that lowers the sidecar's
RLIMIT_NOFILE with prlimit cannot stop the write), and writes a document whatever fails: at the
least what failed and why (``reason: failed``).
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import logging
import os
import signal
import time
from collections.abc import Callable
from types import FrameType

from podmortem.reports import sidecar_document as ev
from podmortem.sidecar.exits import ExitWaiter
from podmortem.sidecar.settings import SidecarSettings
from podmortem.sidecar.watch import ContainerWatch, Reason

logger = logging.getLogger("podmortem.sidecar")

EXIT_OK = 0
#: The termination message could not be written (its directory is missing or read-only).
EXIT_UNWRITTEN = 1
#: Seconds from an exit to the look it wakes: processes that die with it (a worker by PR_SET_PDEATHSIG,
#: the runtime killing the rest) are then gone in the same look, paired with the same kill.
EXIT_SETTLE_S = 0.03
#: prctl(2) option: whether the process may be dumped, ptraced, and its /proc entries read by its uid.
PR_SET_DUMPABLE = 4


def make_undumpable() -> bool:
    """``prctl(PR_SET_DUMPABLE, 0)`` (through libc: Python has no prctl); False where it fails."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


class TerminationLog:
    """The termination log, opened at the start and held: the end needs no new descriptor."""

    def __init__(self, path: os.PathLike[str] | str) -> None:
        self.path = path
        self._fd: int | None = None
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            logger.warning("cannot open the termination log %s yet (%s): trying again at the end", path, exc)

    def write(self, data: bytes) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def minimal_evidence(what: str, exc: BaseException) -> ev.SidecarDocument:
    """The least document: that the sidecar failed, what failed and why."""
    from datetime import UTC, datetime

    from podmortem import __version__

    return ev.SidecarDocument(
        podmortem=ev.clean_text(__version__, ev.MAX_VERSION), reason="failed", at=datetime.now(UTC),
        notes=[ev.clean_text(f"{what} failed: {type(exc).__name__}: {exc}", ev.MAX_TEXT)],
    )


def write_message(
    settings: SidecarSettings, doc: ev.SidecarDocument, log: TerminationLog | None = None
) -> bool:
    """Write the document to the termination log, whole (at most 4096 bytes); False if it cannot be."""
    text = ev.render(doc)
    own = log is None
    log = log if log is not None else TerminationLog(settings.termination_log)
    try:
        log.write(text.encode("utf-8"))
    except OSError as exc:
        logger.error("cannot write the evidence to %s: %s", settings.termination_log, exc)
        return False
    finally:
        if own:
            log.close()
    logger.info(
        "wrote %d bytes of evidence to %s (%s%s)", len(text.encode()), settings.termination_log, doc.reason,
        f"; OOM kill of pid {doc.kill.victim.pid}" if doc.kill is not None else "; no OOM kill seen",
    )
    return True


def run_sidecar(settings: SidecarSettings, *, clock: Callable[[], float] = time.monotonic) -> int:
    """Watch until the trainer is gone or a signal comes; write the evidence; return the exit code."""
    stopping: list[int] = []
    if settings.real_proc and not make_undumpable():
        logger.warning("prctl(PR_SET_DUMPABLE, 0) failed: a process of this user can reach this one's files")
    log = TerminationLog(settings.termination_log)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stopping.append(signum)

    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    previous_wake = signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    waiter = ExitWaiter(wake_fd=wake_read, use_pidfds=settings.real_proc)
    watch = ContainerWatch(settings)
    reason: Reason = "sigterm"
    logger.info(
        "sidecar watching for the trainer container (%s), a sample every %g s; evidence to %s",
        _rule(settings), settings.interval_s, settings.termination_log,
    )
    failure: tuple[str, BaseException] | None = None
    try:
        try:
            next_sample = clock()
            #: The latest looks an exit woke: 4 in a row at once, then on average one per min_look_gap_s.
            exit_looks: collections.deque[float] = collections.deque(maxlen=4)
            while True:
                now = clock()
                due = now >= next_sample
                if not due and not stopping:  # woken by an exit: let what goes with it go, and pace looks
                    watch.glance()
                    settle = EXIT_SETTLE_S
                    if len(exit_looks) == exit_looks.maxlen:  # a burst of looks, then one per gap at most
                        settle = max(settle, exit_looks[0] + len(exit_looks) * settings.min_look_gap_s - now)
                    waiter.pause(min(settle, next_sample - now))
                    now = clock()
                    due = now >= next_sample
                    if not due:
                        exit_looks.append(now)
                if due:
                    next_sample = max(next_sample + settings.interval_s, now + settings.interval_s / 2)
                if not watch.look(now=now, sample=due):
                    reason = "trainer-gone"
                    logger.info("every process of the trainer container has exited (/proc lists none)")
                    break
                if stopping:
                    logger.info("got %s", signal.Signals(stopping[0]).name)
                    break
                waiter.track(watch.watched or watch.pids[:1])
                waiter.wait(max(0.0, next_sample - clock()))
        except Exception as exc:
            logger.exception("the watch failed")
            failure = ("the watch", exc)
        waiter.close()  # descriptors back before the write
        try:
            doc = watch.evidence(reason=reason, now=clock())
            if failure is not None:
                what, error = failure
                note = ev.clean_text(f"{what} failed: {type(error).__name__}: {error}", ev.MAX_TEXT)
                doc = dataclasses.replace(doc, reason="failed", notes=[note, *doc.notes][: ev.MAX_NOTES])
        except Exception as exc:
            logger.exception("the evidence could not be built")
            doc = minimal_evidence("building the evidence", exc)
        written = write_message(settings, doc, log)
    finally:
        log.close()
        waiter.close()
        watch.close()
        signal.set_wakeup_fd(previous_wake)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(wake_read)
        os.close(wake_write)
    return EXIT_OK if written else EXIT_UNWRITTEN


def _rule(settings: SidecarSettings) -> str:
    if settings.container_cgroup is not None:
        return f"the processes in cgroup {settings.container_cgroup}"
    if settings.comm is not None:
        return f"the cgroup of the first process named like {settings.comm.pattern!r}"
    return "the cgroup of the lowest pid outside the sidecar's own cgroup, pid 1 'pause' left out"
