"""The working set from a real HTTP Prometheus API, and every way that can fail."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from podmortem.operator.reporting import prometheus
from podmortem.operator.settings import PrometheusSettings

START = datetime(2026, 5, 1, 0, 0, tzinfo=UTC)
END = START + timedelta(hours=16)

Handler = Callable[[web.Request], Any]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Any]]:
    servers: list[TestServer] = []

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_get("/api/v1/query_range", handler)
        server = TestServer(app)
        await server.start_server()
        servers.append(server)
        return str(server.make_url("/"))

    yield start
    for server in servers:
        await server.close()


async def _query(url: str | None, *, timeout_s: float = 5.0) -> prometheus.WorkingSet:
    async with aiohttp.ClientSession() as session:
        return await prometheus.query_working_set(
            session=session,
            settings=PrometheusSettings(url=url, timeout_s=timeout_s),
            namespace="ml",
            pod='pointgroup"-0',
            start=START,
            end=END,
        )


async def test_the_pods_series_is_read_with_a_step_that_fits_its_life(serve: Any) -> None:
    seen: dict[str, str] = {}

    async def handler(request: web.Request) -> web.Response:
        seen.update(request.query)
        values = [[START.timestamp() + 60 * i, str(2**30 * (i + 1))] for i in range(3)]
        matrix = {"resultType": "matrix", "result": [{"metric": {}, "values": values}]}
        return web.json_response({"status": "success", "data": matrix})

    working_set = await _query(await serve(handler))
    assert working_set.source == "prometheus"
    assert [b for _, b in working_set.points] == [2**30, 2 * 2**30, 3 * 2**30]
    assert working_set.points[0][0] == START
    assert working_set.peak == (START + timedelta(minutes=2), 3 * 2**30)
    assert 'namespace="ml"' in seen["query"] and 'pod="pointgroup\\"-0"' in seen["query"]
    assert seen["step"] == f"{16 * 3600 / 500:.0f}s"  # the pod's life over max_points
    assert float(seen["start"]) == START.timestamp() and float(seen["end"]) == END.timestamp()


async def test_no_samples_is_said_not_hidden(serve: Any) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"status": "success", "data": {"resultType": "matrix", "result": []}})

    working_set = await _query(await serve(handler))
    assert working_set.points == [] and "no samples" in working_set.note


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (500, "boom", "answered HTTP 500"),
        (200, "not json", "unreachable"),
        (200, '{"status": "error", "error": "parse error at char 3"}', "parse error at char 3"),
    ],
)
async def test_a_broken_answer_is_an_error_that_names_it(
    serve: Any, status: int, body: str, message: str
) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=status, text=body)

    with pytest.raises(prometheus.PrometheusError, match=message):
        await _query(await serve(handler))


async def test_a_slow_prometheus_times_out(serve: Any) -> None:
    async def handler(request: web.Request) -> web.Response:
        await asyncio.sleep(2)
        return web.json_response({})

    with pytest.raises(prometheus.PrometheusError, match=r"did not answer within 0\.2 s"):
        await _query(await serve(handler), timeout_s=0.2)


async def test_no_url_and_unreachable_are_errors() -> None:
    with pytest.raises(prometheus.PrometheusError, match="no Prometheus URL"):
        await _query(None)
    with pytest.raises(prometheus.PrometheusError, match="unreachable"):
        await _query("http://127.0.0.1:9")
