"""The durable log store: every followed container's lines on local disk, resumable exactly.

The operator follows pod logs into this store (a PVC in the cluster) and serves
them over HTTP from it, during the run and after the pod is gone.

Layout::

    <root>/<namespace>/<job>/<pod>/<container>/<instance>/
        instance.json         the container ID of this instance (written once, atomically)
        00000000.seg ...      segments: batches of lines, gap and end markers (see segments.py)
        cursor.json           only once retention deleted the last segment: its resume point

``<instance>`` is a 4-digit sequence per container: a container restart (a new
``containerID``) starts a new instance, as the kubelet starts a new log file.
A pod outside any job is filed under its own name as the job.

Consistency: the cursor is written *in* the data. Each batch header carries the
cursor handed over with that batch, plus a CRC; on open the last segment is
scanned and cut at the first torn batch, and the cursor is read from the last
intact one. After a kill at any point, the reopened cursor covers exactly the
lines on disk: the follower resumes with no loss and no duplicate. The header
also keeps the checksum of the cursor's last line, so a resumed follower can
still tell where it was when the kubelet rotated the file inside a burst of
lines sharing one timestamp.

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

Concurrency: one process writes a store (enforced with a lock file). Readers in
the same process follow live writes through an asyncio notification. A store
opened ``read_only`` (e.g. to inspect a copied PVC) sees what is on disk.

Why one module of this size: the writer, the pod index, the reader's view and the retention hooks
all guard one on-disk layout under one lock; the format itself (segments, cursor CRCs, retention
rules) lives in modules of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from podmortem import files
from podmortem.errors import PodmortemError
from podmortem.files import open_nofollow, read_nofollow
from podmortem.logs.cursor import LogCursor
from podmortem.logs.errors import SinkFull
from podmortem.logs.events import EndReason, GapMarker, LogEnd, LogLine
from podmortem.logs.lines import LineBatch
from podmortem.logs.storage import quarantine, retention, segments
from podmortem.logs.wakeup import Wakeup

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from podmortem.logs import metrics

logger = logging.getLogger(__name__)

#: Matched whole (``fullmatch``): ``$`` would let a trailing newline through into a path.
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_LOCK_NAME = ".lock"


@dataclass(frozen=True)
class StoreSettings:
    """How the store writes; see the module docstring for what each fsync policy guarantees."""

    #: Start a new segment file once the current one holds this many bytes. Default 16 MiB:
    #: large enough that a million lines a second opens a file only every second or so,
    #: small enough that crash recovery (which reads the last segment) takes milliseconds
    #: and retention frees space in fine steps.
    segment_bytes: int = 16 << 20
    #: fsync written data at most this often, in seconds; 0: every batch; None: never.
    #: Default 1 s: a node crash loses at most a second, which the follower re-reads.
    fsync_interval_s: float | None = 1.0
    #: Per-job limits by age and size.
    retention: retention.RetentionSettings = field(default_factory=retention.RetentionSettings)
    #: Fraction of the volume kept free: below it (checked at every new segment, and when a
    #: write fails for a full volume) the oldest finished logs are deleted early, before their
    #: age or size limit. Default 5%: room for a few segments of every live container. 0: off.
    min_free_ratio: float = 0.05
    #: Bytes the whole store may take (None: no budget). For a volume whose limit the store cannot
    #: see: an emptyDir's ``sizeLimit`` is enforced by evicting the pod, not by ENOSPC. Above 95% of
    #: it the oldest finished logs are deleted early, down to 90%. The chart sets it from the
    #: emptyDir's or the claim's size.
    max_store_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.segment_bytes < 4096:
            raise ValueError("segment_bytes must be at least 4096")
        if not 0 <= self.min_free_ratio < 1:
            raise ValueError("min_free_ratio must be in [0, 1)")
        if self.max_store_bytes is not None and self.max_store_bytes < 16 * self.segment_bytes:
            raise ValueError("max_store_bytes must hold at least 16 segments")
        if self.fsync_interval_s is not None and self.fsync_interval_s < 0:
            raise ValueError("fsync_interval_s must be >= 0 or None")


#: Batches above this are encoded and written in a worker thread (see `LogStore._append`).
LARGE_BATCH_BYTES = 1 << 20


class StoreError(PodmortemError):
    """A problem with the log store itself."""


class StoreFull(StoreError, SinkFull):
    """The store's volume is full (ENOSPC or a quota); nothing of the batch was kept."""


def _is_full(exc: BaseException) -> bool:
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


#: Namespaces and containers are RFC 1123 labels: no dots, at most 63 characters.
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL_KINDS = frozenset({"namespace", "container"})


def check_name(kind: str, name: str) -> str:
    """Accept only Kubernetes object names: they become path components."""
    rule = _LABEL if kind in _LABEL_KINDS else _NAME
    if not isinstance(name, str) or not rule.fullmatch(name):
        shown = name if not isinstance(name, str) or len(name) <= 80 else name[:80] + "..."
        raise ValueError(f"{kind} {shown!r} is not a valid Kubernetes name")
    return name


