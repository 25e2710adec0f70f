"""The FailureReport JSON contract, additive evolution, and trimming to a byte budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.kernel import synthetic
from tests.kernel.synthetic import SyntheticKill, SyntheticTask

from podmortem.diagnosis import diagnose
from podmortem.kernel import oom_parser
from podmortem.reports import FailureReport
from podmortem.reports.units import human_bytes

REAL = Path(__file__).parent.parent / "fixtures" / "oom-records" / "20-podmortem-v1-kmsg-fork-cow-6.18.log"


def _big_report() -> FailureReport:
    tasks = [SyntheticTask(1000 + i, f"worker-{i}", 1000 + i, total_vm_pages=9000) for i in range(200)]
    kill = SyntheticKill(victim_pid=1150, tasks=tasks, anon_bytes=300 * 1024 * 1024, limit_kb=400 * 1024)
    [record] = oom_parser.parse_lines(synthetic.render(kill, "kmsg"))
    return diagnose(record)


def test_round_trip_and_unknown_future_fields_still_read() -> None:
    [record] = oom_parser.parse_text(REAL.read_text())
    report = diagnose(record)
    data = json.loads(report.model_dump_json())
    assert FailureReport.model_validate(data) == report
    data["log"] = {"last_line_at": "2025-03-04T10:00:00Z"}  # a field a later version adds
    assert FailureReport.model_validate(data).verdict == "memcg-limit"


def test_json_contract_keys() -> None:
    [record] = oom_parser.parse_text(REAL.read_text())
    data = json.loads(diagnose(record).model_dump_json())
    assert {"kill", "cgroup", "tasks", "findings", "partial"} <= set(data)
    assert {
        "pid",
        "comm",
        "constraint",
        "constraint_effective",
        "anon_rss_kb",
        "file_rss_kb",
        "shmem_rss_kb",
        "oom_memcg",
        "task_memcg",
        "pod_uid",
        "container_id",
        "killed_pids",
    } <= set(data["kill"])
    assert {"version", "limit_bytes", "usage_bytes", "stat"} <= set(data["cgroup"])
    assert {"pid", "name", "rss_pages", "rss_anon_pages"} <= set(data["tasks"][0])
    assert {"code", "severity", "message", "evidence"} <= set(data["findings"][0])


def test_trimmed_fits_the_budget_and_says_what_went() -> None:
    report = _big_report()
    full = report.json_size()
    assert full > 20_000
    small = report.trimmed(8_000)
    assert small.json_size() <= 8_000
    assert small.dropped and small.dropped[0].startswith("tasks: dropped")
    assert any(t.killed for t in small.tasks), "the killed process's row stays"
    assert small.verdict == report.verdict and small.kill == report.kill
    assert report.json_size() == full and not report.dropped  # the original is untouched


def test_trimmed_keeps_everything_when_it_fits() -> None:
    report = _big_report()
    assert report.trimmed(10**7) == report


def test_trimmed_drops_stat_keys_before_findings() -> None:
    report = _big_report()
    tiny = report.trimmed(3_500)
    notes = " | ".join(tiny.dropped)
    assert "cgroup.stat" in notes
    if tiny.json_size() > 3_500:
        pytest.fail(f"could not fit 3.5 kB: {tiny.json_size()} ({notes})")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (133636096, "127.4 MiB"),
        (None, "?"),
        (-2048, "-2.0 KiB"),
    ],
)
def test_human_bytes(value: int | None, text: str) -> None:
    assert human_bytes(value) == text
