"""Which kind of memory filled the cgroup: anon, shmem, kernel or file.

Each has a different cure, so the finding names the category that holds at least
half of the cgroup's accounted memory and says what usually puts memory there.
"""

from __future__ import annotations

from podmortem.diagnosis.facts import RecordFacts
from podmortem.reports.findings import Finding, Severity
from podmortem.reports.units import human_bytes

#: A category dominates when it holds at least this share of the accounted memory.
DOMINANT_SHARE = 0.5

_TEXT = {
    "anon": (
        "anonymous memory (process heaps: Python objects, tensors, arrays)",
        "Look for what grows across epochs (caches, per-sample results kept for evaluation) "
        "and for forked workers holding copies; a per-epoch memory line shows when it grew.",
    ),
    "shmem": (
        "shared memory (/dev/shm and tmpfs, often DataLoader worker batches)",
        "Lower DataLoader num_workers or prefetch_factor, make sure /dev/shm files are removed, "
        "and remember an emptyDir with medium: Memory counts against this limit.",
    ),
    "kernel": (
        "kernel memory (slab caches, kernel stacks, page tables, sockets)",
        "Look for many threads or processes, many open files or sockets, or a runtime leaking "
        "kernel objects; kernel memory is charged to the cgroup like any other.",
    ),
    "file": (
        "page cache (file data read or written)",
        "Page cache is normally reclaimed before an OOM kill; a file-dominated kill points at "
        "dirty pages that could not be written back fast enough, or at files on a tmpfs.",
    ),
}

#: The memory categories a record can be dominated by (each a ``<name>-dominant`` finding).
CATEGORIES: tuple[str, ...] = tuple(_TEXT)


def dominant_category(facts: RecordFacts) -> Finding | None:
    """``anon-dominant``, ``shmem-dominant``, ``kernel-dominant`` or ``file-dominant``; None when mixed."""
    name = dominant_name(facts)
    breakdown = facts.breakdown
    if name is None or breakdown is None:
        return None
    categories = breakdown.categories()
    total = breakdown.total_bytes()
    value = categories[name]
    what, action = _TEXT[name]
    share = value / total
    return Finding(
        code=f"{name}-dominant",
        severity=Severity.WARNING,
        message=f"{human_bytes(value)} ({share:.0%}) of the cgroup's memory was {what}.",
        evidence={f"{k}_bytes": v for k, v in categories.items()}
        | {"share": round(share, 3), "source": breakdown.source, "limit_bytes": facts.limit_bytes},
        action=action,
    )


def dominant_name(facts: RecordFacts) -> str | None:
    breakdown = facts.breakdown
    if breakdown is None:
        return None
    total = breakdown.total_bytes()
    if total <= 0:
        return None
    name, value = max(breakdown.categories().items(), key=lambda kv: kv[1])
    return name if value >= DOMINANT_SHARE * total else None
