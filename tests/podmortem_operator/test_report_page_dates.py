"""A report's times, whatever they are, give a page: ``finishedAt: 9999-12-31T23:59:59Z`` once gave a 500.

Anyone who may edit a TrainingJob's status (or a watched job's annotation) writes the report's
times; hypothesis picks any instant of years 1 to 9999, at any offset and resolution, and any text.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from aiohttp import test_utils
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.logs.test_http import write

from podmortem.logs.cursor import LogCursor
from podmortem.logs.serving import auth, http
from podmortem.logs.storage.store import LogStore, StoreSettings
from podmortem.operator.reporting import report_page

from .test_report_page_access import REPORT, Foreign

OPEN = auth.Reviewer(api=None, settings=auth.AuthSettings(authenticate=False, authorize=False))

offsets = st.integers(min_value=-14 * 60, max_value=14 * 60).map(lambda m: timezone(timedelta(minutes=m)))
instants = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59, 999999),
                        timezones=st.just(UTC) | offsets)
stamps = st.one_of(
    instants.map(lambda d: d.isoformat().replace("+00:00", "Z")),
    instants.map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%S") + ("Z" if d.utcoffset() == timedelta(0)
                                                               else d.strftime("%z"))),
    st.text(max_size=40),
)


async def _status(root: Path, finished: str, started: str) -> int:
    report = dict(REPORT, pod=dict(REPORT["pod"], finishedAt=finished, startedAt=started))  # type: ignore[arg-type]
    async with LogStore(root, settings=StoreSettings(fsync_interval_s=None)) as log_store:
        await write(log_store.sink(namespace="ns", pod="p"), "c", [b"a line"], LogCursor(container_id="x"))
        app = http.make_app(log_store=log_store, reviewer=OPEN)
        finder = report_page.ReportFinder(kube=None, foreign=Foreign({("ns", "job"): report}))
        report_page.add_routes(app, finder)
        async with test_utils.TestClient(test_utils.TestServer(app)) as client:
            statuses = []
            for path in ("/reports/ns/job", "/reports/ns/job?format=json"):
                async with client.get(path) as resp:
                    await resp.read()
                    statuses.append(resp.status)
    return max(statuses)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(finished=stamps, started=stamps)
@example(finished="9999-12-31T23:59:59Z", started="9999-12-31T23:59:59Z")
@example(finished="9999-12-31T23:59:59.999999Z", started="0001-01-01T00:00:00Z")
@example(finished="9999-12-31T23:59:59-14:00", started="0001-01-01T00:00:00+14:00")
def test_any_finished_at_gives_the_page(tmp_path: Path, finished: str, started: str) -> None:
    import shutil

    shutil.rmtree(tmp_path / "store", ignore_errors=True)
    assert asyncio.run(_status(tmp_path / "store", finished, started)) == 200
