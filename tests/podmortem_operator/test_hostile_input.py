"""What a training pod controls never breaks the report page or the stored-report reader.

A pod sets its own ``TZ`` and prints its own log lines; a stored report can be edited by anyone
who may edit the object it is on. None of it may raise out of a handler: the page says what it
could not read (or shows UTC only), never a 500.
"""

from __future__ import annotations

import json
from typing import Any

import kmock
import pytest
from tests.logs.test_http import write

from podmortem.kube.api import Kube
from podmortem.kube.config import ClusterAccess
from podmortem.kube.session import ApiSession
from podmortem.logs.cursor import LogCursor
from podmortem.logs.serving import auth, http
from podmortem.logs.storage.store import LogStore
from podmortem.operator.reporting import report_page
from podmortem.reports import stored_bounds
from podmortem.reports.document import ReportDocument

from .test_report_page_access import REPORT, Foreign, client_for

OPEN = auth.Reviewer(api=None, settings=auth.AuthSettings(authenticate=False, authorize=False))
TJ = "/apis/podmortem.io/v1alpha1/namespaces/ns/trainingjobs/job"


def nested(depth: int, leaf: Any = 1) -> Any:
    """``{"a": {"a": ... leaf}}`` ``depth`` deep, built without recursion."""
    doc = leaf
    for _ in range(depth):
        doc = {"a": doc}
    return doc


async def _page(log_store: LogStore, report: dict[str, Any], **params: str) -> tuple[int, str]:
    client = await client_for(log_store, OPEN, Foreign({("ns", "job"): report}))
    try:
        resp = await client.get("/reports/ns/job", params=params)
        return resp.status, await resp.text()
    finally:
        await client.close()


@pytest.mark.parametrize(
    "tz",
    ["Europe", "Etc", "../../etc/passwd", "/etc/passwd", "x" * 10240, "Europe/Ber\x00lin", "", " ",
     "tzdata.zi", "Europe/", "Europe//Berlin", "😀"],
)
async def test_an_unknown_or_malformed_tz_shows_utc_only(log_store: LogStore, tz: str) -> None:
    report = dict(REPORT, pod=dict(REPORT["pod"], timeZone=tz))  # type: ignore[arg-type]
    status, body = await _page(log_store, report)
    assert status == 200, body
    assert "times in UTC · made by podmortem" in body and "from its TZ" not in body


async def test_a_known_tz_is_still_shown(log_store: LogStore) -> None:
    report = dict(REPORT, pod=dict(REPORT["pod"], timeZone="Europe/Berlin"))  # type: ignore[arg-type]
    status, body = await _page(log_store, report)
    assert status == 200 and "(Europe/Berlin, from its TZ)" in body and "14:00:00 Europe/Berlin" in body


GOOD_MEMORY_LINE = b"-> memory epoch 3: rss 1.00GiB (peak 2.00GiB), pod 1.50GiB of 4.00GiB (peak 3.00GiB)"


async def test_a_line_that_looks_like_a_memory_line_is_just_a_log_line(log_store: LogStore) -> None:
    lines = [
        b"INFO -> memory epoch is done",
        b"-> memory epoch 2: rss lots (peak more)",
        b"-> memory epoch 4: rss 1.00GiB (peak 2.00GiB), pod garbage",
        GOOD_MEMORY_LINE,
        b"-> memory epoch 9: rss 1.00GiB (peak 2.00GiB), pod 1.50GiB of 4.00GiB (peak " + b"9" * 5000,
    ]
    await write(log_store.sink(namespace="ns", pod="p"), "c", lines, LogCursor(container_id="x"))
    status, body = await _page(log_store, REPORT)
    assert status == 200, body
    assert "INFO -&gt; memory epoch is done" in body and "rss lots" in body
    assert "<title>epoch 3: peak 3.0 GiB</title>" in body  # the valid one still drawn
    assert "<title>epoch 2" not in body and "<title>epoch 4" not in body and "<title>epoch 9" not in body


