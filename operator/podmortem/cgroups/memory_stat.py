"""``memory.stat`` file text (cgroup v1 or v2) → `CgroupMemoryStat`, keys as the kernel wrote them.

Both versions write one ``key value`` pair per line in bytes (event counters as
counts); v1 adds ``total_*`` hierarchical copies. Pure: the caller reads the file.
"""

from __future__ import annotations

from podmortem.reports.memory import CgroupMemoryStat
from podmortem.reports.memory_classes import CgroupVersion, detect_version, stat_values


def parse_memory_stat(
    text: str, *, path: str | None = None, version: CgroupVersion | None = None
) -> CgroupMemoryStat:
    """Parse a ``memory.stat`` file; lines that are not ``key integer`` are skipped, never fatal."""
    stat = stat_values(text)
    return CgroupMemoryStat(
        version=version if version is not None else detect_version(stat), path=path, stat=stat
    )
