"""Reading ``/dev/kmsg`` record by record, from a sequence number onward, counting what was lost.

``/dev/kmsg`` hands out one record per ``read()``: ``prio,seq,usec,flags;message``
followed by optional `` KEY=value`` dictionary lines. Opened non-blocking, a read
fails with EAGAIN once the reader has caught up, and with EPIPE when the ring
buffer overwrote records the reader had not read yet; the next read then goes on
with the oldest record still there. The node agent keeps the last sequence
number it handled, so after a restart it skips what it already saw, and it
reports overwritten records as a count instead of silently missing a kill.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from podmortem.errors import PodmortemError

DEFAULT_PATH = Path("/dev/kmsg")
#: Larger than any single record the kernel writes (its limit is about 8 KiB with dictionary).
READ_SIZE = 16384


class KmsgUnavailable(PodmortemError, OSError):
    """/dev/kmsg cannot be opened (not root, no CAP_SYSLOG, dmesg_restrict, or not Linux)."""


@dataclass(frozen=True, slots=True)
class KmsgRecord:
    """One kernel log record."""

    seq: int
    #: Syslog priority (0 emerg … 7 debug) and facility (0 is the kernel).
    level: int
    facility: int
    #: Microseconds since boot (monotonic).
    usec: int
    #: "-" for a record on its own, "c"/"+" for continuations on old kernels.
    flags: str
    message: str


def parse_record(raw: bytes) -> KmsgRecord | None:
    """One ``read()`` result → record; None for a malformed one. Dictionary lines are dropped."""
    text = raw.decode("utf-8", errors="replace")
    head, sep, rest = text.partition(";")
    if not sep:
        return None
    fields = head.split(",")
    if len(fields) < 3:
        return None
    try:
        prio, seq, usec = int(fields[0]), int(fields[1]), int(fields[2])
    except ValueError:
        return None
    message = rest.split("\n", 1)[0]
    flags = fields[3] if len(fields) > 3 else "-"
    return KmsgRecord(seq=seq, level=prio & 7, facility=prio >> 3, usec=usec, flags=flags, message=message)


class KmsgReader:
    """A non-blocking reader of /dev/kmsg (a context manager).

    ``records()`` yields what is there now and returns when caught up; ``lost`` counts
    records the ring buffer overwrote before they could be read; ``next_seq`` is where
    reading continues, to persist across restarts.
    """

    def __init__(self, *, path: Path = DEFAULT_PATH, from_seq: int | None = None) -> None:
        self.path = path
        #: Skip records below this sequence number (those already handled before a restart).
        self.from_seq = from_seq
        self.next_seq: int | None = from_seq
        self.lost = 0
        self._fd: int | None = None

    def open(self) -> KmsgReader:
        try:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise KmsgUnavailable(exc.errno, f"cannot open {self.path}: {exc.strerror}") from exc
        return self

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> KmsgReader:
        return self.open()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def seek_end(self) -> None:
        """Skip everything already in the buffer: only records written from now on will be read."""
        if self._fd is None:
            self.open()
        assert self._fd is not None
        os.lseek(self._fd, 0, os.SEEK_END)
        self.from_seq = None
        self.next_seq = None

    def records(self) -> Iterator[KmsgRecord]:
        """Records available now, oldest first; returns when caught up (EAGAIN)."""
        if self._fd is None:
            self.open()
        assert self._fd is not None
        while True:
            try:
                raw = os.read(self._fd, READ_SIZE)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # overwritten; the gap shows in the next record's seq
                raise
            if not raw:
                return
            record = parse_record(raw)
            if record is None:
                continue
            if self.from_seq is not None and record.seq < self.from_seq:
                continue
            if self.next_seq is not None and record.seq > self.next_seq:
                self.lost += record.seq - self.next_seq
            self.next_seq = record.seq + 1
            yield record
