"""The per-epoch memory line, as the TrainingJob status shows it and the early warning reads it. Pure."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from podmortem.control.early_warning import EpochPeak
from podmortem.memory_line import MemoryLine

_UNITS = (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def short_size(value: int) -> str:
    """``31242766336 -> '29.1Gi'``: what fits a printer column."""
    for unit, size in _UNITS:
        if value >= size:
            scaled = value / size
            text = f"{scaled:.1f}".rstrip("0").rstrip(".") if scaled < 100 else f"{scaled:.0f}"
            return f"{text}{unit}"
    return f"{value}B"


def peak_of_limit(peak: int | None, limit: int | None) -> str | None:
    if peak is None:
        return None
    if not limit:
        return f"{short_size(peak)}/unlimited"
    return f"{short_size(peak)}/{short_size(limit)} ({peak / limit:.0%})"


def status_memory(line: MemoryLine, *, observed_ns: int) -> dict[str, Any]:
    """``status.memory`` of the CRD, from one parsed line seen at ``observed_ns``."""
    observed = datetime.fromtimestamp(observed_ns / 1e9, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out: dict[str, Any] = {
        "epoch": line.epoch,
        "observedAt": observed,
        "rssBytes": line.rss_bytes,
    }
    if line.pod is not None:
        out["podUsageBytes"] = line.pod.usage_bytes
        if line.pod.limit_bytes is not None:
            out["podLimitBytes"] = line.pod.limit_bytes
        out["podPeakBytes"] = line.pod.peak_bytes
        text = peak_of_limit(line.pod.peak_bytes, line.pod.limit_bytes)
        if text is not None:
            out["peakOfLimit"] = text
    if line.cuda is not None:
        out["cudaReservedBytes"] = line.cuda.reserved_bytes
        out["cudaPeakAllocatedBytes"] = line.cuda.peak_allocated_bytes
    if line.workers is not None:
        out["workers"] = line.workers.count
        out["workersPssBytes"] = line.workers.pss_bytes
    return out


def epoch_peak(line: MemoryLine) -> EpochPeak | None:
    """The peak the early warning tracks: this epoch's own peak where sampled, else the pod's peak."""
    if line.pod is None:
        return None
    peak = line.pod.epoch_peak_bytes if line.pod.epoch_peak_bytes is not None else line.pod.peak_bytes
    return EpochPeak(epoch=line.epoch, peak_bytes=peak)
