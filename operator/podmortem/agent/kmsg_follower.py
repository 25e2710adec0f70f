"""Following the kernel log for OOM kills, from where the agent left off.

The kernel says why a pod died only in its log, and only once; a ring buffer
then overwrites it. This follower reads /dev/kmsg record by record (through the
forensics core's `KmsgReader`), feeds every line to the incremental
`OomParser`, hands finished records to the agent (which maps them to pods), and
persists the last sequence number it fully processed (see `position`) so that a
restart neither rescans history nor loses what happened while it was down.

A record is complete when the parser sees the next one begin, or when the log
has been quiet for ``idle_flush_s`` (the kernel prints a whole OOM dump within
milliseconds). The position is saved only at such quiet points, so a crash in
the middle of a dump re-reads the dump rather than losing half of it.

Needs CAP_SYSLOG (or ``kernel.dmesg_restrict=0``). When /dev/kmsg cannot be
opened, the agent goes on sampling; the reason shows in ``/healthz`` and the
``podmortem_agent_kmsg_readable`` gauge, and opening is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from podmortem.agent.metrics import AgentMetrics
from podmortem.kernel import kmsg, position
from podmortem.kernel.oom_parser import OomParser
from podmortem.reports.evidence import KernelLogStatus
from podmortem.reports.oom_record import OomKillRecord

logger = logging.getLogger(__name__)


class KmsgFollower:
    """Reads /dev/kmsg until cancelled; ``persist()`` saves the position (called on a graceful stop)."""

    source = "kmsg"

    def __init__(
        self,
        *,
        kmsg_path: Path,
        state_file: Path,
        proc_root: Path,
        metrics: AgentMetrics,
        on_records: Callable[[list[OomKillRecord]], object],
        on_status: Callable[[KernelLogStatus], None],
        poll_s: float = 0.2,
        idle_flush_s: float = 1.0,
        retry_s: float = 30.0,
    ) -> None:
        self.kmsg_path = kmsg_path
        self.state_file = state_file
        self.boot_id = position.read_boot_id(proc_root)
        self.metrics = metrics
        self.on_records = on_records
        self.on_status = on_status
        self.poll_s = poll_s
        self.idle_flush_s = idle_flush_s
        self.retry_s = retry_s
        self.parser = OomParser()
        self.reader: kmsg.KmsgReader | None = None
        #: The last sequence number whose OOM records (if any) have been handed over.
        self.processed_seq: int | None = None
        self._saved_seq: int | None = None
        self._fed_since_flush = False
        self._lost_reported = 0
        self._lost_before = 0

    # -- position ---------------------------------------------------------------------------------

    def _open(self) -> kmsg.KmsgReader:
        saved = position.load(self.state_file)
        after = position.start_after(saved, boot_id=self.boot_id)
        if after is None:
            # First start on this node: skip what is in the buffer (not ours to report), but learn
            # where it ends so that the position can be saved right away.
            reader = kmsg.KmsgReader(path=self.kmsg_path, from_seq=None).open()
            last = None
            for record in reader.records():
                last = record.seq
            reader.lost = 0
            self.processed_seq = last
            logger.info(
                "kernel log: reading %s from its end (seq %s); no saved position", self.kmsg_path, last
            )
        else:
            from_seq = None if after < 0 else after + 1
            reader = kmsg.KmsgReader(path=self.kmsg_path, from_seq=from_seq).open()
            self.processed_seq = after if after >= 0 else None
            logger.info(
                "kernel log: reading %s from seq %s (%s)",
                self.kmsg_path,
                from_seq if from_seq is not None else 0,
                "resumed" if after >= 0 else "a new boot since the saved position",
            )
        self.persist()
        return reader

    def persist(self) -> None:
        """Save the last processed sequence number, atomically, if it moved."""
        if self.processed_seq is None or self.processed_seq == self._saved_seq:
            return
        try:
            position.save(self.state_file, position.KmsgPosition(self.boot_id, self.processed_seq))
            self._saved_seq = self.processed_seq
        except OSError as exc:
            logger.warning("kernel log: cannot save the position to %s: %s", self.state_file, exc)

    # -- reading ----------------------------------------------------------------------------------

    def _status(self, *, readable: bool, error: str | None) -> None:
        lost = self._lost_before + (self.reader.lost if self.reader is not None else 0)
        self.metrics.kmsg_readable.set(1 if readable else 0)
        if lost > self._lost_reported:
            self.metrics.kmsg_lost.inc(lost - self._lost_reported)
            self._lost_reported = lost
        self.on_status(KernelLogStatus(readable=readable, error=error, lost=lost))

    def _hand_over(self, records: list[OomKillRecord]) -> None:
        if records:
            self.on_records(records)

    def read_available(self) -> int:
        """Read what the kernel has now; returns how many records were read."""
        assert self.reader is not None
        count = 0
        for record in self.reader.records():
            self.parser.feed_record(record)
            count += 1
        if count:
            self.metrics.kmsg_records.inc(count)
            self._fed_since_flush = True
            self._hand_over(self.parser.take())
        return count

    def flush(self) -> None:
        """The log is quiet: close any open OOM record and save the position."""
        if self._fed_since_flush:
            self._hand_over(self.parser.finish())
            self._fed_since_flush = False
            if self.reader is not None and self.reader.next_seq is not None:
                self.processed_seq = self.reader.next_seq - 1
        self.persist()

    def close(self) -> None:
        """Hand over what is complete, save the position, release /dev/kmsg (a graceful stop)."""
        if self.reader is not None:
            with contextlib.suppress(OSError):
                self.read_available()
            self.flush()
            self._lost_before += self.reader.lost
            self.reader.close()
            self.reader = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    self.reader = self._open()
                except OSError as exc:
                    error = f"{type(exc).__name__}: {exc} (reading the kernel log needs CAP_SYSLOG)"
                    logger.warning("kernel log unreadable: %s; retrying in %.0f s", error, self.retry_s)
                    self._status(readable=False, error=error)
                    await asyncio.sleep(self.retry_s)
                    continue
                self._status(readable=True, error=None)
                quiet_since = loop.time()
                try:
                    while True:
                        if self.read_available():
                            quiet_since = loop.time()
                            self._status(readable=True, error=None)
                        elif self._fed_since_flush and loop.time() - quiet_since >= self.idle_flush_s:
                            self.flush()
                        await asyncio.sleep(self.poll_s)
                except OSError as exc:
                    error = f"{type(exc).__name__}: {exc}"
                    logger.warning("kernel log read failed: %s; reopening in %.0f s", error, self.retry_s)
                    self.close()
                    self._status(readable=False, error=error)
                    await asyncio.sleep(self.retry_s)
        finally:
            self.close()
