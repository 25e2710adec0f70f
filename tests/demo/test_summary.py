"""The demo as a check: what counts as the story going wrong."""

from __future__ import annotations

from typing import Any

from podmortem.demo import summary
from podmortem.demo.runner import LogCheck, RunResult, check_log


def result(
    policy: str, phase: str, *, reason: str, report: dict[str, Any] | None = None, log: LogCheck | None = None
) -> RunResult:
    status: dict[str, Any] = {"phase": phase}
    if report is not None:
        status["failureReport"] = report
    return RunResult(
        policy=policy,
        training_job={"status": status},
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
