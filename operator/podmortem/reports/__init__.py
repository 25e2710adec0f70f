"""Evidence models: what a kernel OOM record says, cgroup and process memory, findings, failure reports.

The bottom layer: plain pydantic models, no I/O, imported by everything above. The names below are
loaded on first use: a process that needs a few does not build every other one (pydantic models
cost memory to build). The sidecar imports no pydantic at all: it reads `memory_classes` and writes
`sidecar_document`, plain Python both.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from podmortem.reports.failure import CgroupSummary, FailureReport, KillSummary, PodRef, TaskSummary
    from podmortem.reports.findings import Finding, Severity
    from podmortem.reports.memory import CgroupMemoryStat, MemoryBreakdown, MemorySample, ProcessMemory
    from podmortem.reports.oom_record import (
        ChosenVictim,
        KilledProcess,
        MemoryCounter,
        OomKillLine,
        OomKillRecord,
        OomTask,
        ReapedProcess,
    )

#: Name -> the module that defines it.
_WHERE = {
    **dict.fromkeys(("CgroupSummary", "FailureReport", "KillSummary", "PodRef", "TaskSummary"), "failure"),
    **dict.fromkeys(("Finding", "Severity"), "findings"),
    **dict.fromkeys(("CgroupMemoryStat", "MemoryBreakdown", "MemorySample", "ProcessMemory"), "memory"),
    **dict.fromkeys(("ChosenVictim", "KilledProcess", "MemoryCounter", "OomKillLine", "OomKillRecord",
                     "OomTask", "ReapedProcess"), "oom_record"),
}

__all__ = [
    "CgroupMemoryStat",
    "CgroupSummary",
    "ChosenVictim",
    "FailureReport",
    "Finding",
    "KillSummary",
    "KilledProcess",
    "MemoryBreakdown",
    "MemoryCounter",
    "MemorySample",
    "OomKillLine",
    "OomKillRecord",
    "OomTask",
    "PodRef",
    "ProcessMemory",
    "ReapedProcess",
    "Severity",
    "TaskSummary",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
