"""Choosing where the agent reads kernel OOM records: /dev/kmsg, or syslog(2) where the device is blocked.

/dev/kmsg gives sequence numbers, so nothing is missed or read twice, and is
preferred. But a container runtime refuses a hostPath device to a container that
is not privileged (node-problem-detector#698), while syslog(2) needs only
CAP_SYSLOG. ``auto`` therefore opens /dev/kmsg and, if that fails, uses
syslog(2); the choice is logged with the words "kernel log", exported as
``podmortem_agent_kernel_log_source{source=...}`` and shown in /healthz.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from podmortem.agent.kmsg_follower import KmsgFollower
from podmortem.agent.metrics import AgentMetrics
from podmortem.agent.settings import AgentSettings
from podmortem.agent.syslog_follower import Reader, SyslogFollower
from podmortem.kernel import syslog as klog
from podmortem.reports.evidence import KernelLogStatus
from podmortem.reports.oom_record import OomKillRecord

logger = logging.getLogger(__name__)

Follower = KmsgFollower | SyslogFollower


def probe_kmsg(path: Path) -> str | None:
    """None when ``path`` can be opened and read, else why not (one record is read; nothing is consumed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return f"cannot open {path}: {exc.strerror or exc}"
    try:
        os.read(fd, 16384)
    except BlockingIOError:
        pass
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            return f"cannot read {path}: {exc.strerror or exc}"
    finally:
        os.close(fd)
    return None


def probe_syslog(read: Reader) -> str | None:
    """None when syslog(2) answers, else why not."""
    try:
        read()
    except OSError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class KernelLogState:
    """What the agent shows of its kernel log: readable or why not, the source, the last gap."""

    status: KernelLogStatus
    #: "kmsg" or "syslog" once chosen; None while neither could be used.
    source: str | None = None
    #: The last span of kernel log that may have been lost (syslog(2) wraps), in words.
    gap: str | None = None


class KernelLog:
    """Runs the follower of the configured (or, for ``auto``, the first usable) kernel log source.

    Each status a follower reports goes to ``on_status`` with the source and the last gap, which
    only this object knows: its owner needs no reference back to it.
    """

    def __init__(
        self,
        *,
        settings: AgentSettings,
        metrics: AgentMetrics,
        on_records: Callable[[list[OomKillRecord]], object],
        on_status: Callable[[KernelLogState], None],
        read_syslog: Reader = klog.read_all,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.on_records = on_records
        self.on_status = on_status
        self.read_syslog = read_syslog
        #: "kmsg" or "syslog" once chosen; None while neither could be used.
        self.source: str | None = None
        self.follower: Follower | None = None

    def _kmsg(self) -> KmsgFollower:
        s = self.settings
        return KmsgFollower(
            kmsg_path=s.kmsg_path,
            state_file=s.kmsg_state_file,
            proc_root=s.proc_root,
            metrics=self.metrics,
            on_records=self.on_records,
            on_status=self._status,
            retry_s=s.kernel_log_retry_s,
        )

    def _syslog(self) -> SyslogFollower:
        s = self.settings
        return SyslogFollower(
            state_file=s.syslog_state_file,
            proc_root=s.proc_root,
            metrics=self.metrics,
            on_records=self.on_records,
            on_status=self._status,
            read=self.read_syslog,
            poll_s=s.syslog_poll_s,
            retry_s=s.kernel_log_retry_s,
        )

    def _status(self, status: KernelLogStatus) -> None:
        gap = self.follower.last_gap if isinstance(self.follower, SyslogFollower) else None
        self.on_status(KernelLogState(status=status, source=self.source,
                                      gap=gap.describe() if gap is not None else None))

    def choose(self) -> tuple[Follower | None, str | None]:
        """The follower to run, or None and why neither source can be used now."""
        wanted = self.settings.kernel_log_source
        if wanted == "kmsg":
            logger.info("kernel log: reading %s (--kernel-log-source kmsg)", self.settings.kmsg_path)
            return self._kmsg(), None
        if wanted == "syslog":
            logger.info("kernel log: reading it through syslog(2) (--kernel-log-source syslog)")
            return self._syslog(), None
        kmsg_error = probe_kmsg(self.settings.kmsg_path)
        if kmsg_error is None:
            logger.info("kernel log: reading %s (auto: it can be opened)", self.settings.kmsg_path)
            return self._kmsg(), None
        syslog_error = probe_syslog(self.read_syslog)
        if syslog_error is None:
            logger.info("kernel log: %s; reading it through syslog(2) instead (auto)", kmsg_error)
            return self._syslog(), None
        return None, f"{kmsg_error}; syslog(2): {syslog_error} (reading the kernel log needs CAP_SYSLOG)"

    async def run(self) -> None:
        """Follow the chosen source until cancelled; with neither usable, report why and retry."""
        try:
            while True:
                follower, error = self.choose()
                if follower is not None:
                    self.follower = follower
                    self.source = follower.source
                    for name in ("kmsg", "syslog"):
                        self.metrics.kernel_log_source.labels(name).set(1 if name == self.source else 0)
                    await follower.run()
                    return
                logger.warning(
                    "kernel log unreadable: %s; retrying in %.0f s", error, self.settings.kernel_log_retry_s
                )
                self.metrics.kmsg_readable.set(0)
                self._status(KernelLogStatus(readable=False, error=error))
                await asyncio.sleep(self.settings.kernel_log_retry_s)
        finally:
            self.close()

    def close(self) -> None:
        """Hand over complete records and save the position (a graceful stop); idempotent."""
        if self.follower is not None:
            self.follower.close()
