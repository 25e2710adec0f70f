"""Each diagnosis rule on records built to trigger it, and not to."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.kernel import synthetic
from tests.kernel.synthetic import SyntheticKill, SyntheticTask

from podmortem import diagnosis
from podmortem.diagnosis import categories, facts, forks, victim
from podmortem.kernel import oom_parser
from podmortem.reports import OomKillRecord, Severity

MIB_PAGES = 256  # 4 KiB pages per MiB


def _record(kill: SyntheticKill) -> OomKillRecord:
    [record] = oom_parser.parse_lines(synthetic.render(kill, "kmsg"))
    return record


def _trainer_with_workers(owned_mib: int, workers: int = 3, *, shared_mib: int = 400) -> SyntheticKill:
    """A 1 GiB trainer; each worker maps ``shared_mib`` of the parent's pages and owns ``owned_mib``."""
    trainer = SyntheticTask(100, "python", 1024 * MIB_PAGES, total_vm_pages=3_000_000)
    tasks = [trainer] + [
        SyntheticTask(
            200 + i, "pt_data_worker", (shared_mib + owned_mib) * MIB_PAGES, total_vm_pages=3_000_000
        )
        for i in range(workers)
    ]
    anon = (1024 + workers * owned_mib) * 1024 * 1024
    return SyntheticKill(victim_pid=100, tasks=tasks, anon_bytes=anon, limit_kb=anon // 1024 + 8192)


def test_memcg_limit_and_anon_dominant() -> None:
    report = diagnosis.diagnose(_record(_trainer_with_workers(100)))
    assert report.verdict == "memcg-limit"
    memcg = report.finding("memcg-limit")
    assert memcg is not None and memcg.severity is Severity.CRITICAL and memcg.action
    assert memcg.evidence["limit_bytes"] == report.cgroup.limit_bytes  # type: ignore[union-attr]
    assert report.finding("anon-dominant") is not None


def test_fork_copies_reports_what_only_the_forks_hold() -> None:
    report = diagnosis.diagnose(_record(_trainer_with_workers(100, workers=3)))
    fork = report.finding("fork-copies")
    assert fork is not None
    assert fork.evidence["fork_owned_bytes"] == 300 * 1024 * 1024
    assert fork.evidence["parent_pid"] == 100 and fork.evidence["fork_pids"] == [200, 201, 202]
    shared = report.finding("shared-pages-double-counted")
    assert shared is not None and shared.evidence["double_counted_bytes"] == 3 * 400 * 1024 * 1024
    assert {t.pid: t.sharing for t in report.tasks} == {
        100: "shared",
        200: "shared",
        201: "shared",
        202: "shared",
    }


def test_no_fork_copies_when_workers_own_nothing() -> None:
    report = diagnosis.diagnose(_record(_trainer_with_workers(0, shared_mib=500)))
    assert report.finding("fork-copies") is None
    assert report.finding("shared-pages-double-counted") is not None


def test_no_fork_copies_without_shared_pages() -> None:
    """Workers that own memory but share none of the parent's pages may have allocated it themselves."""
    report = diagnosis.diagnose(_record(_trainer_with_workers(100, workers=3, shared_mib=0)))
    assert report.finding("fork-copies") is None
    assert report.finding("shared-pages-double-counted") is None


@pytest.mark.parametrize(("record", "made"), [
    # stress --vm: each worker mallocs its own 30 MB after the fork; the record shows no shared pages
    ("01-k3s-v1-dmesgT-stress-4.15.log", False),
    # fresh DataLoader-like workers forked from a grown python3 (recorded on this project's kernel)
    ("20-podmortem-v1-kmsg-fork-cow-6.18.log", True),
])
def test_fork_copies_on_records_where_sharing_is_known(fixtures_dir: Path, record: str, made: bool) -> None:
    [rec] = oom_parser.parse_text((fixtures_dir / "oom-records" / record).read_text())
    fork = diagnosis.diagnose(rec).finding("fork-copies")
    assert (fork is not None) is made
    if fork is not None:
        assert fork.evidence["shared_bytes"] >= 8 * 1024 * 1024
        assert "does not tell which" in fork.message


def test_no_fork_copies_for_unrelated_processes() -> None:
    tasks = [
        SyntheticTask(100, "java", 512 * MIB_PAGES, total_vm_pages=2_000_000),
        SyntheticTask(300, "envoy", 256 * MIB_PAGES, total_vm_pages=50_000),
    ]
    kill = SyntheticKill(victim_pid=100, tasks=tasks, anon_bytes=768 * 1024 * 1024, limit_kb=800 * 1024)
    report = diagnosis.diagnose(_record(kill))
    assert report.finding("fork-copies") is None
    assert report.finding("shared-pages-double-counted") is None
    assert {t.sharing for t in report.tasks} == {"owned"}


@pytest.mark.parametrize(
    ("anon", "shmem", "kernel", "file", "code"),
    [
        (900, 10, 10, 10, "anon-dominant"),
        (100, 700, 10, 10, "shmem-dominant"),
        (100, 10, 800, 10, "kernel-dominant"),
        (100, 10, 10, 700, "file-dominant"),
        (300, 300, 300, 10, None),
    ],
)
def test_dominant_category(anon: int, shmem: int, kernel: int, file: int, code: str | None) -> None:
    mib = 1024 * 1024
    tasks = [SyntheticTask(100, "python", 64 * MIB_PAGES)]
    kill = SyntheticKill(
        victim_pid=100,
        tasks=tasks,
        anon_bytes=anon * mib,
        shmem_bytes=shmem * mib,
        kernel_bytes=kernel * mib,
        file_bytes=file * mib,
        limit_kb=2 * 1024 * 1024,
    )
    finding = categories.dominant_category(facts.record_facts(_record(kill)))
    assert (finding.code if finding else None) == code
    if finding is not None:
        assert finding.evidence["share"] > 0.5 and finding.action


def test_global_oom() -> None:
    text = """\
[ 10.0] Out of memory: Killed process 77 (java) total-vm:100kB, anon-rss:90kB, file-rss:0kB, shmem-rss:0kB
"""
    [record] = oom_parser.parse_text(text)
    report = diagnosis.diagnose(record)
    assert report.verdict == "global-oom" and report.finding("memcg-limit") is None
    assert report.kill is not None and report.kill.constraint_inferred


def test_victim_not_largest_runtime_victim_swap_pagetables_and_group() -> None:
    tasks = [
        SyntheticTask(100, "python", 900 * MIB_PAGES, total_vm_pages=3_000_000, oom_score_adj=-997),
        SyntheticTask(150, "runc:[2:INIT]", 100, total_vm_pages=150_000, oom_score_adj=999),
    ]
    kill = SyntheticKill(
        victim_pid=150, tasks=tasks, anon_bytes=900 * 1024 * 1024, limit_kb=1024 * 1024, oom_group=True
    )
    record = _record(kill)
    f = facts.record_facts(record)
    assert victim.victim_not_largest(record, f) is not None
    assert victim.runtime_process_killed(record) is not None
    assert victim.oom_group(record) is not None
    assert victim.swapped_out(record, f) is None
    assert victim.page_tables(record, f) is None
    record.tasks[0].swapents_pages = 100 * MIB_PAGES
    record.tasks[0].pgtables_bytes = 200 * 1024 * 1024
    assert victim.swapped_out(record, f) is not None
    assert victim.page_tables(record, f) is not None


def test_eviction_from_pod_status() -> None:
    message = (
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 90Mi. "
        "Container trainer was using 30Gi, request is 8Gi, has larger consumption of memory."
    )
    finding = diagnosis.eviction(reason="Evicted", message=message)
    assert finding is not None and finding.code == "eviction"
    assert finding.evidence["container"] == "trainer" and finding.evidence["request"] == "8Gi"
    assert diagnosis.eviction(reason="OOMKilled", message=None) is None


def test_sigkill_not_oom() -> None:
    finding = diagnosis.sigkill_not_oom(exit_code=137, reason="Error", oom_record_found=False)
    assert finding is not None and finding.severity is Severity.CRITICAL
    assert diagnosis.sigkill_not_oom(exit_code=137, reason="OOMKilled", oom_record_found=False) is None
    assert diagnosis.sigkill_not_oom(exit_code=137, reason="Error", oom_record_found=True) is None
    assert diagnosis.sigkill_not_oom(exit_code=1, reason="Error", oom_record_found=False) is None


def test_stale_log() -> None:
    killed = datetime(2025, 3, 4, 16, 0, tzinfo=UTC)
    finding = diagnosis.stale_log(last_log_at=killed - timedelta(hours=12), killed_at=killed)
    assert finding is not None and finding.evidence["age_seconds"] == 12 * 3600
    assert "12 h" in finding.message
    assert diagnosis.stale_log(last_log_at=killed - timedelta(seconds=30), killed_at=killed) is None
    assert diagnosis.stale_log(last_log_at=None, killed_at=killed) is None


def test_fork_view_needs_cgroup_stats() -> None:
    [record] = oom_parser.parse_text(
        "[ 1.0] [  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name\n"
        "[ 1.0] [    1]     0     1     1000      900    4096        0             0 a\n"
        "[ 1.0] [    2]     0     2     1000      900    4096        0             0 a\n"
        "[ 1.0] Memory cgroup out of memory: Killed process 1 (a) total-vm:4000kB, anon-rss:3600kB, "
        "file-rss:0kB, shmem-rss:0kB\n"
    )
    assert forks.fork_view(record, facts.record_facts(record)) is None
    assert {t.sharing for t in diagnosis.diagnose(record).tasks} == {"unknown"}
