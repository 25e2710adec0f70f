"""Kernel OOM-kill records as ``podmortem diagnose`` reports them: one report per kill, its pod read off
its cgroup paths, and the reports as text for a person (what killed it, what filled it, who held it,
what to do).

The kernel-text report (`podmortem.cli.diagnose`) prints these alone; the combined report
(`podmortem.cli.diagnose_inputs`) prints them for kernel records that no pod given claims, and under a
pod whose kill they record.
"""

from __future__ import annotations

import textwrap

from podmortem.cgroups import paths
from podmortem.diagnosis import diagnose, sequence
from podmortem.reports.failure import FailureReport
from podmortem.reports.oom_record import OomKillRecord
from podmortem.reports.units import human_bytes as hb

#: Task rows shown in the human table; ``--json`` always has them all.
TABLE_ROWS = 12


def kernel_reports(records: list[OomKillRecord]) -> list[FailureReport]:
    """One report per kernel record, the pod read off its cgroup paths, kills close together related."""
    reports = []
    for record in records:
        cpuset = record.oom_kill.cpuset if record.oom_kill is not None else record.cpuset
        # With the oom-kill line cut, the memory.oom.group line still names the victim's (container's)
        # cgroup, also when the limit that filled is a node or QoS level one that names no pod.
        group = record.oom_group_memcg
        pod = paths.pod_ref(
            task_memcg=record.task_memcg or group, oom_memcg=record.oom_memcg or group, cpuset=cpuset
        )
        reports.append(diagnose(record, pod=pod))
    return sequence.relate(records, reports)


#: ``missing`` codes in words.
_MISSING = {
    "header": "the header (who asked for memory)",
    "kill": "the kill line (who was killed)",
    "cgroup-stats": "the cgroup's memory.stat",
    "task-rows": "the task table's rows",
    "elided": "lines left out ('--', '...')",
    "truncated-line": "the end of a cut line",
    "kmsg-gap": "kernel records lost from /dev/kmsg",
}
#: The memcg-limit finding's level in words.
_LEVELS = {
    "container": "the container's own memory limit",
    "pod": "the pod's memory limit",
    "qos": "a QoS class cgroup shared by many pods (not this pod's limit)",
    "node": "the node's allocatable memory for all pods (not this pod's limit)",
    "system": "the memory limit of a cgroup outside the pods",
}


def render(reports: list[FailureReport]) -> str:
    """The reports as text for a person: what killed it, what filled it, who held it, what to do."""
    out: list[str] = []
    for index, report in enumerate(reports, 1):
        if index > 1:
            out.append("")
        out.extend(render_one(report, index, len(reports)))
    return "\n".join(out) + "\n"


