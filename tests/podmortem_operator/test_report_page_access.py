"""``GET /reports/{namespace}/{job}``: the log API's access checks, and never another namespace."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import kmock
import pytest
from aiohttp import test_utils
from tests.logs import test_http
from tests.logs.test_http import SARS, TOKENS, access_review, token_review

from podmortem.kube.session import ApiSession
from podmortem.logs.serving import auth, http
from podmortem.logs.storage.store import LogStore
from podmortem.operator.reporting import report_page, timeline_files
from podmortem.reports import stored_timeline
from podmortem.reports.document import ReportDocument
from podmortem.reports.memory import MemorySample, ProcessMemory
from podmortem.reports.units import MIB

api_session = test_http.api_session  # the log server's API, on this module's kmock `api`

REPORT = {
    "verdict": "memcg-limit",
    "pod": {"namespace": "ns", "name": "p", "container": "c", "finishedAt": "2026-05-01T12:00:00Z"},
    "findings": [{"code": "memcg-limit", "severity": "critical", "message": "hit its own limit"}],
}


class Foreign:
    def __init__(self, reports: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.reports = reports
        self.asked: list[tuple[str, str]] = []

    def foreign_report(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.asked.append((namespace, name))
        return self.reports.get((namespace, name))


async def client_for(
    log_store: LogStore, reviewer: auth.Reviewer, foreign: Foreign
) -> test_utils.TestClient[Any, Any]:
    app = http.make_app(log_store=log_store, reviewer=reviewer)
    report_page.add_routes(app, report_page.ReportFinder(kube=None, foreign=foreign))
    client = test_utils.TestClient(test_utils.TestServer(app))
    await client.start_server()
    return client


@pytest.mark.parametrize("path", ["/reports/ns/job", "/reports/ns/job/timeline.svg"])
@pytest.mark.parametrize(
    ("authenticated", "allowed", "status"), [(True, True, 200), (False, True, 401), (True, False, 403)]
)
async def test_the_page_and_its_svg_are_reviewed_as_for_logs(
    log_store: LogStore,
    api: kmock.RawHandler,
    api_session: ApiSession,
    path: str,
    authenticated: bool,
    allowed: bool,
    status: int,
) -> None:
    api[TOKENS] << token_review(authenticated)
    api[SARS] << access_review(allowed)
    svg = path.endswith(".svg")
    if svg:
        _file_timeline(log_store.root, pod="p")
    foreign = Foreign({("ns", "job"): REPORT})
    client = await client_for(log_store, auth.Reviewer(api=api_session), foreign)
    try:
        resp = await client.get(path, headers={"Authorization": "Bearer good-token"})
        assert resp.status == status
        body = await resp.text()
        shown = 'data-process="workers"' if svg else "hit its own limit"
        assert (shown in body) == (status == 200)
        assert foreign.asked == ([("ns", "job")] if status == 200 else [])  # no lookup before access
        if status == 200:
            assert resp.headers["Content-Type"].startswith("image/svg+xml" if svg else "text/html")
            assert "default-src 'none'" in resp.headers["Content-Security-Policy"]
            if not svg:
                assert "no stored log" in body  # the pod's log is not in this store
        assert (await client.get(path)).status == 401  # no token
    finally:
        await client.close()


async def test_json_404s_and_other_namespaces(log_store: LogStore) -> None:
    open_reviewer = auth.Reviewer(api=None, settings=auth.AuthSettings(authenticate=False, authorize=False))
    other = dict(REPORT, pod={"namespace": "elsewhere", "name": "p"})
    client = await client_for(
        log_store, open_reviewer, Foreign({("ns", "job"): REPORT, ("ns", "odd"): other})
    )
    try:
        resp = await client.get("/reports/ns/job", params={"format": "json"})
        assert resp.status == 200 and await resp.json() == REPORT
        resp = await client.get("/reports/ns/none")
        assert resp.status == 404 and "no TrainingJob ns/none" in await resp.text()
        assert (await client.get("/reports/ns/odd")).status == 404
        assert (await client.get("/reports/ns/job", params={"tail": "3"})).status == 400
        assert (await client.get("/reports/NS_bad/job")).status == 400
    finally:
        await client.close()


def _file_timeline(root: Path, *, pod: str) -> None:
    """A timeline of pod ``pod`` filed in ns/job the way the reporter files it (two PSS groups)."""
    at = datetime(2026, 5, 1, 11, 59, tzinfo=UTC)
    samples = [
        MemorySample(
            at=at + timedelta(seconds=5 * i), usage_bytes=(100 + i) * MIB, limit_bytes=200 * MIB,
            processes=[ProcessMemory(pid=1, name="python3", pss_bytes=90 * MIB)]
            + [ProcessMemory(pid=9, name="python3", pss_bytes=10 * MIB)] * (i >= 5),
        )
        for i in range(10)
    ]
    report = dict(REPORT, pod=dict(REPORT["pod"], name=pod))  # type: ignore[arg-type]
    doc, svg = timeline_files.build(ReportDocument.parse(report), samples)
    directory = root / "ns" / "job" / pod  # next to that pod's logs
    directory.mkdir(parents=True)
    stored_timeline.write(directory, doc, svg)


async def test_the_page_draws_only_the_reported_pods_filed_timeline(log_store: LogStore) -> None:
    open_reviewer = auth.Reviewer(api=None, settings=auth.AuthSettings(authenticate=False, authorize=False))
    client = await client_for(log_store, open_reviewer, Foreign({("ns", "job"): REPORT}))
    try:
        resp = await client.get("/reports/ns/job/timeline.svg")
        assert resp.status == 404 and "no timeline" in await resp.text()  # none filed
        assert 'class="pss"' not in await (await client.get("/reports/ns/job")).text()
        _file_timeline(log_store.root, pod="another-pod")  # e.g. a previous job of that name
        assert (await client.get("/reports/ns/job/timeline.svg")).status == 404
        assert 'class="pss"' not in await (await client.get("/reports/ns/job")).text()
        shutil.rmtree(log_store.root / "ns" / "job")
        _file_timeline(log_store.root, pod="p")
        page_html = await (await client.get("/reports/ns/job")).text()
        assert 'data-process="trainer"' in page_html and 'data-process="workers"' in page_html
        assert "trainer is the lowest pid" in page_html
        assert (await client.get("/reports/ns/job/timeline.svg", params={"x": "1"})).status == 400
    finally:
        await client.close()
