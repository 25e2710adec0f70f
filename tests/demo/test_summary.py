"""The demo as a check: what counts as the story going wrong."""

from __future__ import annotations

from typing import Any

from podmortem_demo import kernel, runner, summary
from podmortem_demo.runner import LogCheck, RunResult, check_log


def result(
    policy: str, phase: str, *, reason: str, report: dict[str, Any] | None = None, log: LogCheck | None = None
) -> RunResult:
    status: dict[str, Any] = {"phase": phase}
    if report is not None:
        status["failureReport"] = report
    return RunResult(
        policy=policy,
        training_job={"apiVersion": "podmortem.io/v1alpha1", "kind": "TrainingJob", "status": status},
        log=log or LogCheck(10, 10, 0, 0, 1, True),
        kernel="real",
        exit_code=137 if reason == "OOMKilled" else 0,
        reason=reason,
        peak_bytes=None,
    )


def test_check_log_counts_lost_duplicated_and_order() -> None:
    produced = [(1, b"a"), (1, b"a"), (2, b"b"), (3, b"c")]
    assert check_log(produced, list(produced), cuts=2) == LogCheck(4, 4, 0, 0, 2, True)
    got = check_log(produced, [(1, b"a"), (2, b"b"), (2, b"b"), (3, b"c")], cuts=1)
    assert (got.lost, got.duplicated, got.in_order) == (1, 1, False)
    assert check_log(produced, [produced[2], produced[0], produced[1], produced[3]], cuts=1).in_order is False


def test_the_expected_story_has_no_problems() -> None:
    runs = [
        result("fresh-fork", "Failed", reason="OOMKilled", report={"verdict": "memcg-limit", "findings": []}),
        result("auto", "Succeeded", reason="Completed"),
    ]
    assert summary.problems(runs) == []
    text = summary.table(runs, limit_bytes=256 * 2**20)
    assert "verdict memcg-limit" in text and "no failure report" in text


def test_each_deviation_is_named() -> None:
    runs = [
        result("fresh-fork", "Succeeded", reason="Completed"),
        result("auto", "Failed", reason="OOMKilled", log=LogCheck(10, 9, 1, 0, 0, False)),
    ]
    found = summary.problems(runs)
    assert any("fresh-fork: expected an OOM kill" in p for p in found)
    assert any("auto: expected the job to succeed" in p for p in found)
    assert any("auto: log lost 1" in p and "out of order" in p for p in found)
    assert any("auto: no stream cut" in p for p in found)
    no_verdict = [result("fresh-fork", "Failed", reason="OOMKilled", report={"findings": []})]
    assert summary.problems(no_verdict) == ["fresh-fork: the failure report has no verdict"]


def test_the_peak_is_the_trainingjobs_one_and_says_where_it_came_from() -> None:
    """The summary quotes status.memory (the Peak/Limit column), never a measure of its own."""
    run = result(
        "fresh-fork", "Failed", reason="OOMKilled", report={"verdict": "memcg-limit", "findings": []}
    )
    run.peak_bytes = 259 * 2**20  # the demo kubelet's own measure: not what the summary shows
    run.training_job["status"]["memory"] = {
        "peakOfLimit": "256Mi/256Mi (100%, kernel)", "peakSource": "the kernel's OOM record at the kill",
    }
    line = summary.table([run], limit_bytes=256 * 2**20).splitlines()[1]
    assert "pod peak 256Mi/256Mi (100%, kernel) from the kernel's OOM record at the kill" in line
    assert "259Mi" not in line and "RECORDED" not in line
    run.kernel = "recorded"
    run.kernel_record = kernel.recorded_records(256 * 2**20)[0]
    source = kernel.record_source(256 * 2**20)
    run.training_job["status"]["failureReport"]["record_source"] = source
    line = summary.table([run], limit_bytes=256 * 2**20).splitlines()[1]
    assert f"verdict memcg-limit () [{source}]" in line
    del run.training_job["status"]["memory"]
    line = summary.table([run], limit_bytes=1).splitlines()[1]
    assert "pod peak ? (no memory line and no kernel record)" in line


def test_the_patched_runs_warnings_are_in_the_summary_and_break_the_story() -> None:
    run = result("auto", "Succeeded", reason="Completed")
    assert "no MemoryPressure warning" in summary.table([run], limit_bytes=2**28)
    warning = "pointgroup-auto-train: epoch 2: ...; projected to cross the limit at epoch 5 (in 2.5 epochs)"
    run.events = [
        {"type": "Warning", "reason": "MemoryPressure", "message": warning},
        {"type": "Normal", "reason": "Other", "message": "x"},
    ]
    line = summary.table([run], limit_bytes=2**28).splitlines()[1]
    assert f"1 MemoryPressure warning(s), the last: {warning}" in line
    assert summary.problems([run]) == [f"auto: succeeded, but was warned: {warning}"]


def test_the_summary_goes_first_on_its_own() -> None:
    runs = [result("auto", "Succeeded", reason="Completed")]
    assert summary.table(runs, limit_bytes=2**28).splitlines()[0] == "summary:"


def test_a_succeeded_job_still_under_memory_pressure_is_a_problem() -> None:
    run = result("auto", "Succeeded", reason="Completed")
    run.training_job["status"]["conditions"] = [{"type": "MemoryPressure", "status": "True"}]
    assert summary.problems([run]) == ["auto: the job succeeded but still shows MemoryPressure True"]
    run.training_job["status"]["conditions"] = [{"type": "MemoryPressure", "status": "False"}]
    assert summary.problems([run]) == []


def test_without_a_cgroup_the_run_peak_is_never_below_what_a_memory_line_showed() -> None:
    """Two samplers (the kubelet's watchdog, the trainer's own): either can miss the other's spike."""
    line = ("-> memory epoch 2: rss 150.00MiB (peak 151.00MiB), pod 140.00MiB of 256.00MiB "
            "(peak 193.38MiB, epoch peak 190.00MiB), workers 0 pss 0B")
    assert runner._sampled_peak(188 * 2**20, [line]) == round(193.38 * 2**20)
    assert runner._sampled_peak(200 * 2**20, [line]) == 200 * 2**20
    assert runner._sampled_peak(None, ["no line here"]) is None
