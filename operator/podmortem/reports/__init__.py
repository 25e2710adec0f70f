"""Evidence models: what a kernel OOM record says, cgroup and process memory, findings, failure reports.

The bottom layer: plain pydantic models, no I/O, imported by everything above.
"""

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
