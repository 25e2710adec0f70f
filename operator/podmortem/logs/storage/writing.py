"""The store's append path: one batch at a time into an instance's active segment, durably.

Every batch is one ``write()`` (a header, the encoded lines and a trailer with a CRC, see
``segments``), committed to the instance's size only once it landed whole: a failed or short
write is cut off again, so a segment always ends at a batch boundary.

fsync policy (``StoreSettings.fsync_interval_s``):

* Every batch is handed to the kernel with one ``write()`` before ``write()``
  returns. A crash of the operator process (kill -9, OOM kill, a bug) therefore
  loses nothing the store acknowledged, whatever the policy.
* A crash of the whole node (kernel panic, power loss) can lose what was not yet
  fsynced. With the default, data is fsynced every second (group commit in a
  worker thread, off the event loop), so at most the last second is lost. The
  cursor is lost with it, never ahead of it: the follower re-reads those lines
  from the kubelet, which still has them unless it rotated the file meanwhile.
* ``0`` fsyncs every batch before ``write()`` returns (slow: one disk flush per
  batch); ``None`` never fsyncs (only for tests and benchmarks).
* A segment is fsynced before the next one is started, and end markers are
  fsynced at once, so older segments and the fact that a log ended are durable.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from podmortem.background import Background
from podmortem.files import open_nofollow
from podmortem.logs.storage import segments
from podmortem.logs.storage.errors import StoreClosed, StoreFull, is_full
from podmortem.logs.storage.instance import Instance
from podmortem.logs.storage.settings import StoreSettings
from podmortem.logs.storage.space import StoreSpace
from podmortem.logs.storage.totals import StoreTotals

logger = logging.getLogger(__name__)

#: Batches above this are encoded and written in a worker thread (see `SegmentWriter.append`).
LARGE_BATCH_BYTES = 1 << 20


def write_all(fd: int, data: bytes, head: bytes = b"") -> None:
    """Write ``head`` then ``data`` whole (one ``writev``, no joined copy), however short the writes."""
    view = memoryview(data)
    if head:
        written = os.writev(fd, [head, view])
        if written < len(head):
            write_all(fd, head[written:])
            written = len(head)
        view = view[written - len(head):]
    while view:
        written = os.write(fd, view)
        view = view[written:]


def fsync_all(fds: list[int], dirs: list[Path], closed: Iterable[Path] = ()) -> None:
    """fsync (and close) ``fds``, the files at ``closed`` (written, then closed unsynced) and ``dirs``."""
    try:
        for fd in fds:
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)
    for path in closed:
        # fsync flushes the file's dirty pages whichever descriptor asks; gone means retention took it.
        with contextlib.suppress(FileNotFoundError):
            fd = open_nofollow(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for d in dirs:
        with contextlib.suppress(FileNotFoundError):
            dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)


class SegmentWriter:
    """Appends batches to instances' segments: rolls segments, cuts failed writes, fsyncs by policy."""

    def __init__(self, *, root: Path, settings: StoreSettings, space: StoreSpace, totals: StoreTotals,
                 instances: Callable[[], Iterable[Instance]], tasks: Background) -> None:
        self.root = root
        #: The store's tasks: `_hand_out_room` runs among them, so the store's close ends it.
        self._tasks = tasks
        self.settings = settings
        self._space = space
        self._totals = totals
        #: Every instance the store has open (whose written data `flush` fsyncs).
        self._instances = instances
        #: Directories whose entries changed since the last flush (new segments, new instances).
        self.dirty_dirs: set[Path] = set()
        #: Instances whose segment is open for writing, written longest ago first (at most
        #: ``settings.max_open_segments``; `_make_room`).
        self._open: collections.OrderedDict[int, Instance] = collections.OrderedDict()
        #: Openers waiting for room in the pool (`_make_room`), and the task letting them in.
        self._room_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closer: asyncio.Task[None] | None = None
        #: Openers let in that have not opened their file yet: their room is taken (else a new
        #: opener seeing a free place in that moment would take it too, one file over the pool).
        self._admitted = 0
        #: Segments closed to make room while written since the last flush: it fsyncs them by path.
        self._closed_dirty: set[Path] = set()
        #: Set after each append: a file being written may be closable now.
        self._written = asyncio.Event()

    def full(self, exc: OSError) -> StoreFull:
        self._totals.full_since = self._totals.full_since or time.time()
        return StoreFull(f"the log store's volume is full ({exc.strerror}): {self.root}")

    async def append(self, job_dir: Path, inst: Instance,
                     encode: Callable[[Instance, segments.Framing], bytes], *, durable: bool = False,
                     large: bool = False) -> None:
        """Append one batch. ``large``: encode (CRC, framing) and write it in a worker thread.

        A workload that prints megabyte lines must not stall the event loop that every other
        follower, reader and handler shares: a 16 MiB batch costs ~30 ms of CRC and copy and
        ~100 ms of write(). The instance's lock keeps its writes in order meanwhile.
        """
        async with inst.lock:
            try:
                if inst.fd is None or inst.active_size >= self.settings.segment_bytes:
                    await self.roll(job_dir, inst)
            except OSError as exc:
                if is_full(exc):  # no room for the next segment: the same pause as a failed write
                    raise self.full(exc) from exc
                raise
            assert inst.fd is not None and inst.writing is not None
            saved = (inst.index, inst.cursor)
            writing = inst.writing
            batch = await asyncio.to_thread(encode, inst, writing) if large else encode(inst, writing)
            head = writing.file_header() if inst.active_size == 0 else b""
            fd = inst.fd
            try:
                try:
                    if large:
                        await asyncio.to_thread(write_all, fd, batch, head)
                    else:
                        write_all(fd, batch, head)
                except OSError as exc:
                    if not is_full(exc):
                        raise
                    os.ftruncate(fd, inst.active_size)
                    # The volume is full: free what retention may take early, then try once more.
                    if not (await self._space.free_early()).deleted_bytes:
                        raise
                    write_all(fd, batch, head)
                data_len = len(head) + len(batch)
                if os.lseek(inst.fd, 0, os.SEEK_CUR) != inst.active_size + data_len:
                    # Someone else truncated or appended to the segment: it no longer ends where
                    # readers think. Take the batch back and write it to a fresh segment.
                    data_len = await self._moved_under_us(job_dir, inst, landed=data_len, batch=batch)
            except BaseException as exc:
                # Drop whatever part landed, so the file ends at a batch boundary.
                inst.index, inst.cursor = saved
                with contextlib.suppress(OSError):
                    if inst.fd is not None:
                        os.ftruncate(inst.fd, inst.active_size)
                if isinstance(exc, OSError) and is_full(exc):
                    raise self.full(exc) from exc
                raise
            self._totals.full_since = None
            inst.active_size += data_len
            inst.dirty = True
            self._space.wrote(job_dir, data_len)
            self._totals.bytes_total += data_len
            interval = self.settings.fsync_interval_s
            if interval == 0 or (durable and interval is not None):
                await asyncio.to_thread(os.fsync, inst.fd)
                inst.dirty = False
            self._open[id(inst)] = inst
            self._open.move_to_end(id(inst))
        inst.notify()
        self._written.set()

    async def _make_room(self) -> None:
        """Before a segment file is opened: wait until one more fits in the pool.

        Counted at the open, not after the write: thousands of followers writing their first batch
        at once would otherwise each open a file before any is counted (370 files open against a
        pool of 112 under a 1,024 limit, which then left no descriptor for anything else). Waiters
        are let in one at a time, first come first served, each by one idle file closed for it.
        """
        if len(self._open) + self._admitted < self.settings.max_open_segments and not self._room_waiters:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._room_waiters.append(waiter)
        if self._closer is None:
            self._closer = self._tasks.start(self._hand_out_room(), name="hand-out-room")
        try:
            await waiter
        finally:
            if waiter.done() and not waiter.cancelled():
                self._admitted -= 1  # its file is opened (and counted) right after, with no await

    async def _hand_out_room(self) -> None:
        """Let the waiters of `_make_room` in, closing the file written longest ago for each."""
        limit = self.settings.max_open_segments
        try:
            while self._room_waiters:
                waiter = self._room_waiters[0]
                if waiter.done():  # cancelled
                    self._room_waiters.popleft()
                    continue
                if len(self._open) + self._admitted >= limit:
                    if not self._close_one():
                        # Every open file is being written: wait for one write, but look again at
                        # the waiters now and then (all of them may be cancelled meanwhile, at a stop).
                        self._written.clear()
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(0.1):
                                await self._written.wait()
                    continue  # look at the first waiter again (it may be cancelled by now)
                self._room_waiters.popleft()
                self._admitted += 1  # its room is taken from now, before it runs and opens its file
                waiter.set_result(None)
                await asyncio.sleep(0)  # it opens (and counts) its file before the next one is let in
        except BaseException as exc:
            # Only this loop lets a waiter in: ended, it hands each its end, or each waits for ever.
            self._fail_waiters(exc)
            raise
        finally:
            self._closer = None

    def _fail_waiters(self, exc: BaseException) -> None:
        """Raise ``exc`` (`StoreClosed` for a cancel: the store is closing) to every room waiter."""
        error = exc if isinstance(exc, Exception) else StoreClosed(
            f"log store {self.root}: closed while waiting for room to open a segment file")
        while self._room_waiters:
            waiter = self._room_waiters.popleft()
            if not waiter.done():
                waiter.set_exception(error)

    async def close(self, inst: Instance) -> None:
        """Close ``inst``'s segment file now (fsynced first if written since), out of the pool."""
        async with inst.lock:
            self._open.pop(id(inst), None)
            fd, inst.fd = inst.fd, None
            if fd is None:
                return
            try:
                if self.settings.fsync_interval_s is not None and inst.dirty:
                    await asyncio.to_thread(os.fsync, fd)
                    inst.dirty = False
            finally:
                os.close(fd)

    def _close_one(self) -> bool:
        """Close the segment file written longest ago that is not being written now (False: none).

        It reopens at its next write (`roll` appends to an intact tail). Written since the last
        flush, it is left to that flush to fsync by its path: with more busy pods than the pool
        holds, every write closes a file, and an fsync for each (in a worker thread, one waiter
        after the other) cost more than the writes themselves.
        """
        for key, inst in self._open.items():
            if inst.lock.locked():
                continue
            del self._open[key]
            fd, inst.fd = inst.fd, None
            if fd is not None:
                if inst.dirty and inst.active_seq is not None and self.settings.fsync_interval_s is not None:
                    self._closed_dirty.add(inst.segment_path(inst.active_seq))
                    inst.dirty = False
                os.close(fd)
            return True
        return False

    async def _moved_under_us(self, job_dir: Path, inst: Instance, *, landed: int, batch: bytes) -> int:
        """The active segment changed size behind the writer: take the batch back and roll.

        What was just written (``landed`` bytes) is cut off the old segment, which keeps the size
        it now has, and ``batch`` goes to a fresh segment; readers that were past the old
        segment's real end move on to the new one. Returns the bytes the new segment holds.
        """
        assert inst.fd is not None
        old = inst.segment_path(inst.active_seq or 0)
        landed_at = os.lseek(inst.fd, 0, os.SEEK_CUR) - landed
        logger.warning("log store: %s was changed by another process (its end was at %d, not %d); "
                       "going on in a new segment", old, landed_at, inst.active_size)
        os.ftruncate(inst.fd, max(0, landed_at))
        inst.active_size = max(0, landed_at)
        await self.roll(job_dir, inst, force_new=True)
        assert inst.fd is not None and inst.writing is not None
        head = inst.writing.file_header()
        write_all(inst.fd, batch, head)
        return len(head) + len(batch)

    async def roll(self, job_dir: Path, inst: Instance, *, force_new: bool = False) -> None:
        """Finish the current segment (fsync, close) and create the next one."""
        sync = self.settings.fsync_interval_s is not None
        if inst.fd is not None:
            old = inst.fd
            inst.fd = None
            if sync:
                await asyncio.to_thread(os.fsync, old)
            os.close(old)
        else:
            await self._make_room()
        if (not force_new and inst.active_seq is not None and inst.writing is not None
                and 0 < inst.active_size < self.settings.segment_bytes):
            # Reopened after a restart: keep appending to the intact (already cut) tail, if it is
            # a segment of our own format and marker (a format 1 segment is never appended to).
            with contextlib.suppress(FileNotFoundError):
                inst.fd = open_nofollow(inst.segment_path(inst.active_seq), os.O_WRONLY | os.O_APPEND)
                self._counted(inst)
                if os.lseek(inst.fd, 0, os.SEEK_END) == inst.active_size:
                    return
                os.close(inst.fd)  # not where the load left it: start a new segment
                inst.fd = None
        seqs = inst.segment_seqs()
        candidates = [0]
        if seqs:
            candidates.append(seqs[-1] + 1)
        if inst.active_seq is not None:
            candidates.append(inst.active_seq + 1)
        seq = max(candidates)
        inst.fd = open_nofollow(inst.segment_path(seq), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND)
        self._counted(inst)
        inst.writing = inst.instance_framing()
        inst.known_framing(seq, inst.writing)
        inst.active_seq = seq
        inst.active_size = 0
        self.dirty_dirs.add(inst.path)
        await self._space.new_segment(job_dir)

    def _counted(self, inst: Instance) -> None:
        """``inst`` has a segment file open: it counts in the pool (most recently used) from now."""
        self._open[id(inst)] = inst
        self._open.move_to_end(id(inst))

    async def flush(self) -> None:
        """fsync everything written so far (the group commit of the interval policy)."""
        fds: list[int] = []
        for inst in self._instances():
            if inst.dirty and inst.fd is not None:
                fds.append(os.dup(inst.fd))  # a dup stays valid even if the writer rolls over
                inst.dirty = False
        dirs = list(self.dirty_dirs)
        self.dirty_dirs.clear()
        closed, self._closed_dirty = self._closed_dirty, set()
        if fds or dirs or closed:
            await asyncio.to_thread(fsync_all, fds, dirs, closed)