def render_one(report: FailureReport, index: int, count: int) -> list[str]:
    """One report's lines, headed as kill ``index`` of ``count``."""
    kill = report.kill
    cg = report.cgroup
    lines: list[str] = []
    when = []
    if kill is not None:
        if kill.time_text:
            when.append(kill.time_text)
        if kill.monotonic_s is not None:
            when.append(f"{kill.monotonic_s:.3f} s after boot")
        if kill.host:
            when.append(f"host {kill.host}")
        if kill.kernel_version:
            when.append(f"kernel {kill.kernel_version}")
    head = f"OOM kill {index} of {count}"
    lines.append(head + (f"  ({', '.join(when)})" if when else ""))
    if report.partial:
        lacks = [_MISSING.get(m, m) for m in report.missing]
        lines.append(f"  PARTIAL record: the text lacks {', '.join(lacks)}; what they would tell is unknown")
    no_victim = any(f.code == "no-killable-process" for f in report.findings)
    if kill is not None and kill.pid is None:
        if no_victim:
            lines.append("  killed    nothing: the kernel found no process it could kill")
        elif kill.chosen_pid is not None:
            who = f"{kill.chosen_comm or '?'} (pid {kill.chosen_pid})"
            lines.append(f"  killed    {who} or a child of it: the kernel chose it, and the Killed line "
                         "that names the victim is not in the text")
        else:
            lines.append("  killed    unknown: the record has no kill line (it is cut before it)")
    if kill is not None and kill.pid is not None:
        who = f"{kill.comm or '?'} (pid {kill.pid})"
        sizes = ""
        if kill.anon_rss_kb is not None:
            sizes = (
                f": anon {hb((kill.anon_rss_kb or 0) * 1024)}, file {hb((kill.file_rss_kb or 0) * 1024)},"
                f" shmem {hb((kill.shmem_rss_kb or 0) * 1024)}"
            )
        lines.append(f"  killed    {who}{sizes}")
    if kill is not None:
        if len(kill.killed_pids) > 1:
            lines.append(f"            with the whole group (memory.oom.group): pids {kill.killed_pids}")
        if kill.trigger_comm and (kill.trigger_pid is None or kill.trigger_pid != kill.pid):
            trig = f"{kill.trigger_comm}" + (f" (pid {kill.trigger_pid})" if kill.trigger_pid else "")
            lines.append(f"  trigger   {trig} asked for memory and set off the OOM killer")
        constraint = kill.constraint_effective or "unknown"
        cause = next((f for f in report.findings if f.code == "memcg-limit"), None)
        level = cause.evidence.get("limit_level") if cause is not None else None
        if constraint == "CONSTRAINT_MEMCG":
            what = _LEVELS.get(str(level), "memory cgroup limit")
        elif constraint == "CONSTRAINT_NONE":
            what = "the whole node ran out of memory (global OOM)"
        elif constraint == "unknown":
            what = "unknown: the record does not say whether a cgroup limit or the whole node ran out"
        else:
            what = constraint
        lines.append(
            f"  limit     {what}" + (f" [{constraint}]" if constraint.startswith("CONSTRAINT") else "")
        )
        if kill.constraint_note:
            lines.append(f"            {kill.constraint_note}")
        if kill.oom_memcg:
            lines.append(f"  cgroup    {kill.oom_memcg}")
        if kill.pod_uid:
            pod = f"pod uid {kill.pod_uid}"
            if kill.container_id:
                pod += f", container {kill.container_id[:12]}"
            if kill.qos:
                pod += f", QoS {kill.qos}"
            lines.append(f"  pod       {pod}")
    if cg is not None:
        if cg.limit_bytes is not None or cg.usage_bytes is not None:
            extra = f", failcnt {cg.failcnt}" if cg.failcnt is not None else ""
            lines.append(
                f"  usage     {hb(cg.usage_bytes)} of a {hb(cg.limit_bytes)} "
                + (f"{cg.limit_counter} " if cg.limit_counter not in (None, "memory") else "")
                + f"limit{extra}"
                + (f" (cgroup v{cg.version})" if cg.version else "")
            )
        if cg.breakdown is not None and cg.breakdown.categories():
            total = cg.breakdown.total_bytes() or 1
            parts = [
                f"{name} {hb(value)} ({value / total:.0%})"
                for name, value in cg.breakdown.categories().items()
            ]
            verdict = f" -> {cg.dominant} dominates" if cg.dominant else " -> no single category dominates"
            lines.append(f"  memory    {', '.join(parts)}{verdict}")
            lines.append(f"            from {cg.breakdown.source}")
    if report.tasks:
        lines.append("")
        lines.extend(_task_table(report))
    if report.findings:
        lines.append("")
        lines.append("  Findings")
        for finding in report.findings:
            lines.append(f"  [{finding.severity.value}] {finding.code}")
            lines.extend(wrap(finding.message, "    "))
            if finding.action:
                lines.extend(wrap("what to do: " + finding.action, "    "))
    return lines


def _task_table(report: FailureReport) -> list[str]:
    page = report.page_size_bytes
    rows = sorted(report.tasks, key=lambda t: t.rss_pages or 0, reverse=True)
    shown = rows[:TABLE_ROWS]
    shown += [t for t in rows[TABLE_ROWS:] if t.killed]
    has_anon = any(t.rss_anon_pages is not None for t in shown)

    def size(pages: int | None) -> str:
        return hb(pages * page) if pages is not None else "-"

    header = (
        ["PID", "NAME", "RSS"] + (["ANON", "FILE", "SHMEM"] if has_anon else []) + ["SWAP", "ADJ", "HOLDS"]
    )
    table = [header]
    for t in shown:
        holds = {"owned": "owned", "shared": "shared (fork)", "unknown": "-"}[t.sharing]
        row = [f"{t.pid}{'*' if t.killed else ''}", t.name[:20], size(t.rss_pages)]
        if has_anon:
            row += [size(t.rss_anon_pages), size(t.rss_file_pages), size(t.rss_shmem_pages)]
        row += [size(t.swapents_pages), str(t.oom_score_adj) if t.oom_score_adj is not None else "-", holds]
        table.append(row)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    out = [f"  Processes ({len(report.tasks)} in the task table; * = killed; pages x {page} B)"]
    for r in table:
        out.append("    " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip())
    if len(rows) > len(shown):
        out.append(f"    ... {len(rows) - len(shown)} smaller processes not shown (--json has them all)")
    return out


def wrap(text: str, indent: str, width: int = 100) -> list[str]:
    """``text`` wrapped at ``width`` with every line indented (one indent line for empty text)."""
    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent) or [indent]
