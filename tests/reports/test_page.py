"""The report page: escaping, pending refresh, the kill marker's place, what it says of missing data."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from podmortem.diagnosis import from_record
from podmortem.kernel import oom_parser
from podmortem.render import page, timeline_svg
from podmortem.reports.document import ReportDocument
from podmortem.reports.memory import MemorySample, ProcessMemory
from podmortem.reports.units import GIB, MIB

KILL = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)


def stored_report(**over: Any) -> dict[str, Any]:
    """A report as the operator stores it: a real diagnosis of a bundled record plus the context."""
    path = Path(oom_parser.__file__).parents[1] / "examples" / "fork-cow-6.18.log"
    records = oom_parser.parse_text(path.read_text(encoding="utf-8"))
    report = from_record.diagnose(records[0]).model_dump(mode="json")
    start = KILL - timedelta(hours=1)
    points = [
        [(start + timedelta(minutes=m)).strftime("%Y-%m-%dT%H:%M:%SZ"), (100 + m) * MIB]
        for m in range(0, 61, 5)
    ]
    report |= {
        "pod": {
            "namespace": "ml",
            "name": "train-0",
            "container": "trainer",
            "node": "n1",
            "exitCode": 137,
            "reason": "OOMKilled",
            "startedAt": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "finishedAt": KILL.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "reportedAt": "2026-05-01T12:00:02Z",
        "evidence": {
            "kernelRecord": {"state": "attached"},
            "errors": [],
            "workingSet": {"source": "agent samples", "points": points},
            "log": {
                "url": "/logs/ml/train-0?container=trainer",
                "lastLineAt": "2026-05-01T11:58:00Z",
                "lines": 1038,
                "gaps": [],
            },
        },
    }
    report.update(over)
    return report


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def parsed(doc: str) -> list[tuple[str, dict[str, str | None]]]:
    p = _Collect()
    p.feed(doc)
    return p.tags


def test_page_shows_verdict_findings_and_kill_at_its_time() -> None:
    report = stored_report()
    doc = page.render(page.PageInput(title="ml/train", report=ReportDocument.parse(report)))
    assert doc.startswith("<!DOCTYPE html>")
    cause = next(f for f in report["findings"] if f["code"] == report["verdict"])
    assert page.esc(cause["message"]) in doc
    for f in report["findings"]:
        assert f'data-code="{f["code"]}"' in doc
    assert "http-equiv" not in doc  # nothing pending
    tags = parsed(doc)
    svg = next(a for t, a in tags if t == "svg")
    kill = next(a for t, a in tags if t == "g" and a.get("class") == "kill")
    assert kill["data-t"] == "2026-05-01T12:00:00Z"
    line = tags[tags.index(("g", kill)) + 1][1]
    t0, t1 = float(svg["data-t0"] or 0), float(svg["data-t1"] or 0)
    x0, x1 = float(svg["data-x0"] or 0), float(svg["data-x1"] or 0)
    expected = x0 + (KILL.timestamp() - t0) / (t1 - t0) * (x1 - x0)
    assert abs(float(line["x1"] or 0) - expected) < 0.1
    assert float(line["x1"] or 0) == x1  # the kill is the last moment of this report
    assert "<script" not in doc.lower() and "http://" not in doc.replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )
    assert "per-process PSS over time is not kept in a stored report" in doc
    assert "the last log line came 120 s before the kill" in doc


def test_html_in_log_lines_comm_and_pod_names_is_escaped() -> None:
    report = stored_report()
    report["tasks"][0]["name"] = "<script>alert(1)</script>"
    report["kill"]["comm"] = "<script>alert(2)</script>"
    report["pod"]["name"] = '"><script>alert(3)</script>'
    report["evidence"]["log"]["url"] = "javascript:alert(4)"
    lines = [page.LogLine(at=KILL - timedelta(seconds=3), text="<script>alert(5)</script>")]
    doc = page.render(page.PageInput(title="<b>x</b>", report=ReportDocument.parse(report), log_lines=lines))
    assert "<script" not in doc
    assert "javascript:" not in doc
    assert "&lt;script&gt;alert(1)" in doc and "&lt;script&gt;alert(5)" in doc
    assert "&lt;b&gt;x&lt;/b&gt;" in doc


def test_pending_evidence_says_so_and_refreshes() -> None:
    report = stored_report()
    report["evidence"]["kernelRecord"] = {"state": "pending", "note": "asked again for 15 s"}
    doc = page.render(page.PageInput(title="ml/train", report=ReportDocument.parse(report)))
    assert f'<meta http-equiv="refresh" content="{page.REFRESH_S}">' in doc
    assert 'id="pending"' in doc and "the kernel&#x27;s OOM record" in doc


def test_annotation_summary_and_job_rows() -> None:
    summary = {
        "verdict": "memcg-limit",
        "pod": {"namespace": "ml", "name": "w-1", "exitCode": 137},
        "findings": [{"code": "memcg-limit", "severity": "critical", "message": "hit its limit"}],
        "kernelRecord": "not-found",
        "logUrl": "/logs/ml/w-1?container=c",
        "job": {
            "pods": 2,
            "rootCause": {"pod": "w-1", "rank": 1, "verdict": "memcg-limit", "line": "x"},
            "rows": [
                {
                    "pod": "m-0",
                    "rank": 0,
                    "role": "consequence",
                    "exitCode": 1,
                    "line": "<NCCL>",
                    "logUrl": "/logs/ml/m-0",
                },
                {"pod": "w-1", "rank": 1, "role": "root-cause", "exitCode": 137, "logUrl": "/logs/ml/w-1"},
            ],
        },
    }
    doc = page.render(page.PageInput(title="ml/ddp", report=ReportDocument.parse(summary)))
    assert doc.count('<tr class="role-') == 2 and "&lt;NCCL&gt;" in doc
    assert "w-1: memcg-limit. hit its limit" in doc
    assert "the stored report holds no memory series" in doc
    assert 'href="/logs/ml/w-1?container=c"' in doc


def test_samples_draw_stacked_pss_bands_and_binary_axis() -> None:
    t0 = KILL - timedelta(minutes=10)
    samples = [
        MemorySample(
            at=t0 + timedelta(minutes=i),
            usage_bytes=(1 + i // 3) * GIB,
            limit_bytes=4 * GIB,
            processes=[ProcessMemory(pid=1, name="python3", pss_bytes=GIB)]
            + ([ProcessMemory(pid=2, name="pt_worker", pss_bytes=GIB)] if i >= 5 else []),
        )
        for i in range(10)
    ]
    report = ReportDocument.parse(stored_report())
    doc = page.render(page.PageInput(title="t", report=report, samples=samples))
    assert doc.count('class="pss"') == 2
    assert re.search(r">4 GiB</text>", doc)
    # the worker's band is zero before it appeared: its upper edge equals the trainer's there
    tl, _ = page.timeline_of(page.PageInput(title="t", report=report, samples=samples))
    assert tl.processes[0].pss == {"python3 (1)": GIB}


def test_no_timeline_reason_is_said() -> None:
    doc = page.render(
        page.PageInput(
            title="t",
            report=ReportDocument.parse(stored_report()),
            no_timeline_reason="a pasted record has no timeline",
        )
    )
    assert "<svg" not in doc and "a pasted record has no timeline" in doc


def test_axis_labels_are_whole_binary_units() -> None:
    assert timeline_svg.axis_label(3 * GIB) == "3 GiB"
    assert timeline_svg.axis_label(512 * MIB) == "512 MiB"
    assert timeline_svg.axis_label(GIB + GIB // 2) == "1.5 GiB"


def test_stored_report_roundtrips_as_json() -> None:
    report = stored_report()
    assert json.loads(json.dumps(report)) == report


def test_times_in_utc_and_in_the_pods_local_zone_when_it_sets_tz() -> None:
    report = stored_report()
    assert "Europe/Berlin" not in page.render(page.PageInput(title="ml/train", report=_read(report)))
    report["pod"]["timeZone"] = "Europe/Berlin"
    doc = page.render(page.PageInput(title="ml/train", report=ReportDocument.parse(report)))
    assert "ended 2026-05-01 12:00:00 UTC (2026-05-01 14:00:00 Europe/Berlin)" in doc
    assert "the pod's local time (Europe/Berlin, from its TZ)" in doc
    report["pod"]["timeZone"] = "Not/AZone"
    assert "Not/AZone" not in page.render(page.PageInput(title="ml/train", report=_read(report)))


def test_the_zone_comes_from_the_containers_literal_tz() -> None:
    from podmortem.diagnosis import termination

    pod = {"spec": {"containers": [
        {"name": "side", "env": [{"name": "TZ", "value": "Asia/Tokyo"}]},
        {"name": "trainer", "env": [{"name": "TZ", "value": ":Europe/Berlin"}]},
        {"name": "odd", "env": [{"name": "TZ", "value": "<script>"}]},
    ]}}
    assert termination.time_zone(pod, "trainer") == "Europe/Berlin"
    assert termination.time_zone(pod, "odd") is None
    assert termination.time_zone(pod, "missing") is None


def _read(stored: dict[str, Any]) -> ReportDocument:
    return ReportDocument.parse(stored)


def test_the_curve_ends_at_the_kernels_usage_at_the_kill_and_the_peak_says_where_from() -> None:
    """Samples stop below the kill (here 160 MiB an hour's worth, the record says 128 MiB at the limit
    of 128 MiB); the curve's last point is the kernel's figure, at the kill's time."""
    from podmortem.reports.document import pod_peak

    report = ReportDocument.parse(stored_report())
    report.evidence.peak = pod_peak(report)
    assert report.report.cgroup is not None
    usage = report.report.cgroup.usage_bytes
    assert usage == 128 * MIB and report.evidence.peak is not None
    assert (report.evidence.peak.peak_bytes, report.evidence.peak.kind) == (usage, "kernel")
    tl, notes = page.timeline_of(page.PageInput(title="t", report=report))
    assert tl.usage[-1] == (KILL, usage)
    assert tl.usage[-2][0] <= KILL and len(tl.usage) == 14  # the samples stay; the kernel's point ends them
    assert any("the curve's last point is the kernel's usage at the kill (128.0 MiB" in n for n in notes)
    assert any(n.startswith("the pod's peak: 128.0 MiB of the 128.0 MiB limit, from the kernel's OOM record")
               for n in notes)
    # With samples from the agent too, the kernel's point still ends the curve.
    samples = [MemorySample(at=KILL - timedelta(seconds=s), usage_bytes=100 * MIB, limit_bytes=128 * MIB)
               for s in (3, 2, 1)]
    tl, _ = page.timeline_of(page.PageInput(title="t", report=report, samples=samples))
    assert tl.usage[-1] == (KILL, usage) and len(tl.usage) == 4
    # Without the kernel's record the peak is the samples', named as a lower bound, and no point is added.
    bare = ReportDocument.parse(stored_report(cgroup=None))
    bare.evidence.working_set.peak_bytes = 160 * MIB
    peak = pod_peak(bare)
    assert peak is not None and peak.kind == "samples" and "lower bound" in (peak.source or "")
    tl, _ = page.timeline_of(page.PageInput(title="t", report=bare))
    assert tl.usage[-1][1] == 160 * MIB


