"""Bounded disk use for the log store: per-job limits by age and size.

Retention only ever deletes whole segment files (and, once everything in it has
expired, a whole pod directory). It never rewrites a file, so it cannot tear a
batch, and it never loses a resume point:

* the active (last) segment of a container instance whose log has not ended is
  never deleted for size; the follower's cursor lives in it;
* before the last segment of an instance is deleted, its cursor is saved in the
  instance's ``cursor.json``, so a follower that resumes later still resumes
  exactly (no line repeated, none lost that the kubelet still has).

This module is plain blocking file I/O; the store runs it in a worker thread.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podmortem import files
from podmortem.logs.storage import segments

logger = logging.getLogger(__name__)

SEGMENT_SUFFIX = ".seg"
#: Damaged bytes of ``<segment>.seg`` set aside in ``<segment>.seg.quarantine``; they go with it.
QUARANTINE_SUFFIX = ".quarantine"
INSTANCE_META = "instance.json"
TOMBSTONE = "cursor.json"
#: A job's own limits (``LogStore.set_job_retention``), kept in its directory so sweeps honour
#: them before the operator has set them again after a restart.
JOB_OVERRIDE = ".retention.json"


@dataclass(frozen=True)
class RetentionSettings:
    """How much log the store keeps. ``None`` switches a limit off."""

    #: Delete segments last written longer ago than this, in seconds. Default 7 days: long
    #: enough to read the log of a run that died on Friday night on Monday morning.
    max_age_s: float | None = 7 * 24 * 3600.0
    #: Bytes of log kept per job (all its pods, containers and restarts), oldest segments
    #: deleted first. Default 1 GiB: a 16-hour training run that prints progress bars and
    #: per-iteration losses writes tens to hundreds of MiB; ten such jobs fit a 10 GiB PVC.
    #: One active segment per live container is always kept, so a job can exceed this by
    #: at most ``segment_bytes`` per live container.
    max_job_bytes: int | None = 1 << 30
    #: How often the background sweep applies both limits to every job, in seconds. Size is
    #: also enforced whenever a writer starts a new segment, so this mostly serves age.
    sweep_interval_s: float = 600.0

    def __post_init__(self) -> None:
        if self.max_age_s is not None and self.max_age_s <= 0:
            raise ValueError("max_age_s must be positive or None")
        if self.max_job_bytes is not None and self.max_job_bytes <= 0:
            raise ValueError("max_job_bytes must be positive or None")
        if self.sweep_interval_s <= 0:
            raise ValueError("sweep_interval_s must be positive")


@dataclass(frozen=True, slots=True)
class SweepResult:
    deleted_segments: int = 0
    deleted_bytes: int = 0
    deleted_pods: int = 0


@dataclass
class _Segment:
    path: Path
    size: int
    mtime: float
    #: Last segment of its instance.
    last: bool
    #: Its instance's log has ended (the last batch is an end marker).
    ended: bool


def _segments_of(instance_dir: Path) -> list[_Segment]:
    names = sorted(n for n in os.listdir(instance_dir) if n.endswith(SEGMENT_SUFFIX))
    out: list[_Segment] = []
    ended = False
    if names:
        ended = _has_ended(instance_dir / names[-1])
    for i, name in enumerate(names):
        path = instance_dir / name
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        size = st.st_size
        with contextlib.suppress(FileNotFoundError):
            size += os.stat(_quarantine_of(path)).st_size
        out.append(_Segment(path, size, st.st_mtime, last=i == len(names) - 1, ended=ended))
    return out


def read_instance_meta(instance_dir: Path) -> dict[str, Any]:
    """An instance's meta (container ID, creation time, sync marker); blocking, no links followed."""
    data = json.loads(files.read_nofollow(instance_dir / INSTANCE_META))
    if not isinstance(data, dict):
        raise ValueError(f"{instance_dir / INSTANCE_META} is not a JSON object")
    return data


def meta_sync(meta: dict[str, Any]) -> bytes | None:
    """The instance's sync marker from its meta (None: an instance made before format 2)."""
    raw = meta.get("sync")
    if not isinstance(raw, str):
        return None
    try:
        sync = bytes.fromhex(raw)
    except ValueError:
        return None
    return sync if len(sync) == segments.SYNC_SIZE else None


