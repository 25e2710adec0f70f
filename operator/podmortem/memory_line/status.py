"""The per-epoch memory line, as the TrainingJob status shows it and the early warning reads it. Pure."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from podmortem.memory_line import MemoryLine
from podmortem.memory_line.projection import EpochPeak, share, short_size

__all__ = ["epoch_peak", "peak_of_limit", "short_size", "status_memory"]


#: `status_memory`'s ``peakSource`` names the memory line; ``peakOfLimit`` says it in a word.
LINE_SOURCE = "memory line"


def peak_of_limit(peak: int | None, limit: int | None, *, source: str | None = None) -> str | None:
    """``'227Mi/256Mi (89%)'``, the figure the MemoryPressure message repeats as ``227Mi (89%)``;
    with ``source``, where it came from, in a word: ``'256Mi/256Mi (100%, kernel)'``."""
    if peak is None:
        return None
    if not limit:
        return f"{short_size(peak)}/unlimited" + (f" ({source})" if source else "")
    said = f", {source}" if source else ""
    return f"{short_size(peak)}/{short_size(limit)} ({share(peak, limit)}{said})"


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
        text = peak_of_limit(line.pod.peak_bytes, line.pod.limit_bytes, source=LINE_SOURCE)
        if text is not None:
            out["peakOfLimit"] = text
            out["peakSource"] = f"the trainer's {LINE_SOURCE} (epoch {line.epoch})"
    if line.cuda is not None:
        out["cudaReservedBytes"] = line.cuda.reserved_bytes
        out["cudaPeakAllocatedBytes"] = line.cuda.peak_allocated_bytes
    if line.workers is not None:
        out["workers"] = line.workers.count
        out["workersPssBytes"] = line.workers.pss_bytes
    return out


def epoch_peak(line: MemoryLine) -> EpochPeak | None:
    """The peak the early warning tracks: this epoch's own peak where sampled, else the pod's peak.

    With an epoch peak, the pod's peak since it started comes along, so the warning can quote the
    same figure as ``status.memory.peakOfLimit`` beside the one it fits its line to.
    """
    if line.pod is None:
        return None
    if line.pod.epoch_peak_bytes is None:
        return EpochPeak(epoch=line.epoch, peak_bytes=line.pod.peak_bytes)
    return EpochPeak(
        epoch=line.epoch, peak_bytes=line.pod.epoch_peak_bytes, pod_peak_bytes=line.pod.peak_bytes
    )
