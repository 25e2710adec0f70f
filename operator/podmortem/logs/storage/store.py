"""The durable log store: every followed container's lines on local disk, resumable exactly.

The operator follows pod logs into this store (a PVC in the cluster) and serves
them over HTTP from it, during the run and after the pod is gone. Its parts, one module each:
where things are on disk (``layout``), the pods and their instances (``pods``, ``instance``), the
append path and its fsync policy (``writing``), crash recovery (``recovery``), damage
(``damage``, ``quarantine``), disk use (``space``, ``retention``), the record format
(``segments``) and reading back (``reading``). This module opens and closes a store and hands
writes and reads to those parts.

Consistency: the cursor is written *in* the data. Each batch header carries the
cursor handed over with that batch, plus a CRC; on open the last segment is
scanned and cut at the first torn batch, and the cursor is read from the last
intact one. After a kill at any point, the reopened cursor covers exactly the
lines on disk: the follower resumes with no loss and no duplicate. The header
also keeps the checksum of the cursor's last line, so a resumed follower can
still tell where it was when the kubelet rotated the file inside a burst of
lines sharing one timestamp.

Concurrency: one process writes a store (enforced with a lock file). Readers in
the same process follow live writes through an asyncio notification. A store
opened ``read_only`` (e.g. to inspect a copied PVC) sees what is on disk. Its background tasks
(the retention sweep, the fsync interval, a job's retention, an early free, quarantine copies)
run under ``podmortem.background``: named, logged on failure, stopped at close.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from podmortem import files
from podmortem.background import Background
from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import GapMarker, LogEnd, LogLine
from podmortem.logs.lines import LineBatch
from podmortem.logs.storage import layout, retention, segments
from podmortem.logs.storage.damage import DamageLedger
from podmortem.logs.storage.errors import (
    ContainerRequired,
    LogNotFound,
    StoreClosed,
    StoreError,
    StoreFull,
    StoreLocked,
    is_full,
)
from podmortem.logs.storage.instance import DamageSink, Instance
from podmortem.logs.storage.layout import check_name
from podmortem.logs.storage.pods import Pod, PodIndex
from podmortem.logs.storage.recovery import end_from_event
from podmortem.logs.storage.settings import StoreSettings
from podmortem.logs.storage.sink import PodLogSink
from podmortem.logs.storage.space import StoreSpace
from podmortem.logs.storage.totals import StoreTotals
from podmortem.logs.storage.writing import LARGE_BATCH_BYTES, SegmentWriter

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from podmortem.logs import metrics

#: Names callers import from here, wherever they are defined now.
__all__ = [
    "LARGE_BATCH_BYTES", "ContainerRequired", "DamageSink", "Instance", "LogNotFound", "LogStore", "Pod",
    "PodLogSink", "StoreClosed", "StoreError", "StoreFull", "StoreLocked", "StoreSettings", "check_name",
    "end_from_event",
]

logger = logging.getLogger(__name__)


class LogStore:
    """Durable, bounded, resumable storage of pod logs under one directory.

    Use as ``async with LogStore(path) as store``; get a ``LogSink`` for a pod
    with ``store.sink(namespace=..., pod=..., job=...)``; read back with
    ``podmortem.logs.storage.reading``.
    """

    def __init__(self, root: str | os.PathLike[str], *, settings: StoreSettings | None = None,
                 read_only: bool = False, registry: CollectorRegistry | None = None) -> None:
        self.root = Path(root)
        #: Where the store's counters are exported while it is open (None: nowhere).
        self._registry = registry
        self._collector: metrics.StoreCollector | None = None
        self.settings = settings or StoreSettings()
        self.read_only = read_only
        self._lock_fd: int | None = None
        self._open = False
        #: The retention sweep, the fsync interval, retention runs and early frees.
        self._tasks = Background("log-store")
        self._totals = StoreTotals()
        self._damage = DamageLedger(self._totals)
        self._pods = PodIndex(root=self.root, read_only=read_only, damage=self._damage,
                              on_damage=self.note_damage)
        self._space = StoreSpace(root=self.root, settings=self.settings, instances=self._pods.all_instances,
                                 tasks=self._tasks)
        self._writer = SegmentWriter(root=self.root, settings=self.settings, space=self._space,
                                     totals=self._totals, instances=self._pods.all_instances,
                                     tasks=self._tasks)

    # --- totals (what the store's metrics export) ------------------------------------------------

    @property
    def lines_total(self) -> int:
        """Lines stored since the store opened."""
        return self._totals.lines_total

    @property
    def bytes_total(self) -> int:
        """Bytes stored since the store opened."""
        return self._totals.bytes_total

    @property
    def gaps_total(self) -> int:
        """Gap markers stored since the store opened."""
        return self._totals.gaps_total

    @property
    def corrupt_bytes_total(self) -> int:
        """Damaged bytes found in segments (at a load or by a reader), each range counted once."""
        return self._totals.corrupt_bytes_total

    @property
    def full_since(self) -> float | None:
        """Since when (epoch seconds) writes fail for a full volume; None while they succeed."""
        return self._totals.full_since

    # --- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if not self.read_only:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.root / layout.LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EAGAIN, errno.EACCES):
                    raise StoreLocked(f"another process is writing the log store at {self.root}") from exc
                raise
            self._lock_fd = fd
            self._open = True
            await self.sweep()
            await self._space.count_store_bytes()
            self._tasks.start(self._sweep_forever(), name="retention-sweep", eternal=True)
            if self.settings.fsync_interval_s:
                self._tasks.start(self._flush_forever(self.settings.fsync_interval_s), name="fsync",
                                  eternal=True)
        if self._registry is not None:
            from podmortem.logs import metrics  # prometheus_client only where metrics are wanted

            self._collector = metrics.StoreCollector(self._totals)
            self._registry.register(self._collector)
        self._open = True
        return self

    async def take_over(self, *, stop: asyncio.Event | None = None, retry_s: float = 0.5) -> bool:
        """Become the writer of a store opened ``read_only`` over a live one (a standby's, on winning the
        Lease): wait for the lock the previous writer holds until it exits (the kernel frees it when
        a killed process goes), forget what was loaded read-only, and start as a writer's open does.
        Each instance is then loaded anew from disk: its torn tail cut, its cursor read back.

        False if ``stop`` was set before the lock came.
        """
        if not self.read_only:
            return True
        self._check_open()
        fd = os.open(self.root / layout.LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        waited = False
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                if not waited:
                    logger.warning("log store %s: another process still writes it; waiting for its lock",
                                   self.root)
                    waited = True
                if stop is None:
                    await asyncio.sleep(retry_s)
                    continue
                try:
                    async with asyncio.timeout(retry_s):
                        await stop.wait()
                    os.close(fd)
                    return False
                except TimeoutError:
                    pass
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd
        for inst in self._pods.all_instances():  # loaded read-only: readers of these end, new ones reload
            if inst.fd is not None:
                os.close(inst.fd)
                inst.fd = None
            inst.superseded = True
            inst.notify()
        self._pods.reset(read_only=False)
        self.read_only = False
        await self.sweep()
        await self._space.count_store_bytes()
        self._tasks.start(self._sweep_forever(), name="retention-sweep", eternal=True)
        if self.settings.fsync_interval_s:
            self._tasks.start(self._flush_forever(self.settings.fsync_interval_s), name="fsync", eternal=True)
        logger.info("log store %s: now its writer%s", self.root, " (the lock came)" if waited else "")
        return True

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._collector is not None and self._registry is not None:
            self._registry.unregister(self._collector)
            self._collector = None
        await self._tasks.close()
        await self._damage.wait()
        try:
            if not self.read_only and self.settings.fsync_interval_s is not None:
                await self.flush()
        finally:
            self._open = False
            for inst in self._pods.all_instances():
                if inst.fd is not None:
                    os.close(inst.fd)
                    inst.fd = None
                inst.superseded = True  # wake followers: nothing more comes from this store
                inst.notify()
            self._pods.clear()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def _check_open(self) -> None:
        if not self._open:
            raise StoreClosed("the log store is not open")

    @property
    def is_open(self) -> bool:
        return self._open

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.retention.sweep_interval_s)
            try:
                await self.sweep()
            except Exception:
                logger.exception("log store retention sweep failed")

    async def _flush_forever(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self.flush()
            except Exception:
                logger.exception("log store fsync failed")

    # --- pods and instances -----------------------------------------------------------------

    def sink(self, *, namespace: str, pod: str, job: str | None = None) -> PodLogSink:
        """A ``LogSink`` for one pod's containers. ``job`` groups pods for retention."""
        self._check_open()
        if self.read_only:
            raise StoreError("the log store is open read-only")
        return PodLogSink(self, self._pods.get(namespace, pod, job=job, create=True))

    def set_job_retention(self, *, namespace: str, job: str, settings: retention.RetentionSettings) -> None:
        """Give one job its own age and size limits (e.g. from a job annotation).

        Kept in the job's directory, so it holds across operator restarts and sweeps.
        """
        self._check_open()
        self._space.set_job_retention(namespace=namespace, job=job, settings=settings)

    def pod_for_write(self, released: Pod) -> Pod:
        """The index's object for a pod it released (loaded again from disk if none is held)."""
        return self._pods.get(released.namespace, released.name, job=released.job, create=True)

    def release(self, *, namespace: str, pod: str) -> None:
        """The pod's follower is done (the pod was deleted, or finished long ago): close its segment
        files still in the pool and let go of what the store holds of it in memory, in the
        background. Its log stays on disk and is loaded again for a reader."""
        if not self._open or self.read_only:
            return
        try:
            key = layout.check_name("namespace", namespace), layout.check_name("pod", pod)
        except ValueError:
            return
        self._tasks.start(self._release(key), name=f"release-{namespace}/{pod}")

    async def _release(self, key: tuple[str, str]) -> bool:
        held = self._pods.held(*key)
        if held is None:
            return False
        for insts in list(held.instances.values()):
            for inst in list(insts):
                if inst.fd is not None:
                    await self._writer.close(inst)
        return self._pods.release(*key)

    def pod_dir(self, *, namespace: str, job: str, pod: str) -> Path | None:
        """The directory the store files a pod's logs in; None where it has none or holds a link.

        Files kept beside a pod's logs (the report's timeline) go here and nowhere else: retention
        deletes them with the logs, and nothing is written or read through a link planted in the
        store. A bare pod's job is its own name. Raises ValueError for a name Kubernetes refuses.
        """
        return self._pods.pod_dir(namespace=namespace, job=job, pod=pod)

    def note_damage(self, path: Path, offset: int, length: int, *, set_aside: bool = True) -> None:
        """Count a damaged range of a segment once, however many loads and readers meet it.

        A reader meets damage in older segments (a load checks only the newest): a writable
        store sets those bytes aside too, in a worker thread, once.
        """
        self._damage.note(path, offset, length, set_aside=set_aside and not self.read_only and self._open)

    async def _new_instance(self, pod: Pod, container: str, container_id: str | None) -> Instance:
        """Create the container's next instance; the caller holds ``pod.create_lock``."""
        insts = await self._pods.instances_off_loop(pod, container)
        seq = insts[-1].seq + 1 if insts else 0
        path = pod.path / container / layout.instance_dir_name(seq)
        # The directories and the meta write (which fsyncs) go off the event loop. The instance
        # joins the list only once its meta landed, so nothing is written where a reopen would skip.
        sync = os.urandom(segments.SYNC_SIZE)
        meta = {"container_id": container_id, "created": time.time(), "sync": sync.hex()}
        try:
            made_job = await asyncio.to_thread(layout.create_instance_dir, path, meta)
        except OSError as exc:
            if is_full(exc):  # a new pod on a full volume pauses like a running one
                raise self._writer.full(exc) from exc
            raise
        if made_job:
            self._space.new_job(pod.path.parent)
        self._pods.index_pod_dir(pod.path)
        self._writer.dirty_dirs.add(path.parent)
        inst = Instance(path=path, container=container, seq=seq, container_id=container_id, sync=sync,
                        on_damage=self.note_damage)
        for older in insts:
            older.superseded = True
            older.notify()
        insts.append(inst)
        return inst

    def _existing_for_write(self, pod: Pod, container: str, container_id: str | None) -> Instance | None:
        """The stored instance this container ID writes to, if it needs no file written first."""
        insts = self._pods.instances(pod, container)
        if not insts:
            return None
        latest = insts[-1]
        if container_id is None or latest.container_id == container_id:
            return latest
        if latest.container_id is None and latest.index == 0:
            return None  # to be adopted: its meta must be rewritten
        for inst in insts[:-1]:
            if inst.container_id == container_id:
                return inst  # draining a previous instance
        return None

    async def _instance_for_write(self, pod: Pod, container: str, container_id: str | None) -> Instance:
        layout.check_name("container", container)
        await self._pods.instances_off_loop(pod, container)
        found = self._existing_for_write(pod, container, container_id)
        if found is not None:
            return found
        async with pod.create_lock:
            found = self._existing_for_write(pod, container, container_id)
            if found is not None:
                return found
            insts = self._pods.instances(pod, container)
            if insts and insts[-1].container_id is None and insts[-1].index == 0:
                latest = insts[-1]  # adopt an instance that so far holds only markers
                meta: dict[str, Any] = {"container_id": container_id, "created": time.time()}
                if latest.sync is not None:
                    meta["sync"] = latest.sync.hex()
                try:
                    await asyncio.to_thread(files.write_json_atomic, latest.path / retention.INSTANCE_META,
                                            meta)
                except OSError as exc:
                    if is_full(exc):
                        raise self._writer.full(exc) from exc
                    raise
                latest.container_id = container_id
                return latest
            return await self._new_instance(pod, container, container_id)

    # --- writing ---------------------------------------------------------------------------------

    async def _append(self, pod: Pod, inst: Instance, encode: Callable[[Instance, segments.Framing], bytes],
                      *, durable: bool = False, large: bool = False) -> None:
        """Append one batch to ``inst`` (see ``writing``); the store must be open."""
        self._check_open()
        await self._writer.append(pod.path.parent, inst, encode, durable=durable, large=large)

    async def sweep(self) -> retention.SweepResult:
        """Apply retention to every job now (also runs every ``sweep_interval_s``)."""
        result = await self._space.sweep()
        self._pods.prune()
        return result

    async def flush(self) -> None:
        """fsync everything written so far (the group commit of the interval policy)."""
        await self._writer.flush()

    async def load_cursor(self, pod: Pod, container: str) -> LogCursor | None:
        self._check_open()
        insts = await self._pods.instances_off_loop(pod, layout.check_name("container", container))
        if not insts:
            return None
        return insts[-1].log_cursor()

    async def write(self, pod: Pod, container: str, lines: Sequence[LogLine], cursor: LogCursor) -> None:
        if not lines:
            return
        inst = await self._instance_for_write(pod, container, cursor.container_id)
        fields = segments.CursorFields(
            segments.NO_TS if cursor.last_ts_ns is None else cursor.last_ts_ns,
            cursor.count_at_last, cursor.delivered, cursor.last_line_crc,
        )

        # A LineBatch (the follower's) is stored as the raw block it came in; other lines columnar.
        batch = lines if isinstance(lines, LineBatch) else None
        raw = batch.raw if batch is not None else None
        n_lines = len(lines)

        def encode(inst: Instance, framing: segments.Framing) -> bytes:
            if batch is not None and raw is not None:
                data = framing.encode_raw(raw, n_lines=n_lines, first_ts=batch.first_ts_ns,
                                           last_ts=batch.last_ts_ns, index_before=inst.index, cursor=fields)
            else:
                data = framing.encode_lines(lines, index_before=inst.index, cursor=fields)
            inst.index += n_lines
            inst.cursor = fields
            return data

        size = len(raw) if raw is not None else sum(len(line.text) for line in lines)
        await self._append(pod, inst, encode, large=size > LARGE_BATCH_BYTES)
        self._totals.lines_total += n_lines

    async def gap(self, pod: Pod, marker: GapMarker) -> None:
        insts = await self._pods.instances_off_loop(pod, layout.check_name("container", marker.container))
        if insts:
            inst = insts[-1]
        else:
            async with pod.create_lock:
                insts = self._pods.instances(pod, marker.container)
                inst = insts[-1] if insts else await self._new_instance(pod, marker.container, None)
        data = {"reason": str(marker.reason), "after_ts_ns": marker.after_ts_ns,
                "before_ts_ns": marker.before_ts_ns, "detail": marker.detail}

        def encode(inst: Instance, framing: segments.Framing) -> bytes:
            return framing.encode_event(
                segments.BatchKind.GAP, data,
                first_ts=segments.NO_TS if marker.after_ts_ns is None else marker.after_ts_ns,
                last_ts=segments.NO_TS if marker.before_ts_ns is None else marker.before_ts_ns,
                index=inst.index, cursor=inst.cursor,
            )

        await self._append(pod, inst, encode)
        self._totals.gaps_total += 1

    async def end(self, pod: Pod, end: LogEnd) -> None:
        inst = await self._instance_for_write(pod, end.container, end.container_id)
        if inst.ended is not None:
            return  # already ended: keep the first reason
        data = {"reason": str(end.reason), "container_id": end.container_id}

        def encode(inst: Instance, framing: segments.Framing) -> bytes:
            return framing.encode_event(segments.BatchKind.END, data, first_ts=segments.NO_TS,
                                         last_ts=segments.NO_TS, index=inst.index, cursor=inst.cursor)

        await self._append(pod, inst, encode, durable=True)
        inst.ended = end
        inst.notify()

    # --- reading ---------------------------------------------------------------------------------

    def instances(self, *, namespace: str, pod: str, container: str) -> list[Instance]:
        """Every stored instance of a container, oldest first (one per container restart)."""
        self._check_open()
        p = self._pods.get(namespace, pod)
        if layout.check_name("container", container) not in p.container_names():
            return []  # nothing cached for a name that was only asked about
        return list(self._pods.instances(p, container))

    def _choose(self, p: Pod, container: str | None) -> str:
        names = p.container_names()
        if container is None:
            if len(names) == 1:
                return names[0]
            if not names:
                raise LogNotFound(f"no stored log for pod {p.namespace}/{p.name}")
            raise ContainerRequired(
                f"pod {p.namespace}/{p.name} has several containers; choose one of: {', '.join(names)}", names
            )
        layout.check_name("container", container)
        if container not in names:
            # Not loaded, not cached: a request for any name must not change what the next one sees.
            raise LogNotFound(f"no stored log for container {container!r} of pod {p.namespace}/{p.name}")
        return container

    @staticmethod
    def _pick(p: Pod, container: str, insts: list[Instance], previous: bool) -> Instance:
        if not insts:
            raise LogNotFound(f"no stored log for container {container!r} of pod {p.namespace}/{p.name}")
        if previous:
            if len(insts) < 2:
                raise LogNotFound(
                    f"no previous instance of container {container!r} of pod {p.namespace}/{p.name}"
                )
            return insts[-2]
        return insts[-1]

    def find(self, *, namespace: str, pod: str, container: str | None = None,
             previous: bool = False) -> Instance:
        """The stored instance to read: the latest of the container, or the one before it."""
        self._check_open()
        p = self._pods.get(namespace, pod)
        name = self._choose(p, container)
        return self._pick(p, name, self._pods.instances(p, name), previous)

    async def find_async(self, *, namespace: str, pod: str, container: str | None = None,
                         previous: bool = False) -> Instance:
        """`find`, loading a container's instances off the event loop (a server's path)."""
        self._check_open()
        p = self._pods.get(namespace, pod)
        name = self._choose(p, container)
        return self._pick(p, name, await self._pods.instances_off_loop(p, name), previous)