def _segment_framing(fd: int, segment: Path) -> segments.Framing | None:
    try:
        fallback = meta_sync(read_instance_meta(segment.parent))
    except (OSError, ValueError):
        fallback = None
    return segments.read_framing(fd, fallback)


def _quarantine_of(segment: Path) -> Path:
    return segment.with_name(segment.name + QUARANTINE_SUFFIX)


def _has_ended(path: Path) -> bool:
    try:
        fd = files.open_nofollow(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        framing = _segment_framing(fd, path)
        head = framing.read_last_content_header(fd, os.fstat(fd).st_size) if framing is not None else None
    except (segments.BadBatch, OSError):
        return False  # a torn tail: the writer will repair it on open
    finally:
        os.close(fd)
    return head is not None and head.kind is segments.BatchKind.END


def instance_dirs(job_dir: Path) -> list[Path]:
    """``<job>/<pod>/<container>/<instance>`` directories under a job directory."""
    out: list[Path] = []
    for pod in _subdirs(job_dir):
        for container in _subdirs(pod):
            out.extend(_subdirs(container))
    return out


def job_dirs(root: Path) -> list[Path]:
    """``<root>/<namespace>/<job>`` directories."""
    return [job for ns in _subdirs(root) for job in _subdirs(ns)]


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if not p.name.startswith(".") and files.is_real_dir(p))
    except FileNotFoundError:
        return []


