"""Reading back a report an earlier operator run wrote: status form and annotation form."""

from __future__ import annotations

from datetime import UTC, datetime

from podmortem.diagnosis import verdicts
from podmortem.operator import stored_report
from podmortem.operator.reporting import fit, summary
from podmortem.reports import times
from podmortem.reports.failure import FailureReport
from podmortem_demo.harness import evidence_for

from .test_kernel_record_followup import RECORD, UID, termination


def _report() -> FailureReport:
    return verdicts.diagnose_termination(
        termination=termination(), evidence=evidence_for(UID, RECORD), last_line_ns=None, stale_after_s=600
    )


CONTEXT = {
    "pod": {"uid": UID, "name": "trainer", "containerID": "containerd://abc", "container": "trainer"},
    "reportedAt": "2026-12-02T10:00:00Z",
    "evidence": {
        "kernelRecord": {"state": "pending", "note": "asked again"},
        "workingSet": {"source": "agent", "peakBytes": 5, "points": []},
        "log": {"lastLineAt": "2026-12-02T09:59:58Z", "url": None},
        "errors": [],
    },
}


def test_a_status_report_gives_back_its_report_and_context() -> None:
    report = _report()
    stored = fit(report, CONTEXT, max_bytes=1 << 20)
    assert stored_report.pending_record(stored)
    assert stored_report.context(stored, status=True) == CONTEXT
    assert stored_report.failure_report(stored) == report
    assert stored_report.last_line_ns(CONTEXT) == int(
        datetime(2026, 12, 2, 9, 59, 58, tzinfo=UTC).timestamp() * 1e9
    )


def test_an_annotation_summary_gives_back_what_it_keeps() -> None:
    stored = summary(_report(), CONTEXT, max_bytes=1 << 20)
    assert stored_report.pending_record(stored)
    ctx = stored_report.context(stored, status=False)
    assert ctx["evidence"]["kernelRecord"] == {"state": "pending"}
    assert ctx["reportedAt"] == CONTEXT["reportedAt"] and ctx["pod"]["uid"] == UID
    assert summary(_report(), ctx, max_bytes=1 << 20)["pod"] == stored["pod"]


def test_reports_without_a_pending_record_or_readable_times() -> None:
    assert not stored_report.pending_record({"kernelRecord": "attached"})
    assert not stored_report.pending_record({"evidence": {"kernelRecord": {"state": "not-found"}}})
    assert not stored_report.pending_record({"evidence": "garbage"})
    assert times.parse_time("yesterday") is None and times.parse_time(None) is None
    assert stored_report.failure_report({"verdict": 5, "findings": "no"}) is None