def test_a_recorded_record_leads_the_pages_verdict() -> None:
    report = ReportDocument.parse(stored_report(record_source="RECORDED, not from this run: x.log"))
    doc = page.render(page.PageInput(title="ml/train", report=report))
    assert re.search(r'<p class="verdict" id="verdict">\[RECORDED, not from this run: x\.log\] train-0', doc)
    plain = page.render(page.PageInput(title="ml/train", report=ReportDocument.parse(stored_report())))
    assert "RECORDED" not in plain


def test_the_killed_rows_split_comes_from_its_kill_line_where_the_task_table_has_none() -> None:
    """A 4.15 record: its task table prints rss only; the kill line has anon, file and shmem."""
    path = Path(__file__).parents[1] / "fixtures" / "oom-records" / "01-k3s-v1-dmesgT-stress-4.15.log"
    record = oom_parser.parse_text(path.read_text(encoding="utf-8"))[0]
    report = from_record.diagnose(record)
    assert report.kill is not None and all(t.rss_anon_pages is None for t in report.tasks)
    doc = page.render(page.PageInput(title="k", report=ReportDocument(report=report)))
    table = doc.split('class="tasks"')[1].split("</table>")[0]
    rows = re.findall(r"<tr( class=\"killed\")?>(.*?)</tr>", table)
    cells = {killed: re.findall(r"<td[^>]*>(.*?)</td>", row) for killed, row in rows[1:]}
    killed, other = cells[' class="killed"'], cells[""]
    assert killed[3:6] == ["97.3 MiB", "192.0 KiB", "0 B"], killed  # anon_rss_kb 99620, file 192, shmem 0
    assert other[3:6] == ["?", "?", "?"], other  # the others' split is not known