def save_tombstone(instance_dir: Path, last_segment: Path) -> None:
    """Keep the resume point of an instance whose last segment is about to go."""
    fd = files.open_nofollow(last_segment, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        framing = _segment_framing(fd, last_segment)
        if framing is None:
            return
        found = framing.read_last_header(fd, size)
        content = framing.read_last_content_header(fd, size) if found is not None else None
    finally:
        os.close(fd)
    if found is None:
        return
    head, _ = found
    data = {
        "last_ts": head.cursor_last_ts,
        "count": head.cursor_count,
        "delivered": head.cursor_delivered,
        "line_crc": head.cursor_line_crc,
        "index": head.index_after,
        "ended": content is not None and content.kind is segments.BatchKind.END,
    }
    files.write_json_atomic(instance_dir / TOMBSTONE, data)


def _delete(seg: _Segment) -> int:
    if seg.last:
        try:
            save_tombstone(seg.path.parent, seg.path)
        except FileNotFoundError:
            return 0  # already gone
    with contextlib.suppress(FileNotFoundError):
        _quarantine_of(seg.path).unlink()
    try:
        seg.path.unlink()
    except FileNotFoundError:
        return 0
    return seg.size


def job_bytes(job_dir: Path) -> int:
    return sum(seg.size for inst in instance_dirs(job_dir) for seg in _segments_of(inst))


def save_job_override(job_dir: Path, settings: RetentionSettings) -> None:
    job_dir.mkdir(parents=True, exist_ok=True)
    files.write_json_atomic(job_dir / JOB_OVERRIDE, {"max_age_s": settings.max_age_s,
                                                "max_job_bytes": settings.max_job_bytes})


def job_settings(job_dir: Path, default: RetentionSettings) -> RetentionSettings:
    """The job's own limits if it has any, else the store's."""
    try:
        data = json.loads((job_dir / JOB_OVERRIDE).read_text())
        return RetentionSettings(max_age_s=data.get("max_age_s"), max_job_bytes=data.get("max_job_bytes"),
                                 sweep_interval_s=default.sweep_interval_s)
    except FileNotFoundError:
        return default
    except (ValueError, TypeError, AttributeError) as exc:
        logger.warning("ignoring bad %s in %s: %s", JOB_OVERRIDE, job_dir, exc)
        return default


def enforce_job(
    job_dir: Path,
    settings: RetentionSettings,
    *,
    now: float | None = None,
    protected: frozenset[Path] = frozenset(),
) -> SweepResult:
    """Apply the age and size limits to one job. ``protected`` segments are never deleted."""
    now = time.time() if now is None else now
    settings = job_settings(job_dir, settings)
    segs = [seg for inst in instance_dirs(job_dir) for seg in _segments_of(inst)]
    deleted = 0
    freed = 0
    kept: list[_Segment] = []
    for seg in segs:
        expired = settings.max_age_s is not None and now - seg.mtime > settings.max_age_s
        if expired and seg.path not in protected:
            freed += _delete(seg)
            deleted += 1
        else:
            kept.append(seg)
    if settings.max_job_bytes is not None:
        total = sum(seg.size for seg in kept)
        if total > settings.max_job_bytes:
            candidates = sorted(
                (s for s in kept if s.path not in protected and (not s.last or s.ended)),
                key=lambda s: (s.mtime, s.path),
            )
            for seg in candidates:
                if total <= settings.max_job_bytes:
                    break
                size = _delete(seg)
                total -= size
                freed += size
                deleted += 1
    pods = _remove_expired_pods(job_dir, settings, now=now, protected=protected)
    if deleted or pods:
        logger.info("retention in %s: deleted %d segments (%d bytes), %d pods", job_dir, deleted, freed, pods)
    return SweepResult(deleted, freed, pods)


def _remove_expired_pods(
    job_dir: Path, settings: RetentionSettings, *, now: float, protected: frozenset[Path]
) -> int:
    """Remove pod directories that hold no segment any more and were last touched long ago."""
    if settings.max_age_s is None:
        return 0
    removed = 0
    protected_dirs = {p.parent.parent.parent for p in protected}
    for pod in _subdirs(job_dir):
        if pod in protected_dirs:
            continue
        newest = 0.0
        has_segments = False
        for dirpath, _, names in os.walk(pod):
            for name in names:
                if name.endswith(SEGMENT_SUFFIX):
                    has_segments = True
                with contextlib.suppress(FileNotFoundError):
                    newest = max(newest, os.stat(os.path.join(dirpath, name)).st_mtime)
        if not has_segments and now - newest > settings.max_age_s:
            shutil.rmtree(pod, ignore_errors=True)
            removed += 1
    if removed and not _subdirs(job_dir):
        shutil.rmtree(job_dir, ignore_errors=True)
    return removed


def sweep(root: Path, settings: RetentionSettings, *, now: float | None = None,
          protected: frozenset[Path] = frozenset()) -> SweepResult:
    """Apply retention to every job under the store's root."""
    total = SweepResult()
    for job in job_dirs(root):
        r = enforce_job(job, settings, now=now, protected=protected)
        total = SweepResult(
            total.deleted_segments + r.deleted_segments,
            total.deleted_bytes + r.deleted_bytes,
            total.deleted_pods + r.deleted_pods,
        )
    return total


def free_ratio(root: Path) -> float:
    """Fraction of the volume holding ``root`` that is free (for unprivileged writers)."""
    try:
        st = os.statvfs(root)
    except OSError:
        return 1.0
    return st.f_bavail / st.f_blocks if st.f_blocks else 1.0


def store_bytes(root: Path) -> int:
    """Bytes of every file under the store's root (segments, quarantine and meta files)."""
    total = 0
    for dirpath, _, names in os.walk(root):
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(os.path.join(dirpath, name)).st_size
    return total


def free_early(root: Path, *, min_free_ratio: float, protected: frozenset[Path] = frozenset(),
               over_budget_bytes: int = 0) -> SweepResult:
    """Delete segments, oldest first, until ``min_free_ratio`` of the volume is free and
    ``over_budget_bytes`` are freed (the store's own byte budget, which the volume cannot show:
    an emptyDir's ``sizeLimit`` is enforced by eviction, not by ENOSPC).

    Finished logs go first (an instance whose log ended), then the older segments of live
    ones (readers see a retention cut); the segment a live container writes is never taken.
    """
    def enough(freed: int) -> bool:
        return freed >= over_budget_bytes and (min_free_ratio <= 0 or free_ratio(root) >= min_free_ratio)

    if enough(0):
        return SweepResult()
    segs = [seg for job in job_dirs(root) for inst in instance_dirs(job) for seg in _segments_of(inst)]
    candidates = sorted(
        (s for s in segs if s.path not in protected and (s.ended or not s.last)),
        key=lambda s: (not s.ended, s.mtime, s.path),
    )
    deleted = freed = 0
    for seg in candidates:
        if enough(freed):
            break
        size = _delete(seg)
        if size:
            deleted += 1
            freed += size
    if deleted:
        logger.warning("log store nearly full: deleted %d segments (%d bytes) early, oldest first",
                       deleted, freed)
    return SweepResult(deleted, freed, 0)
