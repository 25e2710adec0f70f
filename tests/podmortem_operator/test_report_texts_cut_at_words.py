"""Texts the operator cuts to fit (the job section's lines, its Event, the annotation's messages) end at
a word with an ellipsis: a cut text must read as cut, and never end in half a word ("evidence.kernelR").
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from podmortem.diagnosis import job_root_cause as jrc
from podmortem.diagnosis import job_section
from podmortem.reports.document import Evidence, PodContext, ReportDocument
from podmortem.reports.failure import FailureReport
from podmortem.reports.findings import Finding, Severity
from podmortem.reports.text import ELLIPSIS

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
#: The pending OOMKilled finding as the operator wrote it (verdicts.oomkilled_without_record).
PENDING = (
    "The kubelet reports container 'trainer' as OOMKilled: it passed its memory limit and the kernel killed "
    "it. The kernel's own record is not in yet (the node agent has not handed it over); this report is "
    "updated when it comes (evidence.kernelRecord.state: pending) and then says what held the memory."
)
WORDS = set(PENDING.replace("(", " ").replace(")", " ").split())


def _ends_at_a_word(text: str, whole: str) -> bool:
    head = text.removesuffix(ELLIPSIS)
    return text.endswith(ELLIPSIS) and whole.startswith(head) and whole[len(head)].isspace()


def _job(line: str) -> jrc.JobRootCause:
    def facts(rank: int, **kw: object) -> jrc.PodFacts:
        base: dict[str, object] = dict(
            pod=f"ddp-worker-{rank}", container="trainer", rank=rank, exit_code=1, reason="Error",
            finished_at=T0 + timedelta(seconds=60), last_line_at=None, verdict=None, summary=None,
            last_lines=(), log_url=None,
        )
        return jrc.PodFacts(**(base | kw))  # type: ignore[arg-type]

    root = facts(2, exit_code=137, reason="OOMKilled", finished_at=T0, verdict="memcg-limit", summary=line)
    other = facts(0, exit_code=143, last_lines=("x " * 400,))
    return jrc.root_cause([root, other])


def test_the_root_causes_line_and_a_rows_line_end_at_a_word() -> None:
    doc = job_section.section(_job(PENDING), max_bytes=1 << 20).to_json()
    line = doc["rootCause"]["line"]
    assert len(line) <= job_section.LINE_CHARS and _ends_at_a_word(line, PENDING), line
    assert not line.removesuffix(ELLIPSIS).endswith("kernelR")


def test_the_root_causes_line_cut_hard_to_fit_ends_at_a_word() -> None:
    doc = job_section.section(_job(PENDING), max_bytes=600).to_json()  # not even the root row fits
    line = doc["rootCause"]["line"]
    assert len(line) <= 80 and _ends_at_a_word(line, PENDING), line


def test_the_job_root_cause_event_ends_its_line_at_a_word() -> None:
    long = PENDING + " " + PENDING
    headline = job_section.headline(_job(long))
    assert headline is not None
    quoted = headline.split(" failed first: ", 1)[1].split("; 1 consequence", 1)[0]
    assert len(quoted) <= 300 and _ends_at_a_word(quoted, long), quoted


def test_the_annotations_messages_and_errors_cut_to_fit_end_at_a_word() -> None:
    report = FailureReport(
        verdict="memcg-limit",
        findings=[Finding(code="memcg-limit", severity=Severity.CRITICAL, message=PENDING * 3)],
    )
    document = ReportDocument(
        report=report, pod=PodContext(name="p"), evidence=Evidence(errors=["the agent said " + PENDING] * 3)
    )
    error = "the agent said " + PENDING
    cut = set()
    for budget in (2000, 900, 400):
        doc = document.to_annotation(max_bytes=budget)
        assert doc["truncated"] is True
        for f in doc["findings"]:
            if f["message"] != PENDING * 3:
                cut.add("message")
                assert _ends_at_a_word(f["message"], PENDING * 3), (budget, f["message"])
        for e in doc["errors"]:
            if e != error:
                cut.add("error")
                assert _ends_at_a_word(e, error), (budget, e)
    assert cut == {"message", "error"}  # both kinds of text were cut at some budget
