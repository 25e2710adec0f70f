"""The per-epoch memory line: what the trainer, its pod and its workers hold.

One line per epoch in the training log, for people and for the operator (which
reads it back with ``podmortem.memory_line.parse``). The format is a contract::

    -> memory epoch 30: rss 3.00GiB (peak 36.00GiB), pod 5.00GiB of 64.00GiB (peak 40.00GiB),
       cuda reserved 8.00GiB (peak allocated 6.00GiB), workers 2 pss 1.20GiB

(shown on two lines here; the log has it on one.)

- ``rss``/``peak``: this process's VmRSS/VmHWM. They miss fork copies held by workers.
- ``pod``: the process's own memory cgroup (what the pod limit is enforced on):
  usage ``of`` the effective limit, or ``of unlimited``; then ``(peak X)`` from the
  kernel's counter (v1 ``memory.max_usage_in_bytes``, v2 ``memory.peak``), or
  ``(seen peak X)`` where the kernel keeps none (v2 before 5.19): the running
  maximum of what this process sampled, a lower bound. With the sampler thread
  running, ``, epoch peak X`` follows: the highest usage sampled since the previous
  line, so an evaluation's peak is attributed to its epoch. ``pod unknown`` when
  no memory cgroup is readable.
- ``cuda``: only when this process has initialised CUDA; never faked.
- ``workers``: live descendant processes (DataLoader workers, a fork server) and
  their summed PSS from ``/proc/PID/smaps_rollup``. PSS, not USS: a stale
  fork copy is shared by the workers, so it is private to none of them.

Sizes are binary units with two decimals, scaled so three significant digits
survive: ``B`` (whole bytes, below 1 KiB), ``KiB``, ``MiB``, ``GiB``, ``TiB``.
A printed size is within 0.5% (half of the last digit) of the true byte count.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from podmortem_runtime import own_cgroup, procfs

MARKER = "-> memory epoch"
_UNITS = (("KiB", 1024), ("MiB", 1024**2), ("GiB", 1024**3), ("TiB", 1024**4))


def format_bytes(value: int) -> str:
    """``1536 -> '1.50KiB'``; whole bytes below 1 KiB; never ``0.00GiB`` for a small non-zero value."""
    if value < 0:
        raise ValueError(f"a memory size cannot be negative: {value}")
    if value < 1024:
        return f"{value}B"
    for unit, size in _UNITS:
        text = f"{value / size:.2f}"
        # Scale up once the rounded figure reaches 1024, so "1024.00MiB" prints as "1.00GiB".
        if float(text) < 1024 or unit == "TiB":
            return f"{text}{unit}"
    raise AssertionError("unreachable: TiB always returns")


@dataclass(frozen=True)
class PodMemory:
    usage_bytes: int
    limit_bytes: int | None
    """None means no limit anywhere up the cgroup tree."""
    peak_bytes: int
    peak_is_sampled: bool
    """True where the kernel keeps no peak and ``peak_bytes`` is the highest usage this process saw."""
    epoch_peak_bytes: int | None = None
    """Highest usage the sampler thread saw since the previous line; None without the sampler."""


@dataclass(frozen=True)
class MemorySnapshot:
    """Everything one memory line prints, in bytes."""

    rss_bytes: int
    rss_peak_bytes: int
    pod: PodMemory | None
    cuda_reserved_bytes: int | None = None
    cuda_peak_allocated_bytes: int | None = None
    workers: int | None = None
    workers_pss_bytes: int | None = None


def format_line(epoch: int, snap: MemorySnapshot) -> str:
    parts = [f"rss {format_bytes(snap.rss_bytes)} (peak {format_bytes(snap.rss_peak_bytes)})"]
    if snap.pod is None:
        parts.append("pod unknown")
    else:
        pod = snap.pod
        limit = "unlimited" if pod.limit_bytes is None else format_bytes(pod.limit_bytes)
        label = "seen peak" if pod.peak_is_sampled else "peak"
        extra = "" if pod.epoch_peak_bytes is None else f", epoch peak {format_bytes(pod.epoch_peak_bytes)}"
        parts.append(
            f"pod {format_bytes(pod.usage_bytes)} of {limit} ({label} {format_bytes(pod.peak_bytes)}{extra})"
        )
    if snap.cuda_reserved_bytes is not None and snap.cuda_peak_allocated_bytes is not None:
        parts.append(
            f"cuda reserved {format_bytes(snap.cuda_reserved_bytes)} "
            f"(peak allocated {format_bytes(snap.cuda_peak_allocated_bytes)})"
        )
    if snap.workers is not None and snap.workers_pss_bytes is not None:
        parts.append(f"workers {snap.workers} pss {format_bytes(snap.workers_pss_bytes)}")
    return f"{MARKER} {epoch}: " + ", ".join(parts)


class PeakSampler:
    """A daemon thread sampling the cgroup's usage, so peaks between two lines are not missed.

    Usage read at the end of an epoch misses an evaluation's peak, and on cgroup v2
    before 5.19 there is no kernel peak at all. Reading ``memory.current`` or
    ``memory.usage_in_bytes`` costs microseconds.
    """

    def __init__(self, cgroup: own_cgroup.OwnCgroup, *, interval_s: float = 0.2) -> None:
        """``interval_s``: seconds between samples. 0.2 s catches an evaluation's fork copy,
        which lives as long as the evaluation (seconds to hours), at no measurable cost."""
        self.cgroup = cgroup
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._since_take = 0
        self._running_max = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> PeakSampler:
        if self._thread is None:
            self.sample()
            self._thread = threading.Thread(target=self._run, name="podmortem-memory-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def sample(self) -> int | None:
        try:
            usage = self.cgroup.usage()
        except (OSError, ValueError):
            return None
        self.observe(usage)
        return usage

    def observe(self, usage: int) -> None:
        with self._lock:
            self._since_take = max(self._since_take, usage)
            self._running_max = max(self._running_max, usage)

    @property
    def running_max(self) -> int:
        with self._lock:
            return self._running_max

    def take_since_last(self) -> int:
        """The highest usage since the previous call, and start a new interval."""
        with self._lock:
            value, self._since_take = self._since_take, 0
            return value

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()


_default_sampler: PeakSampler | None = None
_cgroup_cache: list[own_cgroup.OwnCgroup | None] = []
_seen_max: dict[Path, int] = {}  # per cgroup: the highest usage this process has seen
_seen_lock = threading.Lock()


def _cgroup() -> own_cgroup.OwnCgroup | None:
    if not _cgroup_cache:
        _cgroup_cache.append(own_cgroup.find_own_cgroup())
    return _cgroup_cache[0]


def start_sampler(*, interval_s: float = 0.2) -> PeakSampler | None:
    """Start the process-wide sampler that ``memory_line`` reads; None where no cgroup is readable."""
    global _default_sampler
    if _default_sampler is None:
        cgroup = _cgroup()
        if cgroup is None:
            return None
        _default_sampler = PeakSampler(cgroup, interval_s=interval_s).start()
    return _default_sampler


def stop_sampler() -> None:
    global _default_sampler
    if _default_sampler is not None:
        _default_sampler.stop()
        _default_sampler = None


def _pod_memory(cgroup: own_cgroup.OwnCgroup, sampler: PeakSampler | None) -> PodMemory | None:
    try:
        usage = cgroup.usage()
        limit = cgroup.limit()
    except (OSError, ValueError):
        return None
    kernel_peak = cgroup.peak()
    epoch_peak = None
    if sampler is not None:
        sampler.observe(usage)
        epoch_peak = sampler.take_since_last()
    with _seen_lock:
        seen = max(_seen_max.get(cgroup.path, 0), usage, sampler.running_max if sampler is not None else 0)
        _seen_max[cgroup.path] = seen
    if kernel_peak is not None:
        return PodMemory(usage, limit, max(kernel_peak, usage), False, epoch_peak)
    return PodMemory(usage, limit, seen, True, epoch_peak)


def _cuda() -> tuple[int, int] | None:
    """(reserved, peak allocated) on the current device, only if this process already uses CUDA."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None  # not imported: this process cannot have used a GPU through torch
    cuda = torch.cuda
    if not cuda.is_initialized():
        return None
    device = cuda.current_device()
    return int(cuda.memory_reserved(device)), int(cuda.max_memory_allocated(device))


