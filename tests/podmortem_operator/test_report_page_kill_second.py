"""The log lines the server's page shows "up to the kill", at the kill time's own resolution.

The kubelet stamps ``finishedAt`` in whole seconds; the store's lines have nanoseconds. A kill
stamped 12:00:03 happened during that second, so the lines of that second are before it (and
the page's kill row follows them). A kill time with milliseconds says when within the second:
a line half a second later is after it and is not among the lines "up to the kill".
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from podmortem.logs.cursor import LogCursor
from podmortem.logs.events import LogLine
from podmortem.logs.storage.store import LogStore, StoreSettings
from podmortem.operator.reporting import report_page
from podmortem.render import page
from podmortem.reports.document import ReportDocument

KILL_SECOND = int(datetime(2024, 5, 1, 12, 0, 3, tzinfo=UTC).timestamp()) * 10**9
MS = 10**6
#: (ms from the start of the kill's second, text)
STAMPS = [(-1500, "before"), (200, "at .200"), (500, "at .500"), (1200, "next second")]


@pytest.fixture
async def log_store(tmp_path: Path) -> AsyncIterator[LogStore]:
    async with LogStore(tmp_path, settings=StoreSettings(fsync_interval_s=None)) as st:
        cursor = LogCursor(container_id="x")
        batch = []
        for ms, text in STAMPS:
            cursor.accept(KILL_SECOND + ms * MS)
            batch.append(LogLine("c", KILL_SECOND + ms * MS, text.encode()))
        await st.sink(namespace="ns", pod="p").write("c", batch, cursor)
        yield st


def _report(finished_at: str) -> ReportDocument:
    pod = {"namespace": "ns", "name": "p", "container": "c", "finishedAt": finished_at}
    return ReportDocument.parse({"verdict": "memcg-limit", "pod": pod})


async def test_a_kill_in_whole_seconds_takes_the_lines_of_its_second(log_store: LogStore) -> None:
    report = _report("2024-05-01T12:00:03Z")
    lines, _, _ = await report_page.log_context(log_store, report)
    assert [x.text for x in lines] == ["before", "at .200", "at .500"]
    doc = page.render(page.PageInput(title="ns/job", report=report, log_lines=lines))
    log = doc.split('<table class="log">', 1)[1]
    assert log.index("at .500") < log.index('class="kill"'), "the kill row sits above lines of its second"


async def test_a_kill_with_milliseconds_takes_only_the_lines_before_it(log_store: LogStore) -> None:
    lines, _, _ = await report_page.log_context(log_store, _report("2024-05-01T12:00:03.250Z"))
    assert [x.text for x in lines] == ["before", "at .200"]