def _segment_name(seq: int) -> str:
    return f"{seq:08d}{retention.SEGMENT_SUFFIX}"


def _create_instance_dir(path: Path, meta: dict[str, Any]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    files.write_json_atomic(path / retention.INSTANCE_META, meta)


def _write_all(fd: int, data: bytes, head: bytes = b"") -> None:
    """Write ``head`` then ``data`` whole (one ``writev``, no joined copy), however short the writes."""
    view = memoryview(data)
    if head:
        written = os.writev(fd, [head, view])
        if written < len(head):
            _write_all(fd, head[written:])
            written = len(head)
        view = view[written - len(head):]
    while view:
        written = os.write(fd, view)
        view = view[written:]


#: Where a reader reports damage it met in a segment: (path, offset, length).
DamageSink = Callable[[Path, int, int], None]


def _ignore_damage(_path: Path, _offset: int, _length: int) -> None:
    """An instance read outside a store (a test, a tool) counts no damage."""


class Instance:
    """One container instance's log: its files on disk and, while open, its writer state."""

    def __init__(self, *, path: Path, container: str, seq: int, container_id: str | None,
                 sync: bytes | None = None, on_damage: DamageSink | None = None) -> None:
        self.path = path
        self.container = container
        self.seq = seq
        self.container_id = container_id
        #: The instance's secret sync marker (its meta keeps it; None: made before format 2).
        self.sync = sync
        #: Each segment's framing, read once from its file header.
        self._framings: dict[int, segments.Framing | None] = {}
        #: How the active segment frames batches (set when it is opened for writing).
        self.writing: segments.Framing | None = None
        #: Lines stored so far (the running index after the last batch).
        self.index = 0
        #: The cursor as handed over with the last batch.
        self.cursor = segments.CursorFields(segments.NO_TS, 0, 0)
        #: Set once an end marker is stored.
        self.ended: LogEnd | None = None
        #: The segment being appended to and its committed size (valid batches only).
        self.active_seq: int | None = None
        self.active_size = 0
        self.fd: int | None = None
        self.dirty = False
        self.lock = asyncio.Lock()
        self.changed = Wakeup()
        #: Set when a newer instance of the same container appears.
        self.superseded = False
        #: Damage the load found (segment, range); the store counts it once.
        self.damage_found: list[tuple[Path, segments.Damage]] = []
        #: Called by readers for damage they meet: the store's own count (each range once).
        self.on_damage: DamageSink = on_damage if on_damage is not None else _ignore_damage

    def segment_path(self, seq: int) -> Path:
        return self.path / _segment_name(seq)

    def framing(self, seq: int) -> segments.Framing | None:
        """How segment ``seq`` frames its batches (blocking: reads its file header once).

        None when the header is damaged and the instance keeps no marker: the segment is then
        read as damage, never resynchronised on a guess.
        """
        if seq in self._framings:
            return self._framings[seq]
        try:
            fd = open_nofollow(self.segment_path(seq), os.O_RDONLY)
        except OSError:  # gone, or a link planted in the store: nothing to frame
            return None
        try:
            found = segments.read_framing(fd, self.sync)
        finally:
            os.close(fd)
        if found is not None:  # a file too short to tell (being created) is asked again later
            self._framings[seq] = found
        return found

    def known_framing(self, seq: int, framing: segments.Framing) -> None:
        self._framings[seq] = framing

    def instance_framing(self) -> segments.Framing:
        """The framing of the segments this instance writes (its own sync marker)."""
        if self.sync is None:
            raise StoreError(f"{self.path}: an instance without a sync marker cannot be written")
        return segments.Framing(self.sync)

    def forget_framing(self, seq: int) -> None:
        self._framings.pop(seq, None)

    def segment_seqs(self) -> list[int]:
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            return []
        suffix = retention.SEGMENT_SUFFIX
        stems = [n[: -len(suffix)] for n in names if n.endswith(suffix)]
        return sorted(int(stem) for stem in stems if stem.isdigit())

    def committed_size(self, seq: int) -> int | None:
        """Bytes of a segment that readers may read; None if the file is gone."""
        if seq == self.active_seq:
            return self.active_size
        try:
            return os.stat(self.segment_path(seq)).st_size
        except FileNotFoundError:
            return None

    def log_cursor(self) -> LogCursor:
        c = self.cursor
        return LogCursor(
            container_id=self.container_id,
            last_ts_ns=None if c.last_ts == segments.NO_TS else c.last_ts,
            count_at_last=c.count,
            delivered=c.delivered,
            last_line_crc=c.line_crc,
        )

    def notify(self) -> None:
        self.changed.set()
        self.changed = Wakeup()

    @property
    def finished(self) -> bool:
        """No more lines will come to this instance."""
        return self.ended is not None or self.superseded


def _load_instances(cdir: Path, *, container: str, writable: bool,
                    on_damage: DamageSink | None = None) -> list[Instance]:
    """Every stored instance of a container directory, oldest first (blocking file I/O)."""
    insts: list[Instance] = []
    if files.is_real_dir(cdir):
        for d in sorted(cdir.iterdir()):
            if not d.name.isdigit() or not files.is_real_dir(d):
                continue  # a symbolic link is never followed out of the store
            if not (d / retention.INSTANCE_META).exists():
                continue  # a creation interrupted before its meta landed: never written to
            insts.append(_load_instance(d, container=container, writable=writable, on_damage=on_damage))
        for older in insts[:-1]:
            older.superseded = True
    return insts


def _load_instance(
    path: Path, *, container: str, writable: bool, on_damage: DamageSink | None = None
) -> Instance:
    """Open an instance directory; repair the end of its last segment (crash recovery).

    Damage never deletes what can be read: damaged bytes are copied into a quarantine file
    next to their segment; damage inside a segment stays where it is (readers resynchronise
    past it and mark it); damage at the end (a torn write, or corruption there) is cut, and a
    damage marker is appended where it was, so readers see where bytes went missing.
    """
    meta = retention.read_instance_meta(path)
    inst = Instance(path=path, container=container, seq=int(path.name), container_id=meta.get("container_id"),
                    sync=retention.meta_sync(meta), on_damage=on_damage)
    if writable and inst.sync is None:
        # Made before format 2: its next segments get a marker, kept in the meta like a new instance's.
        inst.sync = os.urandom(segments.SYNC_SIZE)
        files.write_json_atomic(path / retention.INSTANCE_META, {**meta, "sync": inst.sync.hex()})
    seqs = inst.segment_seqs()
    result: segments.ScanResult | None = None
    removed_seq = 0
    cut: list[segments.Damage] = []
    quarantined: list[str] = []
    linked = False  # a newer "segment" was a link: writes go after it, never before it
    while seqs:
        seg = inst.segment_path(seqs[-1])
        try:
            data = read_nofollow(seg)
        except FileNotFoundError:
            seqs.pop()
            continue
        except OSError as exc:  # a link planted in the store (ELOOP): never read, never repaired
            logger.warning("log store: %s is not a file of the store (%s); skipped", seg, exc)
            seqs.pop()
            linked = True
            continue
        found = segments.scan(data, inst.sync)
        if found.framing is not None:
            inst.known_framing(seqs[-1], found.framing)
        for damage in found.damage:
            inst.damage_found.append((seg, damage))
            logger.warning("log store: %s: %d bytes at offset %d are no intact batch (%s)%s",
                           seg, damage.length, damage.offset, damage.why,
                           "; set aside in the quarantine file" if writable else "")
        if writable and found.damage:
            pieces = [(d, data[d.offset:d.offset + d.length]) for d in found.damage]
            quarantined.append(quarantine.set_aside(seg, pieces))
        tail = found.tail
        if tail is not None and writable:
            cut.append(tail)
            if found.last is None:
                seg.unlink(missing_ok=True)  # missing: a second load of the same instance got there first
            else:
                os.truncate(seg, found.valid_len)
        if found.last is None and (writable or not found.damage):
            removed_seq = seqs.pop()
            continue
        result = found
        inst.active_seq = seqs[-1]
        # A read-only store repairs nothing: its readers read up to the file's end and mark the damage.
        inst.active_size = found.valid_len if writable else len(data)
        break
    last = result.last if result is not None else None
    if last is not None and result is not None:
        inst.index = last.index_after
        inst.cursor = segments.CursorFields(last.cursor_last_ts, last.cursor_count, last.cursor_delivered,
                                            last.cursor_line_crc)
        content = result.last_content
        if content is not None and content.kind is segments.BatchKind.END:
            inst.ended = end_from_event(container, segments.decode_event(
                _read_at(inst.segment_path(inst.active_seq or 0), result.last_content_at, content)
            ))
        if result.framing is not None and result.framing.version == 2 and result.framing.sync == inst.sync:
            inst.writing = None if linked else result.framing  # appends go on in this segment
    else:
        with contextlib.suppress(FileNotFoundError):
            tomb = json.loads((path / retention.TOMBSTONE).read_text())
            inst.index = int(tomb["index"])
            crc = tomb.get("line_crc")
            inst.cursor = segments.CursorFields(
                int(tomb["last_ts"]), int(tomb["count"]), int(tomb["delivered"]),
                None if crc is None else int(crc),
            )
            if tomb.get("ended"):
                inst.ended = LogEnd(container, inst.container_id, EndReason.STOPPED)
    if cut and writable:
        _append_damage_marker(inst, cut, quarantined, removed_seq)
    return inst


def _append_damage_marker(
    inst: Instance, cut: list[segments.Damage], quarantined: list[str], removed_seq: int
) -> None:
    """Record, where the cut bytes were, that they were cut: a marker batch with the last cursor."""
    seq = inst.active_seq if inst.active_seq is not None else removed_seq
    seg = inst.segment_path(seq)
    why = "corrupt" if any(d.why == "corrupt" for d in cut) else "torn"
    data = {"bytes": sum(d.length for d in cut), "why": why, "quarantine": sorted(set(quarantined))}
    fd = open_nofollow(seg, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        empty = os.fstat(fd).st_size == 0
        framing = inst.instance_framing() if empty else inst.framing(seq)
        if framing is None:  # the segment's framing cannot be told: mark in a new segment
            os.close(fd)
            seq += 1
            seg = inst.segment_path(seq)
            fd = open_nofollow(seg, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            empty, framing = True, inst.instance_framing()
        batch = framing.encode_event(segments.BatchKind.DAMAGE, data, first_ts=segments.NO_TS,
                                     last_ts=segments.NO_TS, index=inst.index, cursor=inst.cursor)
        _write_all(fd, framing.file_header() + batch if empty else batch)
        os.fsync(fd)
        inst.known_framing(seq, framing)
        inst.active_seq = seq
        inst.active_size = os.fstat(fd).st_size
        if framing.version == 2 and framing.sync == inst.sync:
            inst.writing = framing
    finally:
        os.close(fd)


def _read_at(seg: Path, offset: int, head: segments.BatchHeader) -> bytes:
    fd = open_nofollow(seg, os.O_RDONLY)
    try:
        return os.pread(fd, head.payload_len, offset + head.header_size)
    finally:
        os.close(fd)


def end_from_event(container: str, data: dict[str, Any]) -> LogEnd:
    """The ``LogEnd`` an end batch's JSON payload stands for."""
    try:
        reason = EndReason(str(data.get("reason")))
    except ValueError:
        reason = EndReason.STOPPED
    return LogEnd(container, data.get("container_id"), reason)


class Pod:
    """A pod's stored log: its directory and its containers' instances (loaded lazily)."""

    def __init__(self, *, path: Path, namespace: str, job: str, name: str) -> None:
        self.path = path
        self.namespace = namespace
        self.job = job
        self.name = name
        self.instances: dict[str, list[Instance]] = {}
        #: Held while a container's new instance is created (its meta is written off the loop).
        self.create_lock = asyncio.Lock()
        #: Held while a container's stored instances are loaded off the loop.
        self.load_lock = asyncio.Lock()

    def container_names(self) -> list[str]:
        """Containers with a stored log: on disk, or created here (never a name only asked about)."""
        names = {name for name, insts in self.instances.items() if insts}
        with contextlib.suppress(FileNotFoundError):
            names.update(p.name for p in self.path.iterdir() if files.is_real_dir(p))
        return sorted(names)


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
        self._pods: dict[tuple[str, str], Pod] = {}
        #: Per namespace, pod name -> its directories (one per job it was filed under), built by one
        #: directory scan the first time the namespace is touched, so that finding a pod's directory
        #: costs no glob over every job. Entries whose directory is gone are dropped when looked up.
        self._pod_dirs: dict[str, dict[str, list[Path]]] = {}
        self._lock_fd: int | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._open = False
        self._dirty_dirs: set[Path] = set()
        self._job_bytes: dict[Path, int] = {}
        self._retention_running: set[Path] = set()
        #: Retention runs one at a time (a job's enforcement and the sweep would race on files).
        self._retention_lock = asyncio.Lock()
        self._freeing: asyncio.Task[None] | None = None
        #: Bytes the store takes on disk, kept up to date only when there is a budget.
        self._store_bytes: int | None = None
        #: Gap markers stored since the store opened (wired to metrics by the caller).
        self.gaps_total = 0
        #: Lines and bytes stored since the store opened.
        self.lines_total = 0
        self.bytes_total = 0
        #: Damaged bytes found in segments (at a load or by a reader), each range counted once.
        self.corrupt_bytes_total = 0
        #: Since when (epoch seconds) writes fail for a full volume; None while they succeed.
        self.full_since: float | None = None
        self._damage_seen: set[tuple[Path, int]] = set()
        #: Quarantine copies in flight (waited for at close).
        self._aside: set[asyncio.Task[None]] = set()

    # --- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if not self.read_only:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.root / _LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
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
            if self.settings.max_store_bytes is not None:
                self._store_bytes = await asyncio.to_thread(retention.store_bytes, self.root)
                if self._over_budget():
                    await self._free_early()
            loop_tasks = [self._sweep_forever()]
            if self.settings.fsync_interval_s:
                loop_tasks.append(self._flush_forever(self.settings.fsync_interval_s))
            self._tasks = [asyncio.create_task(coro) for coro in loop_tasks]
        if self._registry is not None:
            from podmortem.logs import metrics  # prometheus_client only where metrics are wanted

            self._collector = metrics.StoreCollector(self)
            self._registry.register(self._collector)
        self._open = True
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._collector is not None and self._registry is not None:
            self._registry.unregister(self._collector)
            self._collector = None
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self._aside:
            await asyncio.gather(*self._aside, return_exceptions=True)
        try:
            if not self.read_only and self.settings.fsync_interval_s is not None:
                await self.flush()
        finally:
            self._open = False
            for pod in self._pods.values():
                for insts in pod.instances.values():
                    for inst in insts:
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

    # --- pods and instances -----------------------------------------------------------------

    def sink(self, *, namespace: str, pod: str, job: str | None = None) -> PodLogSink:
        """A ``LogSink`` for one pod's containers. ``job`` groups pods for retention."""
        self._check_open()
        if self.read_only:
            raise StoreError("the log store is open read-only")
        return PodLogSink(self, self._pod(namespace, pod, job=job, create=True))

    def set_job_retention(self, *, namespace: str, job: str, settings: retention.RetentionSettings) -> None:
        """Give one job its own age and size limits (e.g. from a job annotation).

        Kept in the job's directory, so it holds across operator restarts and sweeps.
        """
        self._check_open()
        job_dir = self.root / check_name("namespace", namespace) / check_name("job", job)
        retention.save_job_override(job_dir, settings)
        limit = settings.max_job_bytes
        if limit is not None and self._job_bytes.get(job_dir, 0) > limit:
            self._start_retention(job_dir)

    def _job_limit(self, job_dir: Path) -> int | None:
        return retention.job_settings(job_dir, self.settings.retention).max_job_bytes

    def _pod(self, namespace: str, name: str, *, job: str | None = None, create: bool = False) -> Pod:
        key = (check_name("namespace", namespace), check_name("pod", name))
        pod = self._pods.get(key)
        if pod is not None:
            return pod
        path = self._find_pod_dir(namespace, name)
        if path is None and not create and self.read_only:
            # Not indexed: a directory another process made since the scan (a read-only store
            # over a live one) must still be found, so scan the namespace again before giving up.
            # (A writable store made every directory itself: no rescan per unknown name.)
            self._pod_dirs.pop(namespace, None)
            path = self._find_pod_dir(namespace, name)
        if path is not None and not self._no_links(path):
            logger.warning("log store: %s holds a symbolic link; not served", path)
            raise LogNotFound(f"no stored log for pod {namespace}/{name}")
        if path is not None:
            job = path.parent.name
        elif create:
            job = check_name("job", job or name)
            path = self.root / namespace / job / name
            if not self._no_links(path):
                raise StoreError(f"{path} holds a symbolic link; the store writes only its own directories")
            self._index_pod_dir(path)
        else:
            raise LogNotFound(f"no stored log for pod {namespace}/{name}")
        pod = Pod(path=path, namespace=namespace, job=job or name, name=name)
        self._pods[key] = pod
        return pod

    def pod_dir(self, *, namespace: str, job: str, pod: str) -> Path | None:
        """The directory the store files a pod's logs in; None where it has none or holds a link.

        Files kept beside a pod's logs (the report's timeline) go here and nowhere else: retention
        deletes them with the logs, and nothing is written or read through a link planted in the
        store. A bare pod's job is its own name. Raises ValueError for a name Kubernetes refuses.
        """
        path = self.root / check_name("namespace", namespace) / check_name("job", job) / \
            check_name("pod", pod)
        if not files.is_real_dir(path) or not self._no_links(path):
            return None
        return path

    def _no_links(self, path: Path) -> bool:
        """No component of ``path`` below the root is a symbolic link (those that exist)."""
        current = self.root
        for part in path.relative_to(self.root).parts:
            current = current / part
            if current.is_symlink():
                return False
        return True

    def _find_pod_dir(self, namespace: str, name: str) -> Path | None:
        """The pod's directory; under several jobs, the most recently modified one wins."""
        dirs = self._namespace_index(namespace).get(name)
        if not dirs:
            return None
        best: Path | None = None
        best_mtime = 0.0
        for path in list(dirs):
            try:
                mtime = path.stat().st_mtime
            except FileNotFoundError:
                dirs.remove(path)  # removed by retention (or not created yet)
                continue
            if best is None or mtime > best_mtime:
                best, best_mtime = path, mtime
        return best

    def _namespace_index(self, namespace: str) -> dict[str, list[Path]]:
        index = self._pod_dirs.get(namespace)
        if index is None:
            index = {}
            with contextlib.suppress(FileNotFoundError, NotADirectoryError), \
                    os.scandir(self.root / namespace) as jobs:
                for job in jobs:
                    if not job.is_dir(follow_symlinks=False) or job.name.startswith("."):
                        continue
                    with contextlib.suppress(FileNotFoundError, NotADirectoryError), \
                            os.scandir(job.path) as pods:
                        for entry in pods:
                            if entry.is_dir(follow_symlinks=False):
                                index.setdefault(entry.name, []).append(Path(entry.path))
            self._pod_dirs[namespace] = index
        return index

    def _index_pod_dir(self, path: Path) -> None:
        """Record a pod directory this store creates (or is about to create)."""
        index = self._pod_dirs.get(path.parent.parent.name)
        if index is None:
            return  # the namespace is scanned when first needed
        dirs = index.setdefault(path.name, [])
        if path not in dirs:
            dirs.append(path)

    def note_damage(self, path: Path, offset: int, length: int, *, set_aside: bool = True) -> None:
        """Count a damaged range of a segment once, however many loads and readers meet it.

        A reader meets damage in older segments (a load checks only the newest): a writable
        store sets those bytes aside too, in a worker thread, once.
        """
        key = (path, offset)
        if key in self._damage_seen:
            return
        if len(self._damage_seen) < 100_000:
            self._damage_seen.add(key)
        self.corrupt_bytes_total += length
        if set_aside and not self.read_only and self._open:
            task = asyncio.get_running_loop().create_task(
                asyncio.to_thread(quarantine.set_aside_range, path, offset, length)
            )
            self._aside.add(task)
            task.add_done_callback(self._aside.discard)

    def _adopt(self, insts: list[Instance]) -> list[Instance]:
        for inst in insts:
            for path, damage in inst.damage_found:
                self.note_damage(path, damage.offset, damage.length, set_aside=False)  # the load did
            inst.damage_found.clear()
        return insts

    def _instances(self, pod: Pod, container: str) -> list[Instance]:
        insts = pod.instances.get(container)
        if insts is None:
            insts = self._adopt(
                _load_instances(pod.path / container, container=container, writable=not self.read_only,
                                on_damage=self.note_damage)
            )
            pod.instances[container] = insts
        return insts

    async def _instances_off_loop(self, pod: Pod, container: str) -> list[Instance]:
        """`_instances`, loading off the event loop.

        A load reads each instance's last segment (up to ``segment_bytes``): for a thousand
        pods after a restart, gigabytes.
        """
        insts = pod.instances.get(container)
        if insts is not None:
            return insts
        # One load at a time: once a load is cached, writers may append, and a second load must not
        # take their batch in flight for a torn tail to cut.
        async with pod.load_lock:
            insts = pod.instances.get(container)
            if insts is None:
                loaded = self._adopt(await asyncio.to_thread(
                    _load_instances, pod.path / container, container=container, writable=not self.read_only,
                    on_damage=self.note_damage,
                ))
                insts = pod.instances.setdefault(container, loaded)  # a reader's load on the loop won
        return insts

    async def _new_instance(self, pod: Pod, container: str, container_id: str | None) -> Instance:
        """Create the container's next instance; the caller holds ``pod.create_lock``."""
        insts = await self._instances_off_loop(pod, container)
        seq = insts[-1].seq + 1 if insts else 0
        path = pod.path / container / f"{seq:04d}"
        # The directories and the meta write (which fsyncs) go off the event loop. The instance
        # joins the list only once its meta landed, so nothing is written where a reopen would skip.
        sync = os.urandom(segments.SYNC_SIZE)
        meta = {"container_id": container_id, "created": time.time(), "sync": sync.hex()}
        try:
            await asyncio.to_thread(_create_instance_dir, path, meta)
        except OSError as exc:
            if _is_full(exc):  # a new pod on a full volume pauses like a running one
                raise self._full(exc) from exc
            raise
        self._index_pod_dir(pod.path)
        self._dirty_dirs.add(path.parent)
        inst = Instance(path=path, container=container, seq=seq, container_id=container_id, sync=sync,
                        on_damage=self.note_damage)
        for older in insts:
            older.superseded = True
            older.notify()
        insts.append(inst)
        return inst

    def _existing_for_write(self, pod: Pod, container: str, container_id: str | None) -> Instance | None:
        """The stored instance this container ID writes to, if it needs no file written first."""
        insts = self._instances(pod, container)
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
        check_name("container", container)
        await self._instances_off_loop(pod, container)
        found = self._existing_for_write(pod, container, container_id)
        if found is not None:
            return found
        async with pod.create_lock:
            found = self._existing_for_write(pod, container, container_id)
            if found is not None:
                return found
            insts = self._instances(pod, container)
            if insts and insts[-1].container_id is None and insts[-1].index == 0:
                latest = insts[-1]  # adopt an instance that so far holds only markers
                meta: dict[str, Any] = {"container_id": container_id, "created": time.time()}
                if latest.sync is not None:
                    meta["sync"] = latest.sync.hex()
                try:
                    await asyncio.to_thread(files.write_json_atomic, latest.path / retention.INSTANCE_META,
                                            meta)
                except OSError as exc:
                    if _is_full(exc):
                        raise self._full(exc) from exc
                    raise
                latest.container_id = container_id
                return latest
            return await self._new_instance(pod, container, container_id)

    # --- writing ---------------------------------------------------------------------------------

    def _full(self, exc: OSError) -> StoreFull:
        self.full_since = self.full_since or time.time()
        return StoreFull(f"the log store's volume is full ({exc.strerror}): {self.root}")

    async def _append(self, pod: Pod, inst: Instance, encode: Callable[[Instance, segments.Framing], bytes],
                      *, durable: bool = False, large: bool = False) -> None:
        """Append one batch. ``large``: encode (CRC, framing) and write it in a worker thread.

        A workload that prints megabyte lines must not stall the event loop that every other
        follower, reader and handler shares: a 16 MiB batch costs ~30 ms of CRC and copy and
        ~100 ms of write(). The instance's lock keeps its writes in order meanwhile.
        """
        self._check_open()
        async with inst.lock:
            try:
                if inst.fd is None or inst.active_size >= self.settings.segment_bytes:
                    await self._roll(pod, inst)
            except OSError as exc:
                if _is_full(exc):  # no room for the next segment: the same pause as a failed write
                    raise self._full(exc) from exc
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
                        await asyncio.to_thread(_write_all, fd, batch, head)
                    else:
                        _write_all(fd, batch, head)
                except OSError as exc:
                    if not _is_full(exc):
                        raise
                    os.ftruncate(fd, inst.active_size)
                    # The volume is full: free what retention may take early, then try once more.
                    if not (await self._free_early()).deleted_bytes:
                        raise
                    _write_all(fd, batch, head)
                data_len = len(head) + len(batch)
                if os.lseek(inst.fd, 0, os.SEEK_CUR) != inst.active_size + data_len:
                    # Someone else truncated or appended to the segment: it no longer ends where
                    # readers think. Take the batch back and write it to a fresh segment.
                    data_len = await self._moved_under_us(pod, inst, landed=data_len, batch=batch)
            except BaseException as exc:
                # Drop whatever part landed, so the file ends at a batch boundary.
                inst.index, inst.cursor = saved
                with contextlib.suppress(OSError):
                    if inst.fd is not None:
                        os.ftruncate(inst.fd, inst.active_size)
                if isinstance(exc, OSError) and _is_full(exc):
                    raise self._full(exc) from exc
                raise
            self.full_since = None
            inst.active_size += data_len
            inst.dirty = True
            self._job_bytes[pod.path.parent] = self._job_bytes.get(pod.path.parent, 0) + data_len
            self.bytes_total += data_len
            if self._store_bytes is not None:
                self._store_bytes += data_len
            interval = self.settings.fsync_interval_s
            if interval == 0 or (durable and interval is not None):
                await asyncio.to_thread(os.fsync, inst.fd)
                inst.dirty = False
        inst.notify()

    async def _moved_under_us(self, pod: Pod, inst: Instance, *, landed: int, batch: bytes) -> int:
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
        await self._roll(pod, inst, force_new=True)
        assert inst.fd is not None and inst.writing is not None
        head = inst.writing.file_header()
        _write_all(inst.fd, batch, head)
        return len(head) + len(batch)

    async def _roll(self, pod: Pod, inst: Instance, *, force_new: bool = False) -> None:
        """Finish the current segment (fsync, close) and create the next one."""
        sync = self.settings.fsync_interval_s is not None
        if inst.fd is not None:
            old = inst.fd
            inst.fd = None
            if sync:
                await asyncio.to_thread(os.fsync, old)
            os.close(old)
        if (not force_new and inst.active_seq is not None and inst.writing is not None
                and 0 < inst.active_size < self.settings.segment_bytes):
            # Reopened after a restart: keep appending to the intact (already cut) tail, if it is
            # a segment of our own format and marker (a format 1 segment is never appended to).
            with contextlib.suppress(FileNotFoundError):
                inst.fd = open_nofollow(inst.segment_path(inst.active_seq), os.O_WRONLY | os.O_APPEND)
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
        inst.writing = inst.instance_framing()
        inst.known_framing(seq, inst.writing)
        inst.active_seq = seq
        inst.active_size = 0
        self._dirty_dirs.add(inst.path)
        floor = self.settings.min_free_ratio
        if (floor > 0 and retention.free_ratio(self.root) < floor) or self._over_budget():
            self._free_early_soon()
        job_dir = pod.path.parent
        limit = self._job_limit(job_dir)
        if limit is not None:
            if job_dir not in self._job_bytes:
                self._job_bytes[job_dir] = await asyncio.to_thread(retention.job_bytes, job_dir)
            if self._job_bytes[job_dir] > limit:
                self._start_retention(job_dir)

    def _start_retention(self, job_dir: Path) -> None:
        if job_dir in self._retention_running:
            return
        self._retention_running.add(job_dir)
        task = asyncio.create_task(self._enforce(job_dir))
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    async def _enforce(self, job_dir: Path) -> None:
        try:
            async with self._retention_lock:
                await self._enforce_locked(job_dir)
        except Exception:
            logger.exception("log store retention failed for %s", job_dir)
        finally:
            self._retention_running.discard(job_dir)

    async def _enforce_locked(self, job_dir: Path) -> None:
        protected = self._protected()
        result = await asyncio.to_thread(
            retention.enforce_job, job_dir, self.settings.retention, protected=protected
        )
        self._deleted(result.deleted_bytes)
        self._job_bytes[job_dir] = await asyncio.to_thread(retention.job_bytes, job_dir)

    def _protected(self) -> frozenset[Path]:
        """Segments that retention must keep: the active ones of live instances of open pods."""
        out: set[Path] = set()
        for pod in self._pods.values():
            for insts in pod.instances.values():
                for inst in insts:
                    if inst.active_seq is not None and inst.ended is None:
                        out.add(inst.segment_path(inst.active_seq))
        return frozenset(out)

    def _over_budget(self) -> int:
        """Bytes to free to get back to 90% of ``max_store_bytes`` once past 95% of it (else 0)."""
        budget = self.settings.max_store_bytes
        if budget is None or self._store_bytes is None or self._store_bytes <= budget * 0.95:
            return 0
        return int(self._store_bytes - budget * 0.9)

    async def _free_early(self) -> retention.SweepResult:
        """Nearly full (the volume, or the store's budget): delete the oldest logs retention may take."""
        over = self._over_budget()
        if self.settings.min_free_ratio <= 0 and not over:
            return retention.SweepResult()
        async with self._retention_lock:
            result = await asyncio.to_thread(
                retention.free_early, self.root, min_free_ratio=self.settings.min_free_ratio,
                protected=self._protected(), over_budget_bytes=over,
            )
        self._deleted(result.deleted_bytes)
        if result.deleted_bytes:
            self._job_bytes.clear()
        return result

    def _deleted(self, n: int) -> None:
        if self._store_bytes is not None:
            self._store_bytes = max(0, self._store_bytes - n)

    def _free_early_soon(self) -> None:
        if self._freeing is not None and not self._freeing.done():
            return

        async def free() -> None:
            try:
                await self._free_early()
            except Exception:
                logger.exception("log store: freeing space early failed")

        self._freeing = task = asyncio.create_task(free())
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    async def sweep(self) -> retention.SweepResult:
        """Apply retention to every job now (also runs every ``sweep_interval_s``)."""
        async with self._retention_lock:
            result = await asyncio.to_thread(
                retention.sweep, self.root, self.settings.retention, protected=self._protected()
            )
        self._deleted(result.deleted_bytes)
        self._job_bytes.clear()
        for key, pod in list(self._pods.items()):
            if not pod.path.exists() and not any(i.fd is not None for v in pod.instances.values() for i in v):
                del self._pods[key]
        return result

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

    async def flush(self) -> None:
        """fsync everything written so far (the group commit of the interval policy)."""
        fds: list[int] = []
        for pod in self._pods.values():
            for insts in pod.instances.values():
                for inst in insts:
                    if inst.dirty and inst.fd is not None:
                        fds.append(os.dup(inst.fd))  # a dup stays valid even if the writer rolls over
                        inst.dirty = False
        dirs = list(self._dirty_dirs)
        self._dirty_dirs.clear()
        if fds or dirs:
            await asyncio.to_thread(_fsync_all, fds, dirs)

    async def load_cursor(self, pod: Pod, container: str) -> LogCursor | None:
        self._check_open()
        insts = await self._instances_off_loop(pod, check_name("container", container))
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
        self.lines_total += n_lines

    async def gap(self, pod: Pod, marker: GapMarker) -> None:
        insts = await self._instances_off_loop(pod, check_name("container", marker.container))
        if insts:
            inst = insts[-1]
        else:
            async with pod.create_lock:
                insts = self._instances(pod, marker.container)
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
        self.gaps_total += 1

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
        p = self._pod(namespace, pod)
        if check_name("container", container) not in p.container_names():
            return []  # nothing cached for a name that was only asked about
        return list(self._instances(p, container))

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
        check_name("container", container)
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
        p = self._pod(namespace, pod)
        name = self._choose(p, container)
        return self._pick(p, name, self._instances(p, name), previous)

    async def find_async(self, *, namespace: str, pod: str, container: str | None = None,
                         previous: bool = False) -> Instance:
        """`find`, loading a container's instances off the event loop (a server's path)."""
        self._check_open()
        p = self._pod(namespace, pod)
        name = self._choose(p, container)
        return self._pick(p, name, await self._instances_off_loop(p, name), previous)


def _fsync_all(fds: list[int], dirs: list[Path]) -> None:
    try:
        for fd in fds:
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)
    for d in dirs:
        with contextlib.suppress(FileNotFoundError):
            dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)


class PodLogSink:
    """The ``LogSink`` of one pod: what the follower writes lines, gaps and ends into."""

    def __init__(self, store: LogStore, pod: Pod) -> None:
        self._store = store
        self._pod = pod

    @property
    def namespace(self) -> str:
        return self._pod.namespace

    @property
    def pod(self) -> str:
        return self._pod.name

    @property
    def job(self) -> str:
        return self._pod.job

    async def load_cursor(self, container: str) -> LogCursor | None:
        return await self._store.load_cursor(self._pod, container)

    async def write(self, container: str, lines: Sequence[LogLine], cursor: LogCursor) -> None:
        await self._store.write(self._pod, container, lines, cursor)

    async def gap(self, marker: GapMarker) -> None:
        await self._store.gap(self._pod, marker)

    async def end(self, end: LogEnd) -> None:
        await self._store.end(self._pod, end)
