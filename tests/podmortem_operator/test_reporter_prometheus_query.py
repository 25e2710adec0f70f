"""The report's Prometheus query ends with its report: a report cancelled (the operator stopping,
the pod's task cancelled) cancels its query, which would otherwise run on, owned by nobody."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, cast

import aiohttp

from podmortem.operator.reporting import prometheus
from podmortem.operator.reporting.agent_client import AgentClient
from podmortem.operator.reporting.reporter import Reporter
from podmortem.operator.settings import OperatorSettings, PrometheusSettings
from podmortem.operator.status import StatusWriter

from .test_kernel_record_followup import TARGET, RecordingKube, termination


class StalledAgent:
    """An agent that never answers: the report waits on it while its Prometheus query runs."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()

    async def evidence(self, **_: Any) -> Any:
        self.asked.set()
        await asyncio.Event().wait()


async def test_a_cancelled_report_cancels_its_prometheus_query(monkeypatch: Any) -> None:
    querying = asyncio.Event()
    cancelled = asyncio.Event()

    async def query(**_: Any) -> prometheus.WorkingSet:
        querying.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("never answered")

    monkeypatch.setattr(prometheus, "query_working_set", query)
    kube = RecordingKube()
    agent = StalledAgent()
    settings = OperatorSettings(prometheus=PrometheusSettings(url="http://prometheus.invalid"))
    async with aiohttp.ClientSession() as session:
        reporter = Reporter(kube=cast(Any, kube), agent=cast(AgentClient, agent), session=session,
                            settings=settings, status=StatusWriter(kube=cast(Any, kube)))
        reporting = asyncio.ensure_future(reporter.report(
            termination=termination(), target=TARGET, facts=None, seen_at=time.monotonic()))
        try:
            async with asyncio.timeout(5):
                await querying.wait()
                await agent.asked.wait()
            reporting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reporting
            async with asyncio.timeout(5):
                await cancelled.wait()  # with the report, not at some later stop
        finally:
            await reporter.stop()
