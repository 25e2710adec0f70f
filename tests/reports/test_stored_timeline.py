"""The stored timeline: bounded, grouped, round-trips into the page's PSS bands, restarts and projection."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from podmortem.render import page
from podmortem.reports import stored_timeline, times
from podmortem.reports.document import ReportDocument
from podmortem.reports.memory import MemorySample, ProcessMemory
from podmortem.reports.timeline_model import Projection

T0 = datetime(2026, 5, 1, tzinfo=UTC)
MIB = 2**20


def samples(n: int) -> list[MemorySample]:
    """A trainer (pid 100) climbing, and from sample n/2 two forked workers (an evaluation)."""
    out = []
    for i in range(n):
        procs = [ProcessMemory(pid=100, name="python3", pss_bytes=(500 + i) * MIB)]
        if i >= n // 2:
            procs += [ProcessMemory(pid=200 + k, name="python3", pss_bytes=100 * MIB) for k in range(2)]
        procs.append(ProcessMemory(pid=99_999, name="sh", pss_bytes=None))  # unreadable: left out
        out.append(MemorySample(at=T0 + timedelta(seconds=10 * i), usage_bytes=(600 + i) * MIB,
                                limit_bytes=2048 * MIB, processes=procs))
    return out


def test_a_long_series_is_bounded_keeping_the_first_and_last_sample() -> None:
    doc = stored_timeline.compact(samples(4000))
    assert doc["samples"] == 4000 and len(doc["points"]) == stored_timeline.MAX_POINTS
    assert doc["points"][0][0] == "2026-05-01T00:00:00Z"
    assert doc["points"][-1][0] == times.rfc3339(T0 + timedelta(seconds=39_990))
    stamps = [p[0] for p in doc["points"]]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    # 360 points with two groups stay a small file (this is why it is not in the 16 KiB status).
    assert 16 * 1024 < len(json.dumps(doc)) < 40 * 1024


def test_processes_are_grouped_trainer_and_workers() -> None:
    doc = stored_timeline.compact(samples(10))
    assert doc["points"][0][3] == {"trainer": 500 * MIB}
    assert doc["points"][9][3] == {"trainer": 509 * MIB, "workers": 200 * MIB}


def test_round_trip_feeds_the_page_bands_restarts_and_projection(tmp_path: Path) -> None:
    restart = T0 + timedelta(seconds=30)
    projection = Projection(start=T0, start_bytes=600 * MIB, end=T0 + timedelta(minutes=5),
                            end_bytes=2048 * MIB, text="limit in 5 min")
    doc = stored_timeline.compact(samples(10), restarts=[restart], projection=projection)
    stored_timeline.write(tmp_path, doc, "<svg/>")
    back = json.loads((tmp_path / stored_timeline.JSON_NAME).read_text())
    assert (tmp_path / stored_timeline.SVG_NAME).read_text() == "<svg/>"
    got_samples, got_restarts, got_projection = stored_timeline.expand(back)
    assert got_restarts == [restart] and got_projection == projection
    assert [s.usage_bytes for s in got_samples] == [(600 + i) * MIB for i in range(10)]
    tl, _ = page.timeline_of(page.PageInput(title="t", report=ReportDocument(), samples=got_samples,
                                            restarts=got_restarts, projection=got_projection))
    assert tl.processes[-1].pss == {"trainer": 509 * MIB, "workers": 200 * MIB}
    assert tl.restarts == [restart] and tl.projection == projection and tl.limit_bytes == 2048 * MIB


def test_malformed_documents_are_skipped_not_raised() -> None:
    doc = {"points": [["not a time", 1, 2, {}], [1, 2], ["2026-05-01T00:00:00Z", "x", None, []]],
           "restarts": ["nope", 3], "projection": {"start": "2026-05-01T00:00:00Z"}}
    got, restarts, projection = stored_timeline.expand(doc)
    assert len(got) == 1 and got[0].usage_bytes is None and restarts == [] and projection is None
