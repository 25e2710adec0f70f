"""The page draws and counts only what it knows, and puts the kill where it happened.

* A foreign job's report is the annotation's summary: no memory series, no line count. The page
  must not draw an empty 0 B-1 B chart for it, nor say "? lines stored".
* The kubelet's ``finishedAt`` has one-second resolution, the log's lines nanoseconds: a line at
  12:00:03.500 was printed during the second the kill is stamped with, so it is not after the kill.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from podmortem.render import page, timeline_svg
from podmortem.reports import timeline_model as tm
from podmortem.reports.document import ReportDocument

#: An annotation summary as the operator writes it for a PyTorchJob (`ReportDocument.to_annotation`).
SUMMARY = {
    "verdict": "memcg-limit",
    "reportedAt": "2024-05-01T12:00:05Z",
    "pod": {"namespace": "ml", "name": "ddp-worker-1", "container": "trainer", "node": "n1",
            "exitCode": 137, "reason": "OOMKilled", "finishedAt": "2024-05-01T12:00:03Z"},
    "findings": [{"code": "memcg-limit", "severity": "critical", "message": "hit its limit"}],
    "kernelRecord": "attached",
    "workingSetPeakBytes": None,
    "lastLogLineAt": "2024-05-01T12:00:03Z",
    "logUrl": "/logs/ml/ddp-worker-1?container=trainer",
    "errors": [],
}


def _text(doc: str) -> str:
    return re.sub(r"<[^>]+>", " ", doc)


def test_an_annotation_page_draws_no_empty_timeline_and_counts_no_unknown_lines() -> None:
    doc = page.render(page.PageInput(title="ml/ddp", report=ReportDocument.parse(SUMMARY)))
    assert "<svg" not in doc, "an empty chart is drawn"
    assert ">0 B<" not in doc and ">1 B<" not in doc
    assert "no memory samples" in _text(doc)
    assert 'class="full-log" href="/logs/ml/ddp-worker-1?container=trainer"' in doc
    assert "?" not in _text(doc).split("the full log", 1)[1].split("\n", 1)[0]
    assert "lines stored" not in doc


def test_a_known_line_count_is_still_said() -> None:
    report = dict(SUMMARY) | {"evidence": {"log": {"url": "/logs/ml/x", "lines": 1038}}}
    doc = page.render(page.PageInput(title="ml/ddp", report=ReportDocument.parse(report)))
    assert "(1038 lines stored)" in doc


def test_a_timeline_with_no_bytes_draws_no_axis() -> None:
    """The filed ``timeline.svg`` of a report without samples: no 0 B-1 B axis either."""
    kill = datetime(2024, 5, 1, 12, 0, 3, tzinfo=UTC)
    svg = timeline_svg.svg(tm.Timeline(kill_at=kill, last_line_at=kill - timedelta(seconds=2)))
    assert ">0 B<" not in svg and ">1 B<" not in svg
    assert "no memory samples" in svg


def _rows(doc: str) -> list[str]:
    """The log table's rows, as "kill" or the line's text, in order."""
    table = doc.split('<table class="log">', 1)[1].split("</table>", 1)[0]
    out = []
    for row in re.findall(r"<tr[^>]*>.*?</tr>", table):
        out.append("kill" if 'class="kill"' in row else re.findall(r"<td>(.*?)</td>", row)[1])
    return out


def _lines(*stamps: datetime) -> list[page.LogLine]:
    return [page.LogLine(at=at, text=f"line {i}") for i, at in enumerate(stamps)]


def test_lines_within_the_kills_second_come_before_the_kill_marker() -> None:
    """Kill stamped 12:00:03 (whole seconds): every line up to 12:00:03.999 precedes the marker."""
    second = datetime(2024, 5, 1, 12, 0, 3, tzinfo=UTC)
    lines = _lines(*(second + timedelta(milliseconds=100 * i) for i in range(-3, 10)))
    doc = page.render(page.PageInput(title="ml/ddp", report=ReportDocument.parse(SUMMARY), log_lines=lines))
    assert _rows(doc) == [f"line {i}" for i in range(13)] + ["kill"]


def test_a_line_in_the_next_second_comes_after_the_kill_marker() -> None:
    second = datetime(2024, 5, 1, 12, 0, 3, tzinfo=UTC)
    lines = _lines(second + timedelta(milliseconds=500), second + timedelta(milliseconds=1200))
    doc = page.render(page.PageInput(title="ml/ddp", report=ReportDocument.parse(SUMMARY), log_lines=lines))
    assert _rows(doc) == ["line 0", "kill", "line 1"]


def test_a_kill_time_with_milliseconds_is_compared_at_milliseconds() -> None:
    report = dict(SUMMARY) | {"pod": dict(SUMMARY["pod"]) | {"finishedAt": "2024-05-01T12:00:03.250Z"}}  # type: ignore[operator]
    second = datetime(2024, 5, 1, 12, 0, 3, tzinfo=UTC)
    lines = _lines(second + timedelta(milliseconds=200), second + timedelta(milliseconds=500))
    doc = page.render(page.PageInput(title="ml/ddp", report=ReportDocument.parse(report), log_lines=lines))
    assert _rows(doc) == ["line 0", "kill", "line 1"]