def _workers() -> tuple[int, int]:
    pids = procfs.descendant_pids()
    total = 0
    for pid in pids:
        pss = procfs.read_pss(pid)
        if pss is not None:
            total += pss
    return len(pids), total


def take_snapshot(*, sampler: PeakSampler | None = None) -> MemorySnapshot:
    """Read everything the line prints. ``sampler`` defaults to the one ``start_sampler`` started."""
    sampler = sampler if sampler is not None else _default_sampler
    own = procfs.read_status()
    cgroup = sampler.cgroup if sampler is not None else _cgroup()
    pod = _pod_memory(cgroup, sampler) if cgroup is not None else None
    cuda = _cuda()
    workers, pss = _workers()
    return MemorySnapshot(
        rss_bytes=own.rss_bytes,
        rss_peak_bytes=own.peak_bytes,
        pod=pod,
        cuda_reserved_bytes=cuda[0] if cuda else None,
        cuda_peak_allocated_bytes=cuda[1] if cuda else None,
        workers=workers,
        workers_pss_bytes=pss,
    )


def memory_line(epoch: int, *, sampler: PeakSampler | None = None) -> str:
    """The memory line for ``epoch``; cheap enough to call every epoch (a few /proc reads)."""
    return format_line(epoch, take_snapshot(sampler=sampler))
