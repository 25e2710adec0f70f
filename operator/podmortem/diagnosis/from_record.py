"""``diagnose(record)``: run every rule over one kernel record and assemble the `FailureReport`.

The reading order is the post-mortem's: the constraint first (whose limit?), then
the dominant category (what filled it?), then the processes (who held it, and did
forking double it?), then anything else the record shows.
"""

from __future__ import annotations

from podmortem.diagnosis import categories, forks, kill_causes, limits, victim
from podmortem.diagnosis.facts import RecordFacts, record_facts
from podmortem.reports import codes
from podmortem.reports.failure import CgroupSummary, FailureReport, KillSummary, PodRef, TaskSummary
from podmortem.reports.findings import Finding
from podmortem.reports.oom_record import OomKillRecord
from podmortem.reports.units import KIB


def diagnose(record: OomKillRecord, *, pod: PodRef | None = None) -> FailureReport:
    """The failure report for one kill. ``pod`` (from ``podmortem.cgroups.paths.pod_ref``) names the pod."""
    facts = record_facts(record)
    view = forks.fork_view(record, facts)
    found: list[Finding | None] = [
        kill_causes.memcg_limit(record, facts, pod=pod),
        kill_causes.global_oom(record, facts),
        kill_causes.no_killable(record),
        categories.dominant_category(facts),
        forks.fork_copies(view),
        forks.shared_pages_double_counted(view),
        victim.runtime_process_killed(record),
        victim.victim_not_largest(record, facts),
        victim.page_tables(record, facts),
        victim.swapped_out(record, facts),
        victim.oom_group(record),
        victim.kill_frees_little(record, facts),
    ]
    findings = [f for f in found if f is not None]
    verdict = codes.verdict_of([f.code for f in findings])
    return FailureReport(
        verdict=verdict,
        kill=_kill(record, pod),
        cgroup=_cgroup(record, facts),
        tasks=_tasks(record, view, findings),
        findings=findings,
        partial=record.partial,
        missing=list(record.missing),
        page_size_bytes=facts.page_size,
        record_source=record.source,
    )


def _kill(record: OomKillRecord, pod: PodRef | None) -> KillSummary:
    victim_line = record.victim
    return KillSummary(
        pid=record.victim_pid,
        comm=record.victim_comm,
        constraint=record.constraint_printed,
        constraint_effective=record.constraint_effective,
        constraint_inferred=record.constraint_inferred,
        constraint_note=record.constraint_note,
        anon_rss_kb=victim_line.anon_rss_kb if victim_line else None,
        file_rss_kb=victim_line.file_rss_kb if victim_line else None,
        shmem_rss_kb=victim_line.shmem_rss_kb if victim_line else None,
        total_vm_kb=victim_line.total_vm_kb if victim_line else None,
        oom_memcg=record.oom_memcg,
        task_memcg=record.task_memcg,
        pod_uid=pod.pod_uid if pod else None,
        container_id=pod.container_id if pod else None,
        qos=pod.qos if pod else None,
        runtime=pod.runtime if pod else None,
        container_monitor=pod.monitor if pod else False,
        killed_pids=[k.pid for k in record.killed] or ([record.victim_pid] if record.victim_pid else []),
        chosen_pid=record.chosen.pid if record.chosen else None,
        chosen_comm=record.chosen.comm if record.chosen else None,
        oom_group=record.oom_group_memcg is not None,
        trigger_pid=record.trigger_pid,
        trigger_comm=record.trigger_comm,
        kernel_version=record.kernel_version,
        monotonic_s=record.monotonic_s,
        time_text=record.time_text,
        host=record.host,
        kmsg_seq=record.kmsg_seq,
    )


def _cgroup(record: OomKillRecord, facts: RecordFacts) -> CgroupSummary:
    block = facts.stat_block
    hit = limits.limit_hit(record)
    return CgroupSummary(
        version=record.cgroup_version,
        path=record.oom_memcg,
        limit_bytes=hit.limit_kb * KIB if hit is not None else facts.limit_bytes,
        usage_bytes=hit.usage_kb * KIB if hit is not None else facts.usage_bytes,
        failcnt=hit.failcnt if hit is not None else facts.failcnt,
        limit_counter=hit.counter if hit is not None else None,
        kmem_bytes=facts.kmem_bytes,
        stat=dict(block.stat) if block is not None else {},
        stat_path=block.path if block is not None else None,
        breakdown=facts.breakdown,
        dominant=categories.dominant_name(facts),
    )


def _tasks(record: OomKillRecord, view: forks.ForkView | None, findings: list[Finding]) -> list[TaskSummary]:
    killed = {k.pid for k in record.killed} or ({record.victim_pid} if record.victim_pid else set())
    shared: set[int] = set()
    if view is not None and any(f.code == "shared-pages-double-counted" for f in findings):
        shared = {view.largest.pid, *(t.pid for t in view.family)}
    rows = []
    for t in record.tasks:
        sharing = "unknown" if view is None else "shared" if t.pid in shared else "owned"
        rows.append(
            TaskSummary(
                pid=t.pid,
                name=t.name,
                rss_pages=t.rss_pages,
                rss_anon_pages=t.rss_anon_pages,
                rss_file_pages=t.rss_file_pages,
                rss_shmem_pages=t.rss_shmem_pages,
                total_vm_pages=t.total_vm_pages,
                pgtables_bytes=t.pgtables_bytes,
                swapents_pages=t.swapents_pages,
                oom_score_adj=t.oom_score_adj,
                killed=t.pid in killed,
                sharing=sharing,
            )
        )
    return rows
