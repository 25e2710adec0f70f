"""Choosing between the real kernel and the recorded record, and saying why."""

from __future__ import annotations

from pathlib import Path

import pytest

from podmortem import quantity
from podmortem_demo import kernel


def test_recorded_is_used_when_asked() -> None:
    choice = kernel.choose("recorded")
    assert (choice.mode, choice.cgroup_root, choice.reasons) == ("recorded", None, [])


def test_an_unreadable_kernel_log_falls_back_to_recorded_with_the_reason(tmp_path: Path) -> None:
    missing = tmp_path / "kmsg"
    choice = kernel.choose("auto", kmsg_path=missing)
    assert choice.mode == "recorded" and choice.cgroup_root is None
    assert any(str(missing) in reason and "not readable" in reason for reason in choice.reasons)
    with pytest.raises(kernel.KernelUnavailable, match=str(missing)):
        kernel.choose("real", kmsg_path=missing)


def test_the_recorded_record_is_a_memcg_kill_of_a_forked_python() -> None:
    (record,) = kernel.recorded_records()
    assert record.memcg_evidence and record.victim_comm == "python3"
    assert kernel.recorded_cgroup_path() == record.task_memcg == record.oom_memcg
    assert len(record.tasks) == 2  # the parent and its forked child


@pytest.mark.parametrize("limit_mib", [64, 128, 256, 384, 1024])
def test_the_recorded_record_is_scaled_to_the_pods_limit_and_says_so(limit_mib: int) -> None:
    """No surface may show the recorded 128 MiB limit beside a pod whose spec says another."""
    from podmortem.diagnosis import from_record

    limit = limit_mib * 2**20
    (as_recorded,) = kernel.recorded_records()
    (record,) = kernel.recorded_records(limit)
    factor = limit / kernel.RECORDED_LIMIT_BYTES
    memory = record.counters["memory"]
    assert memory.limit_kb * 1024 == limit and memory.usage_kb * 1024 == limit  # killed at its limit
    assert memory.failcnt == as_recorded.counters["memory"].failcnt  # counts are not sizes
    # The "no limit" of memory+swap stays "no limit".
    assert record.counters["memory+swap"].limit_kb == as_recorded.counters["memory+swap"].limit_kb
    for old, new in zip(as_recorded.tasks, record.tasks, strict=True):
        assert (new.pid, new.name) == (old.pid, old.name)
        assert old.rss_pages is not None and new.rss_pages == round(old.rss_pages * factor)
    assert record.killed[0].anon_rss_kb == round((as_recorded.killed[0].anon_rss_kb or 0) * factor)
    stat = record.cgroup_stats[0].stat if record.cgroup_stats else {}
    assert not stat or stat.get("hierarchical_memory_limit") == limit
    report = from_record.diagnose(record)
    assert report.cgroup is not None and report.cgroup.limit_bytes == limit
    shown = f"{limit_mib:.1f} MiB" if limit_mib < 1024 else f"{limit_mib / 1024:.1f} GiB"
    assert report.verdict == "memcg-limit" and f"limit of {shown}" in report.findings[0].message
    # The label: recorded, and scaled when it was.
    assert record.source is not None and record.source.startswith(kernel.RECORDED_LABEL)
    assert report.record_source == record.source
    assert ("scaled" in record.source) == (limit_mib != 128)
    if limit_mib != 128:
        assert record.source.endswith(f"from its 128Mi limit to this pod's {quantity.format_mib(limit)}")
    assert report.labelled("x") == f"[{record.source}] x"
