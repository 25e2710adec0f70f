"""Following the kernel log for OOM kills through syslog(2), where /dev/kmsg is out of reach.

Every ``poll_s`` seconds it copies the kernel's ring buffer (``klog.read_all``;
nothing is consumed), takes the lines after its cursor (`syslog_cursor.diff`),
feeds them to the forensics `OomParser` in dmesg form, and hands finished
records to the agent. As with /dev/kmsg, a record is finished when the next one
begins or when a poll finds nothing new, and the cursor is saved (atomically,
in the state dir) only at such quiet points, so a crash in the middle of a
dump re-reads the dump rather than losing half of it.

The first start on a node skips the history already in the buffer; a restart
resumes after the saved cursor; a saved cursor from an earlier boot means this
boot's whole log is unread. When the buffer wrapped past the cursor between two
polls, the lost span is logged, counted, and reported (an estimate of lines) in
``KernelLogStatus.lost``, so an empty record list is not trusted blindly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from podmortem import files
from podmortem.agent.metrics import AgentMetrics
from podmortem.kernel import position, syslog_cursor
from podmortem.kernel import syslog as klog
from podmortem.kernel.oom_parser import OomParser
from podmortem.reports.evidence import KernelLogStatus
from podmortem.reports.oom_record import OomKillRecord

logger = logging.getLogger(__name__)

#: How the kernel log is fetched; tests pass recorded text instead of the syscall.
Reader = Callable[[], bytes]


class SyslogFollower:
    """Polls syslog(2) until cancelled; ``close()`` hands over what is complete and saves the cursor."""

    source = "syslog"

    def __init__(
        self,
        *,
        state_file: Path,
        proc_root: Path,
        metrics: AgentMetrics,
        on_records: Callable[[list[OomKillRecord]], object],
        on_status: Callable[[KernelLogStatus], None],
        read: Reader = klog.read_all,
        poll_s: float = 0.5,
        retry_s: float = 30.0,
    ) -> None:
        self.state_file = state_file
        self.boot_id = position.read_boot_id(proc_root)
        self.metrics = metrics
        self.on_records = on_records
        self.on_status = on_status
        self.read = read
        self.poll_s = poll_s
        self.retry_s = retry_s
        self.parser = OomParser()
        #: After the last line fed to the parser.
        self.read_cursor: syslog_cursor.SyslogCursor | None = None
        #: After the last line whose records (if any) have been handed over; what is saved.
        self.processed_cursor: syslog_cursor.SyslogCursor | None = None
        self._saved: syslog_cursor.SyslogCursor | None = None
        self._fed_since_flush = False
        self._started = False
        #: Estimated lines lost to wraps since the agent started, and what the last wrap was.
        self.lost = 0
        self.last_gap: syslog_cursor.Gap | None = None
        #: Records found but not yet handed over (the reading may run in a worker thread; the
        #: hand-over happens on the caller's side, see `deliver`).
        self._pending: list[OomKillRecord] = []

    def _snapshot(self) -> str:
        return self.read().decode("utf-8", errors="replace")

    # -- cursor -----------------------------------------------------------------------------------

    def deliver(self) -> None:
        """Hand the records found so far to the agent (on the event loop's thread when running)."""
        records, self._pending = self._pending, []
        if records:
            self.on_records(records)

    def start(self, *, deliver: bool = True) -> None:
        """Read the buffer once and decide where to begin; raises OSError when syslog(2) is refused."""
        text = self._snapshot()
        saved = syslog_cursor.SyslogCursor.from_json(files.read_json(self.state_file))
        self.parser = OomParser()
        if saved is None:
            # First start on this node: the history is not ours to report; begin at its end.
            self.read_cursor = syslog_cursor.end_cursor(text, boot_id=self.boot_id)
            self.processed_cursor = self.read_cursor
            logger.info("kernel log: reading syslog(2) from the end of the buffer; no saved cursor")
        elif self.boot_id and saved.boot_id != self.boot_id:
            self.read_cursor = self.processed_cursor = None
            logger.info(
                "kernel log: reading syslog(2) from the start of this boot (cursor is from another boot)"
            )
        else:
            self.read_cursor = self.processed_cursor = saved
            logger.info(
                "kernel log: reading syslog(2) after %.6f s since boot (resumed from %s)",
                saved.ts_us / 1e6,
                self.state_file,
            )
        self._started = True
        self.persist()
        self._consume(text)
        if deliver:
            self.deliver()

    def persist(self) -> None:
        """Save the processed cursor, atomically, if it moved."""
        cursor = self.processed_cursor
        if cursor is None or cursor == self._saved:
            return
        try:
            files.write_json_atomic(self.state_file, cursor.to_json())
            self._saved = cursor
        except OSError as exc:
            logger.warning("kernel log: cannot save the syslog cursor to %s: %s", self.state_file, exc)

    # -- reading ----------------------------------------------------------------------------------

    def _status(self, *, readable: bool, error: str | None) -> None:
        self.metrics.kmsg_readable.set(1 if readable else 0)
        self.on_status(KernelLogStatus(readable=readable, error=error, lost=self.lost))

    def _consume(self, text: str) -> int:
        found = syslog_cursor.diff(text, self.read_cursor, boot_id=self.boot_id)
        if found.gap is not None:
            self.last_gap = found.gap
            self.lost += found.gap.estimated_lines
            self.metrics.kernel_log_gaps.inc()
            logger.warning("%s", found.gap.describe())
        self.read_cursor = found.cursor
        for line in found.lines:
            self.parser.feed(line.dmesg_line())
        if found.lines:
            self.metrics.kmsg_records.inc(len(found.lines))
            self._fed_since_flush = True
            self._pending.extend(self.parser.take())
        return len(found.lines)

    def poll(self, *, deliver: bool = True) -> int:
        """Read the buffer and take what is new; a poll with nothing new is a quiet point."""
        count = self._consume(self._snapshot())
        if not count:
            self.flush(deliver=False)
        if deliver:
            self.deliver()
        return count

    def flush(self, *, deliver: bool = True) -> None:
        """The log is quiet: close any open OOM record and save the cursor."""
        if self._fed_since_flush:
            self._pending.extend(self.parser.finish())
            self._fed_since_flush = False
        self.processed_cursor = self.read_cursor
        self.persist()
        if deliver:
            self.deliver()

    def close(self) -> None:
        """Hand over what is complete and save the cursor (a graceful stop); idempotent."""
        if not self._started:
            self.deliver()
            return
        with contextlib.suppress(OSError):
            self._consume(self._snapshot())
        self.flush()
        self._started = False

    async def _off_loop(self, method: Callable[..., object]) -> None:
        """Run ``method(deliver=False)`` in a worker thread; on cancellation let it finish first,
        so that `close` never touches the parser while the thread still does."""
        work = asyncio.ensure_future(asyncio.to_thread(method, deliver=False))
        try:
            await asyncio.shield(work)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await work
            raise

    async def run(self) -> None:
        try:
            while True:
                try:
                    # A large buffer takes a while to copy and parse: off the event loop.
                    await self._off_loop(self.start)
                    self.deliver()
                except OSError as exc:
                    error = f"{type(exc).__name__}: {exc}"
                    logger.warning(
                        "kernel log unreadable through syslog(2): %s; retrying in %.0f s", error, self.retry_s
                    )
                    self._status(readable=False, error=error)
                    await asyncio.sleep(self.retry_s)
                    continue
                self._status(readable=True, error=None)
                try:
                    while True:
                        await asyncio.sleep(self.poll_s)
                        lost = self.lost
                        await self._off_loop(self.poll)
                        self.deliver()
                        if self.lost != lost:
                            self._status(readable=True, error=None)
                except OSError as exc:
                    error = f"{type(exc).__name__}: {exc}"
                    logger.warning(
                        "kernel log read through syslog(2) failed: %s; retrying in %.0f s",
                        error,
                        self.retry_s,
                    )
                    self.flush()
                    self._started = False
                    self._status(readable=False, error=error)
                    await asyncio.sleep(self.retry_s)
        finally:
            self.close()
