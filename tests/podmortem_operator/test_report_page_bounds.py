"""The report page is bounded: clipped lines, a capped page, made off the event loop, one reader slot.

A pod that prints 8 MiB lines once made each page 128 MiB, and eight pages held up another
reader's small ``/logs`` request for half a minute. Sizes are measured in bytes here, and "off
the loop" by what happens while a page is being made, never by the clock.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import test_utils
from tests.logs.test_http import write

from podmortem.logs.cursor import LogCursor
from podmortem.logs.serving import auth, http
from podmortem.logs.storage.store import LogStore
from podmortem.operator.reporting import report_page
from podmortem.render import page
from podmortem.reports.document import ReportDocument

from .test_report_page_access import REPORT, Foreign

OPEN = auth.Reviewer(api=None, settings=auth.AuthSettings(authenticate=False, authorize=False))
MIB = 1 << 20


@pytest.fixture
async def client(log_store: LogStore) -> AsyncIterator[test_utils.TestClient[Any, Any]]:
    app = http.make_app(log_store=log_store, reviewer=OPEN)
    report_page.add_routes(app, report_page.ReportFinder(kube=None, foreign=Foreign({("ns", "job"): REPORT})))
    c = test_utils.TestClient(test_utils.TestServer(app))
    await c.start_server()
    yield c
    await c.close()


async def _log(log_store: LogStore, lines: list[bytes]) -> None:
    await write(log_store.sink(namespace="ns", pod="p"), "c", lines, LogCursor(container_id="x"))


async def test_long_lines_are_clipped_with_a_marker_and_the_page_is_small(
    log_store: LogStore, client: test_utils.TestClient[Any, Any]
) -> None:
    lines = [bytes([ord("a") + i]) * (2 * MIB) for i in range(4)] + [b"the last short line"]
    await _log(log_store, lines)
    resp = await client.get("/reports/ns/job")
    body = await resp.read()
    assert resp.status == 200
    assert len(body) < 100 * 1024  # four 2 MiB lines made an 8 MiB page
    text = body.decode()
    assert "<td>the last short line</td>" in text and text.count(" more bytes]</td>") == 4
    cut = 2 * MIB - report_page.LINE_BYTES
    for i in range(4):
        shown = chr(ord("a") + i) * report_page.LINE_BYTES
        assert f"<td>{shown}… [{cut} more bytes]</td>" in text
    assert "<td>the last short line</td>" in text


def test_a_clip_never_splits_a_character() -> None:
    raw = "é".encode() * 5000  # two bytes each; LINE_BYTES + 1 would fall inside one
    for limit in (2048, 2049, 2050):
        shown = report_page.clip_line(raw, limit)
        head, _, tail = shown.partition("… [")
        assert "\ufffd" not in head and head == "é" * (len(head))
        assert len(head.encode()) in (limit, limit - 1)
        assert tail == f"{len(raw) - len(head.encode())} more bytes]"
    assert report_page.clip_line(b"short") == "short"
    assert report_page.clip_line(b"x" * 2048) == "x" * 2048


async def test_lines_are_clipped_as_they_are_read_and_only_the_shown_ones_kept(log_store: LogStore) -> None:
    await _log(log_store, [b"y" * (MIB // 2)] * 6 + [b"z %d" % i for i in range(100)])
    shown, _, note = await report_page.log_context(log_store, ReportDocument.parse(REPORT))
    assert len(shown) == report_page.SHOWN_LINES and shown[-1].text == "z 99"
    assert "(106 read)" in note
    sink = log_store.sink(namespace="ns", pod="q")
    await write(sink, "c", [b"w" * (MIB // 4)] * 50, LogCursor(container_id="x"))
    other = ReportDocument.parse(dict(REPORT, pod=dict(REPORT["pod"], name="q")))  # type: ignore[arg-type]
    shown, _, _ = await report_page.log_context(log_store, other)
    assert len(shown) == report_page.SHOWN_LINES
    marker = f"… [{MIB // 4 - report_page.LINE_BYTES} more bytes]"
    assert all(line.text == "w" * report_page.LINE_BYTES + marker for line in shown)
    # Lines a little over the clip, in batches the store reads whole: clipped the same way.
    sink = log_store.sink(namespace="ns", pod="r")
    await write(sink, "c", [b"v" * 10_000] * 20, LogCursor(container_id="x"))
    other = ReportDocument.parse(dict(REPORT, pod=dict(REPORT["pod"], name="r")))  # type: ignore[arg-type]
    shown, _, _ = await report_page.log_context(log_store, other)
    marker = f"… [{10_000 - report_page.LINE_BYTES} more bytes]"
    assert len(shown) == 20 and all(line.text == "v" * report_page.LINE_BYTES + marker for line in shown)


async def test_the_whole_page_stays_under_the_cap(
    log_store: LogStore, client: test_utils.TestClient[Any, Any]
) -> None:
    # 700 KiB of '"' escape to 4.1 MiB, in a report within the stored-report bounds (1 MiB of JSON).
    report = dict(REPORT, findings=[
        REPORT["findings"][0], {"code": "big", "severity": "info", "message": '"' * (700 << 10)},
    ])
    client.server.app[report_page.FINDER].foreign = Foreign({("ns", "job"): report})
    await _log(log_store, [b"<&>" * 2000] * 50)  # every shown line clipped, and escaped to 5x
    resp = await client.get("/reports/ns/job")
    body = await resp.read()
    assert resp.status == 200
    assert len(body) <= 1 << 20 == page.PAGE_MAX_BYTES
    text = body.decode()
    assert "the findings left out: it takes" in text and "the report's JSON holds it whole" in text
    assert "hit its own limit" in text  # the verdict sentence stays
    assert text.count("&lt;&amp;&gt;") > 40 * 600  # and the log


def test_render_caps_any_report_and_leaves_out_the_biggest_parts_first() -> None:
    report: dict[str, Any] = dict(
        REPORT,
        findings=[{"code": "x", "severity": "info", "message": "&" * MIB}],
        tasks=[{"pid": i, "name": "<" * 1000} for i in range(400)],
        dropped=["small"],
    )
    lines = [page.LogLine(text="'" * 2048) for _ in range(40)]
    for cap in (page.PAGE_MAX_BYTES, 200 * 1024, 64 * 1024):
        data = page.PageInput(title="ns/job", report=ReportDocument.parse(report), log_lines=lines)
        doc = page.render(data, max_bytes=cap)
        assert len(doc.encode()) <= cap
        assert doc.endswith("</body></html>") and "<h2 id=\"log\">" in doc
        assert "the findings left out" in doc and "the process table left out" in doc
        assert ("the log left out" in doc) == (cap < page.PAGE_MAX_BYTES)
    small = page.render(page.PageInput(title="ns/job", report=ReportDocument.parse(REPORT)))
    assert "left out" not in small


async def test_the_page_is_made_off_the_event_loop_while_logs_are_served(
    log_store: LogStore, client: test_utils.TestClient[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a page is being made, a small ``/logs`` request is answered: the order of events shows it."""
    await _log(log_store, [b"hello"])
    loop = asyncio.get_running_loop()
    rendering = asyncio.Event()
    release = threading.Event()
    events: list[str] = []
    real = page.render

    def slow_render(data: page.PageInput, **kw: Any) -> str:
        try:
            asyncio.get_running_loop()
            events.append("rendered on the event loop")  # the old way: nothing can wait here
            return real(data, **kw)
        except RuntimeError:
            pass
        events.append(f"render started, {client.server.app[http.SLOTS].active} reader slot(s) held")
        loop.call_soon_threadsafe(rendering.set)
        assert release.wait(60)  # a guard against a hang, not a measure
        events.append("render done")
        return real(data, **kw)

    monkeypatch.setattr(page, "render", slow_render)
    page_request = asyncio.create_task(client.get("/reports/ns/job"))
    started = asyncio.create_task(rendering.wait())
    await asyncio.wait([page_request, started], return_when=asyncio.FIRST_COMPLETED)
    started.cancel()
    logs = await client.get("/logs/ns/p")
    events.append(f"/logs answered {logs.status}: {(await logs.text()).strip()}")
    release.set()
    resp = await page_request
    assert resp.status == 200 and "hello" in await resp.text()
    assert events == [
        "render started, 1 reader slot(s) held",
        "/logs answered 200: hello",
        "render done",
    ]
    assert client.server.app[http.SLOTS].active == 0


async def test_a_page_takes_a_reader_slot_and_gets_429_beyond_them(
    log_store: LogStore, client: test_utils.TestClient[Any, Any]
) -> None:
    slots = client.server.app[http.SLOTS]
    with slots.hold("someone else"), slots.hold("and another"):
        slots.total = 2
        resp = await client.get("/reports/ns/job")
        assert resp.status == 429 and resp.headers["Retry-After"] == "5"
        assert "readers" in await resp.text()
        slots.total = 3
        slots.by_caller["127.0.0.1"] = slots.per_caller  # this caller's own limit, reached
        resp = await client.get("/reports/ns/job")
        assert resp.status == 429 and "you already have" in await resp.text()
        del slots.by_caller["127.0.0.1"]
        assert (await client.get("/reports/ns/job")).status == 200
    assert slots.active == 0 and slots.by_caller == {}


async def test_the_page_may_not_be_framed(client: test_utils.TestClient[Any, Any]) -> None:
    resp = await client.get("/reports/ns/job")
    csp = [p.strip() for p in resp.headers["Content-Security-Policy"].split(";")]
    assert "frame-ancestors 'none'" in csp
    assert {"default-src 'none'", "style-src 'unsafe-inline'", "img-src data:"} <= set(csp)
