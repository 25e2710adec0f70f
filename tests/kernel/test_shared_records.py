"""Every shared real OOM record parses to what its .json sidecar says can be read off it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from podmortem.cgroups import paths
from podmortem.diagnosis import diagnose
from podmortem.kernel import oom_parser
from podmortem.reports import FailureReport, OomKillRecord

RECORDS = Path(__file__).parent.parent / "fixtures" / "oom-records"
SIDECARS = sorted(RECORDS.glob("*.json"))

#: sidecar "timestamp_format" (its leading words) → the parser's line_format.
_FORMATS = {
    "dmesg -T": "dmesg-T",
    "syslog": "syslog",
    "journalctl": "syslog",
    "raw [seconds]": "dmesg",
    "raw /dev/kmsg": "kmsg",
}


def _records(sidecar: Path) -> tuple[list[dict[str, Any]], list[OomKillRecord], list[FailureReport]]:
    """The sidecar's truths (its ``records``, or the sidecar itself), the parsed records, the reports."""
    data = json.loads(sidecar.read_text())
    truths: list[dict[str, Any]] = data.get("records", [data])
    records = oom_parser.parse_text(sidecar.with_suffix(".log").read_text())
    reports = []
    for record in records:
        cpuset = record.oom_kill.cpuset if record.oom_kill else record.cpuset
        pod = paths.pod_ref(
            task_memcg=record.task_memcg, oom_memcg=record.oom_memcg or record.oom_group_memcg, cpuset=cpuset
        )
        reports.append(diagnose(record, pod=pod))
    return truths, records, reports


def _load(sidecar: Path) -> tuple[dict[str, Any], OomKillRecord, FailureReport]:
    truths, records, reports = _records(sidecar)
    assert len(records) == 1, f"{sidecar.stem}: expected one record, got {len(records)}"
    return truths[0], records[0], reports[0]


def _before_note(text: str) -> str:
    """Sidecars annotate some values: "5.3.18-… (SLE15-SP3)" → "5.3.18-…"."""
    return text.split(" (")[0]


def test_all_shared_records_are_here() -> None:
    shared = Path(__file__).resolve().parents[3] / "shared" / "data" / "oom-records"  # beside the clone
    if shared.is_dir():
        missing = {p.name for p in shared.glob("*.json")} - {p.name for p in SIDECARS}
        assert not missing, f"copy these into tests/fixtures/oom-records: {missing}"
    assert len(SIDECARS) >= 48


def test_every_fixture_has_a_source_row() -> None:
    sources = (RECORDS / "SOURCES.md").read_text()
    assert not [p.stem for p in SIDECARS if f"| {p.stem} |" not in sources]


def _cause(report: FailureReport) -> dict[str, Any]:
    cause = next((f for f in report.findings if f.code in ("memcg-limit", "global-oom")), None)
    return dict(cause.evidence) if cause is not None else {}


Checks = dict[str, tuple[object, object]]


