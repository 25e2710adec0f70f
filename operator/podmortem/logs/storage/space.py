"""The log store's disk use kept bounded: per-job retention, and early deletion when nearly full.

Retention itself (which files go, in what order) is ``retention``'s; this is when it runs: a
job's enforcement when its bytes pass its limit (one at a time per job, in the background), a
sweep of every job every ``sweep_interval_s``, and an early free when the volume (or the store's
byte budget) is nearly full. Segments a live writer appends to are never deleted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from podmortem.background import Background
from podmortem.logs.storage import layout, retention
from podmortem.logs.storage.instance import Instance
from podmortem.logs.storage.settings import StoreSettings

logger = logging.getLogger(__name__)


class StoreSpace:
    """What the store takes on disk, per job and in all, and the retention runs that bound it."""

    def __init__(self, *, root: Path, settings: StoreSettings,
                 instances: Callable[[], Iterable[Instance]], tasks: Background) -> None:
        self.root = root
        self.settings = settings
        #: Every instance the store has open (whose active segments retention must keep).
        self._instances = instances
        #: Where retention runs start (named per job, so each job has at most one at a time).
        self._tasks = tasks
        #: Bytes per job directory, counted once and then kept up to date by the writer.
        self.job_bytes: dict[Path, int] = {}
        #: Retention runs one at a time (a job's enforcement and the sweep would race on files).
        self._retention_lock = asyncio.Lock()
        #: Bytes the store takes on disk, kept up to date only when there is a budget.
        self.store_bytes: int | None = None

    async def count_store_bytes(self) -> None:
        """With a byte budget: count what the store takes (at open), and free early if over it."""
        if self.settings.max_store_bytes is not None:
            self.store_bytes = await asyncio.to_thread(retention.store_bytes, self.root)
            if self.over_budget():
                await self.free_early()

    def wrote(self, job_dir: Path, n: int) -> None:
        """``n`` more bytes are stored under ``job_dir``."""
        self.job_bytes[job_dir] = self.job_bytes.get(job_dir, 0) + n
        if self.store_bytes is not None:
            self.store_bytes += n

    def new_job(self, job_dir: Path) -> None:
        """The store just made ``job_dir``: it holds nothing but what the writer will count (no scan)."""
        self.job_bytes.setdefault(job_dir, 0)

    async def new_segment(self, job_dir: Path) -> None:
        """A segment was started: free early if nearly full, enforce the job's limit if past it."""
        floor = self.settings.min_free_ratio
        if (floor > 0 and retention.free_ratio(self.root) < floor) or self.over_budget():
            self.free_early_soon()
        limit = self.job_limit(job_dir)
        if limit is not None:
            if job_dir not in self.job_bytes:
                counted = await asyncio.to_thread(retention.job_bytes, job_dir)
                self.job_bytes.setdefault(job_dir, counted)  # another pod's count may have landed first
            if self.job_bytes[job_dir] > limit:
                self.start_retention(job_dir)

    def set_job_retention(self, *, namespace: str, job: str, settings: retention.RetentionSettings) -> None:
        """Give one job its own limits, kept in its directory; enforce them now if past them."""
        job_dir = self.root / layout.check_name("namespace", namespace) / layout.check_name("job", job)
        retention.save_job_override(job_dir, settings)
        limit = settings.max_job_bytes
        if limit is not None and self.job_bytes.get(job_dir, 0) > limit:
            self.start_retention(job_dir)

    def job_limit(self, job_dir: Path) -> int | None:
        return retention.job_settings(job_dir, self.settings.retention).max_job_bytes

    def start_retention(self, job_dir: Path) -> None:
        name = f"retention-{job_dir.relative_to(self.root)}"
        if self._tasks.running(name):
            return
        self._tasks.start(self._enforce(job_dir), name=name)

    async def _enforce(self, job_dir: Path) -> None:
        try:
            async with self._retention_lock:
                await self._enforce_locked(job_dir)
        except Exception:
            logger.exception("log store retention failed for %s", job_dir)

    async def _enforce_locked(self, job_dir: Path) -> None:
        protected = self.protected()
        result = await asyncio.to_thread(
            retention.enforce_job, job_dir, self.settings.retention, protected=protected
        )
        self.deleted(result.deleted_bytes)
        self.job_bytes[job_dir] = await asyncio.to_thread(retention.job_bytes, job_dir)

    def protected(self) -> frozenset[Path]:
        """Segments that retention must keep: the active ones of live instances of open pods."""
        out: set[Path] = set()
        for inst in self._instances():
            if inst.active_seq is not None and inst.ended is None:
                out.add(inst.segment_path(inst.active_seq))
        return frozenset(out)

    def over_budget(self) -> int:
        """Bytes to free to get back to 90% of ``max_store_bytes`` once past 95% of it (else 0)."""
        budget = self.settings.max_store_bytes
        if budget is None or self.store_bytes is None or self.store_bytes <= budget * 0.95:
            return 0
        return int(self.store_bytes - budget * 0.9)

    async def free_early(self) -> retention.SweepResult:
        """Nearly full (the volume, or the store's budget): delete the oldest logs retention may take."""
        over = self.over_budget()
        if self.settings.min_free_ratio <= 0 and not over:
            return retention.SweepResult()
        async with self._retention_lock:
            result = await asyncio.to_thread(
                retention.free_early, self.root, min_free_ratio=self.settings.min_free_ratio,
                protected=self.protected(), over_budget_bytes=over,
            )
        self.deleted(result.deleted_bytes)
        if result.deleted_bytes:
            self.job_bytes.clear()
        return result

    def deleted(self, n: int) -> None:
        if self.store_bytes is not None:
            self.store_bytes = max(0, self.store_bytes - n)

    def free_early_soon(self) -> None:
        """`free_early` in the background, unless it runs already."""
        if self._tasks.running("free-early"):
            return

        async def free() -> None:
            try:
                await self.free_early()
            except Exception:
                logger.exception("log store: freeing space early failed")

        self._tasks.start(free(), name="free-early")

    async def sweep(self) -> retention.SweepResult:
        """Apply retention to every job now."""
        async with self._retention_lock:
            result = await asyncio.to_thread(
                retention.sweep, self.root, self.settings.retention, protected=self.protected()
            )
        self.deleted(result.deleted_bytes)
        self.job_bytes.clear()
        return result
