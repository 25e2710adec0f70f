"""Kills close together, read together: a small victim first, the real consumer killed seconds later.

In a node-wide OOM (or in one cgroup) the kernel kills the process with the highest score,
which oom_score_adj can make a small one; when memory keeps running out, the process that
was really growing is killed seconds later. Each record alone cannot show that; two records
of the same host and the same limit within ``WINDOW_S`` can.
"""

from __future__ import annotations

import re

from podmortem.reports.failure import FailureReport
from podmortem.reports.findings import Finding, Severity
from podmortem.reports.oom_record import OomKillRecord
from podmortem.reports.units import KIB, human_bytes

#: Kills this close together are read as one episode of memory running out.
WINDOW_S = 60.0
#: The first victim counts as smaller when it held less than this share of a later one.
SMALLER_SHARE = 0.9

_CLOCK = re.compile(r"(\d\d):(\d\d):(\d\d)(?:\.(\d+))?")


def _seconds(record: OomKillRecord) -> float | None:
    if record.monotonic_s is not None:
        return record.monotonic_s
    if record.time_text is None:
        return None
    m = _CLOCK.search(record.time_text)
    if m is None:
        return None
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3))


def _held_kb(record: OomKillRecord) -> int | None:
    victim = record.victim
    if victim is None or victim.anon_rss_kb is None:
        return None
    return victim.anon_rss_kb + (victim.file_rss_kb or 0) + (victim.shmem_rss_kb or 0)


def _who(record: OomKillRecord, report: FailureReport) -> str:
    kill = report.kill
    pod = f", pod {kill.pod_uid}" if kill is not None and kill.pod_uid else ""
    return f"{record.victim_comm} (pid {record.victim_pid}{pod})"


def _pod_uid(report: FailureReport) -> str | None:
    return report.kill.pod_uid if report.kill is not None else None


def relate(records: list[OomKillRecord], reports: list[FailureReport]) -> list[FailureReport]:
    """``reports`` (one per record, same order), each first victim followed by a larger one told so."""
    out = list(reports)
    for i, first in enumerate(records):
        start, held = _seconds(first), _held_kb(first)
        if start is None or held is None or any(f.code == "victim-not-largest" for f in out[i].findings):
            continue
        later: tuple[int, float, int] | None = None
        for j in range(i + 1, len(records)):
            other = records[j]
            when, other_held = _seconds(other), _held_kb(other)
            if when is None or other_held is None or other.host != first.host:
                continue
            delta = when - start if first.monotonic_s is not None else (when - start) % 86400
            if delta > WINDOW_S or delta < 0:
                break
            if other.oom_memcg != first.oom_memcg or other.victim_pid == first.victim_pid:
                continue
            if held < SMALLER_SHARE * other_held and (later is None or other_held > later[2]):
                later = (j, delta, other_held)
        if later is None:
            continue
        j, delta, other_held = later
        finding = Finding(
            code="victim-not-largest",
            severity=Severity.INFO,
            message=(
                f"The kernel killed {_who(first, out[i])} first, holding {human_bytes(held * KIB)}; "
                f"{_who(records[j], out[j])}, killed {delta:.0f} s later under the same limit, held "
                f"{human_bytes(other_held * KIB)}. The first kill did not free what was running out: look at "
                "the later, larger process."
            ),
            evidence={
                "victim_pid": first.victim_pid,
                "victim_rss_kb": held,
                "later_pid": records[j].victim_pid,
                "later_comm": records[j].victim_comm,
                "later_pod_uid": _pod_uid(out[j]),
                "later_rss_kb": other_held,
                "seconds_later": round(delta, 3),
            },
            action="Read the later report: the memory that filled the limit is likely there.",
        )
        out[i] = out[i].model_copy(update={"findings": [*out[i].findings, finding]})
    return out