def _compare(truth: dict[str, Any], record: OomKillRecord, report: FailureReport) -> Checks:
    kill = report.kill
    assert kill is not None and report.cgroup is not None
    checks: dict[str, tuple[object, object]] = {}

    def check(key: str, actual: object, expected: object | None = None) -> None:
        if key in truth:
            checks[key] = (actual, truth[key] if expected is None else expected)

    check("constraint", kill.constraint_effective)
    check("constraint_printed", kill.constraint)
    check("killed_pid", kill.pid)
    check("killed_comm", kill.comm)
    check("anon_rss_kb", kill.anon_rss_kb)
    if truth.get("anon_rss_kb") is not None:
        check("file_rss_kb", kill.file_rss_kb)
        check("shmem_rss_kb", kill.shmem_rss_kb)
    check("chosen_pid", record.chosen.pid if record.chosen else None)
    check("no_killable", record.no_killable)
    check("oom_memcg", kill.oom_memcg)
    check("task_memcg", kill.task_memcg)
    check("container_id", kill.container_id)
    check("pod_uid", kill.pod_uid)
    if truth.get("cgroup_version") is not None:
        check("cgroup_version", report.cgroup.version)
    check("task_table_format", record.task_table_format)
    if "task_table_columns" in truth:
        columns = "pid " + " ".join(record.task_columns)
        check("task_table_columns", columns, _before_note(truth["task_table_columns"]))
    if "kernel_version" in truth:
        expected = truth["kernel_version"]
        check("kernel_version", record.kernel_version, _before_note(expected) if expected else None)
    if "timestamp_format" in truth:
        expected = next(v for k, v in _FORMATS.items() if truth["timestamp_format"].startswith(k))
        check("timestamp_format", record.line_format, expected)
    check("trigger_pid", record.trigger_pid)
    check("trigger_comm", record.trigger_comm)
    check("cpuset", record.oom_kill.cpuset if record.oom_kill and record.oom_kill.cpuset else record.cpuset)
    check("limit_kb", record.counters["memory"].limit_kb if "memory" in record.counters else None)
    check("usage_kb", record.counters["memory"].usage_kb if "memory" in record.counters else None)
    check("kmem_kb", record.counters["kmem"].usage_kb if "kmem" in record.counters else None)
    evidence = _cause(report)
    check("limit_hit", evidence.get("limit_hit"))
    check("limit_level", evidence.get("limit_level"))
    swap = evidence.get("swap_bytes")
    check("swap_kb", swap // 1024 if isinstance(swap, int) else None)
    stat = report.cgroup.stat
    check("cgroup_anon_bytes", stat.get("anon"))
    check("cgroup_file_bytes", stat.get("file"))
    check("cgroup_shmem_bytes", stat.get("shmem"))
    if "stat_bytes" in truth:
        check("stat_bytes", {k: stat.get(k) for k in truth["stat_bytes"]})
    if "task_rows" in truth:
        check("task_rows", [[t.pid, t.rss_pages, t.pgtables_bytes] for t in record.tasks])
    check("dominant_category", report.cgroup.dominant)
    check("partial", report.partial)
    check("reaped", bool(record.reaped))
    if "global_oom" in truth:
        check("global_oom", report.verdict == "global-oom")
    if "memory_oom_group" in truth:
        check("memory_oom_group", kill.oom_group)
    if "findings" in truth:
        check("findings", sorted(f.code for f in report.findings), sorted(truth["findings"]))
    if "findings_include" in truth:
        codes = {f.code for f in report.findings}
        expected = sorted(truth["findings_include"])
        check("findings_include", sorted(set(expected) & codes), expected)
    return checks


@pytest.mark.parametrize("sidecar", SIDECARS, ids=[p.stem for p in SIDECARS])
def test_record_matches_sidecar(sidecar: Path) -> None:
    truths, records, reports = _records(sidecar)
    assert len(records) == len(truths), f"{sidecar.stem}: {len(records)} records, sidecar has {len(truths)}"
    for index, (truth, record, report) in enumerate(zip(truths, records, reports, strict=True)):
        checks = _compare(truth, record, report)
        assert len(checks) >= 4, f"too few sidecar fields compared: {sorted(checks)}"
        wrong = {k: v for k, v in checks.items() if v[0] != v[1]}
        assert not wrong, f"{sidecar.stem} record {index}: (parsed, sidecar) differ: {wrong}"


@pytest.mark.parametrize("sidecar", SIDECARS, ids=[p.stem for p in SIDECARS])
def test_verdict_names_the_constraint(sidecar: Path) -> None:
    truths, _, reports = _records(sidecar)
    for truth, report in zip(truths, reports, strict=True):
        if "constraint" not in truth:
            continue
        verdicts = {"CONSTRAINT_NONE": "global-oom", "CONSTRAINT_MEMCG": "memcg-limit", None: None}
        expected = verdicts[truth["constraint"]]
        assert report.verdict == expected


def test_a_wrong_sidecar_value_is_caught() -> None:
    truths, records, reports = _records(RECORDS / "23-kubedirector-356-v1-hardwrap-memsw-dirty.json")
    wrong = dict(truths[0], stat_bytes={"rss": 44 * 1024}, limit_hit="memory")
    checks = _compare(wrong, records[0], reports[0])
    assert {k for k, v in checks.items() if v[0] != v[1]} == {"stat_bytes", "limit_hit"}


@pytest.mark.parametrize(
    ("stem", "partial"),
    [
        ("01-k3s-v1-dmesgT-stress-4.15", False),
        ("02-k8s-v1-syslog-kmem-runc-el7", False),
        ("20-podmortem-v1-kmsg-fork-cow-6.18", False),
        ("04-k8s-journal-constraint-none-phpfpm", True),  # starts at the task table, grep "--" inside
        ("06-harvester-v1-dmesgT-qemu-killed", True),  # the poster elided lines with "..."
        ("08-kind-v2-dmesgT-uwsgi-partial", True),  # no header, no Killed line
        ("10-eks-v2-newtable-oomgroup-node-grep", True),  # grep-filtered: empty stats block and table
        ("12-fedora-global-journal-newtable-lkml", True),  # starts at the task table
    ],
)
def test_partial_marks_records_cut_short(stem: str, partial: bool) -> None:
    _, record, report = _load(RECORDS / f"{stem}.json")
    assert report.partial is partial, record.missing


def test_kernel_bug_constraint_none_is_inferred_and_said() -> None:
    _, _, report = _load(RECORDS / "04-k8s-journal-constraint-none-phpfpm.json")
    assert report.kill is not None
    assert report.kill.constraint == "CONSTRAINT_NONE"
    assert report.kill.constraint_effective == "CONSTRAINT_MEMCG"
    assert report.kill.constraint_inferred
    assert "Memory cgroup out of memory" in (report.kill.constraint_note or "")


def test_empty_vendor_constraint_and_thread_pid() -> None:
    _, record, report = _load(RECORDS / "02-k8s-v1-syslog-kmem-runc-el7.json")
    assert record.oom_kill is not None and record.oom_kill.pid == 12800  # a thread id
    assert report.kill is not None and report.kill.pid == 12788  # the Killed line's tgid wins
    assert report.kill.constraint == "" and report.kill.constraint_inferred
    assert [b.path.rsplit("/", 1)[-1] for b in record.cgroup_stats if b.path][-1] == "super-agent"
    assert {f.code for f in report.findings} >= {"kernel-dominant", "runtime-process-killed"}


def test_old_v1_blocks_are_kept_per_path_and_in_bytes() -> None:
    _, record, report = _load(RECORDS / "01-k3s-v1-dmesgT-stress-4.15.json")
    assert len(record.cgroup_stats) == 3
    container = record.stat_for(record.task_memcg)
    assert container is not None and container.printed_unit == "KB"
    assert container.stat["rss"] == 123552 * 1024
    assert report.cgroup is not None and report.cgroup.breakdown is not None
    assert report.cgroup.breakdown.anon_bytes == (123552 + 48) * 1024  # summed over the pod's subtree


def test_oom_group_repeated_killed_line_is_deduplicated() -> None:
    _, record, report = _load(RECORDS / "10-eks-v2-newtable-oomgroup-node-grep.json")
    assert [k.pid for k in record.killed] == [22609]
    assert report.kill is not None and report.kill.killed_pids == [22609]
    assert record.trigger_comm == "Thread-2" and record.monotonic_s == pytest.approx(2993.66124)


def test_names_with_spaces_and_human_time_kept_apart() -> None:
    _, record, _ = _load(RECORDS / "06-harvester-v1-dmesgT-qemu-killed.json")
    assert record.trigger_comm == "CPU 11/KVM"
    assert record.time_text == "Thu May  9 14:52:38 2024" and record.monotonic_s is None


def test_reaper_line_after_kill_is_attached() -> None:
    _, record, _ = _load(RECORDS / "04-k8s-journal-constraint-none-phpfpm.json")
    assert [(r.pid, r.shmem_rss_kb) for r in record.reaped] == [(26865, 13216)]