@pytest.mark.parametrize(
    "change",
    [
        {"pod": "p"},
        {"pod": ["ns", "p"]},
        {"pod": {"namespace": "ns", "name": "../../etc", "container": 5, "finishedAt": 7}},
        {"pod": {"namespace": "ns", "name": "p", "container": "c", "containerID": ["x"]}},
        {"findings": 5, "tasks": "x", "evidence": [], "job": {"rows": 3}},
    ],
)
async def test_a_stored_report_of_odd_types_is_served(log_store: LogStore, change: dict[str, Any]) -> None:
    await write(log_store.sink(namespace="ns", pod="p"), "c", [b"a line"], LogCursor(container_id="x"))
    status, body = await _page(log_store, dict(REPORT, **change))
    assert status == 200, body[:300]
    assert body.endswith("</body></html>")


async def test_a_lone_surrogate_in_a_report_is_no_500(log_store: LogStore) -> None:
    """JSON may escape half a UTF-16 pair (``"\\ud800"``); Python keeps it, UTF-8 cannot encode it."""
    report = dict(REPORT, findings=[{"code": "x", "severity": "info", "message": "half \ud800 a pair"}])
    status, body = await _page(log_store, report)
    assert status == 200 and "half ? a pair" in body


@pytest.mark.parametrize(
    ("report", "why"),
    [
        (dict(REPORT, findings=[{"code": "x", "message": "m", "evidence": {"deep": nested(5000)}}]),
         "nested deeper than"),
        (dict(REPORT, pod=dict(REPORT["pod"], name=nested(2000))), "nested deeper than"),  # type: ignore[arg-type]
        (dict(REPORT, findings=[{"code": "x", "message": "y" * (2 << 20)}]), "bytes of JSON"),
    ],
)
@pytest.mark.parametrize("fmt", ["html", "json"])
async def test_an_unreadable_stored_report_is_absent_with_a_reason(
    log_store: LogStore, report: dict[str, Any], why: str, fmt: str
) -> None:
    status, body = await _page(log_store, report, format=fmt)
    assert status == 404, body[:300]
    assert "the stored report of ns/job could not be read" in body and why in body
    assert len(body) < 1000


@pytest.mark.parametrize("depth", [100, 1000, 50000])
async def test_a_trainingjob_whose_status_is_nested_deep_is_404_not_500(
    log_store: LogStore, api: kmock.RawHandler, depth: int
) -> None:
    deep = '{"a": ' * depth + "1" + "}" * depth
    body = ('{"apiVersion": "podmortem.io/v1alpha1", "kind": "TrainingJob", '
            '"status": {"failureReport": {"verdict": "x", "pod": ' + deep + "}}}")
    api[f"GET {TJ}"] << body.encode()
    app = http.make_app(log_store=log_store, reviewer=OPEN)
    session = ApiSession(ClusterAccess(server=str(api.url).rstrip("/")))
    report_page.add_routes(app, report_page.ReportFinder(kube=Kube(api=session), foreign=None))
    from aiohttp import test_utils

    client = test_utils.TestClient(test_utils.TestServer(app))
    await client.start_server()
    try:
        for path in ("/reports/ns/job", "/reports/ns/job?format=json", "/reports/ns/job/timeline.svg"):
            resp = await client.get(path)
            text = await resp.text()
            assert resp.status == 404, text[:300]
            assert "could not be read" in text and len(text) < 1000
    finally:
        await client.close()
        await session.close()


# --- the stored-report reader -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("[" * 1000 + "]" * 1000, "nested deeper than"),
        ('{"a": ' * 1000 + "1" + "}" * 1000, "nested deeper than"),
        ('{"a": ' * 100 + "1" + "}" * 100, "nested deeper than"),
        ("[" * 100000, "nested deeper than"),
        ('{"pod": {}, "x": "' + "y" * (300 << 10) + '"}', "bytes of JSON"),
        ("not json", "not JSON"),
        ('{"a": NaN', "not JSON"),
        ("\x00", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('"text"', "not a JSON object"),
        ("1" * 5000, "not JSON"),  # int() of a huge literal is refused by Python: ValueError
    ],
)
def test_an_annotation_of_any_depth_and_size_never_raises_anything_but_unreadable(raw: str, why: str) -> None:
    with pytest.raises(stored_bounds.Unreadable, match=why):
        stored_bounds.parse_annotation(raw)


def test_an_annotation_the_operator_wrote_reads_back() -> None:
    doc = {"verdict": "memcg-limit", "pod": {"uid": "u"}, "errors": ["x"], "kernelRecord": "pending"}
    assert stored_bounds.parse_annotation(json.dumps(doc)) == doc
    assert ReportDocument.parse(stored_bounds.parse_annotation(json.dumps(doc))).pending_record
