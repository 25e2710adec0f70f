"""Choosing between the real kernel and the recorded record, and saying why."""

from __future__ import annotations

from pathlib import Path

import pytest

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
