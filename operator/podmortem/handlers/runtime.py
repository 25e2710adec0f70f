"""Assemble and run the operator: services, the log store, kopf, and the metrics and health endpoints.

``run_operator`` is what ``podmortem operator`` runs, and what the end-to-end
tests run in a thread of their own. Startup order matters for a graceful stop
in reverse: the store opens first and closes last, after every follower has
been cancelled (each follower's cursor is persisted with its data, so a
cancelled follower loses nothing and a restarted operator resumes exactly).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import kopf
from aiohttp import web
from kubernetes_asyncio.client import ApiClient, Configuration
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from podmortem.control import kube as kube_mod
from podmortem.control.agent_client import AgentClient
from podmortem.control.following import Following
from podmortem.control.reports import Reporter
from podmortem.control.service import Podmortem
from podmortem.control.settings import OperatorSettings
from podmortem.control.status import StatusWriter
from podmortem.handlers import registry as registry_mod
from podmortem.logs.kube import PodLogApi
from podmortem.logs.retention import RetentionSettings
from podmortem.logs.settings import FollowSettings
from podmortem.logs.store import LogStore, StoreSettings

logger = logging.getLogger(__name__)


@dataclass
class Running:
    """Handles of a running operator, for tests and the benchmark."""

    service: Podmortem
    store: LogStore
    metrics_url: str = ""
    health_url: str = ""
    ready: asyncio.Event = field(default_factory=asyncio.Event)


def kopf_settings(settings: OperatorSettings) -> kopf.OperatorSettings:
    ks = kopf.OperatorSettings()
    ks.peering.standalone = True  # replicas are coordinated by the Lease, not kopf peering
    ks.posting.level = logging.WARNING
    ks.watching.reconnect_backoff = 1.0
    return ks


@contextlib.asynccontextmanager
async def probe_servers(
    settings: OperatorSettings, *, is_ready: Any, is_alive: Any
) -> AsyncIterator[tuple[str, str]]:
    """``/metrics`` on the metrics port; ``/healthz`` and ``/readyz`` on the health port."""

    async def metrics_view(_: web.Request) -> web.Response:
        body = generate_latest(REGISTRY)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        ok, why = is_alive()
        return web.Response(status=200 if ok else 503, text=why + "\n")

    async def readyz(_: web.Request) -> web.Response:
        ok, why = is_ready()
        return web.Response(status=200 if ok else 503, text=why + "\n")

    metrics_app = web.Application()
    metrics_app.router.add_get("/metrics", metrics_view)
    health_app = web.Application()
    health_app.router.add_get("/healthz", healthz)
    health_app.router.add_get("/readyz", readyz)
    runners = []
    urls = []
    try:
        for app, port in ((metrics_app, settings.metrics_port), (health_app, settings.health_port)):
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            runners.append(runner)
            site = web.TCPSite(runner, settings.listen_host, port)
            await site.start()
            real_port = port
            for address in runner.addresses:
                real_port = int(address[1])
            host = "127.0.0.1" if settings.listen_host in ("0.0.0.0", "") else settings.listen_host
            urls.append(f"http://{host}:{real_port}")
        yield urls[0], urls[1]
    finally:
        for runner in reversed(runners):
            await runner.cleanup()


async def run_operator(
    *,
    settings: OperatorSettings,
    api_config: Configuration,
    server: str | None = None,
    stop_flag: asyncio.Event | threading.Event | None = None,
    running: list[Running] | None = None,
    follow_settings: FollowSettings | None = None,
) -> None:
    """Run until ``stop_flag`` is set (or SIGINT/SIGTERM in the main thread). ``running`` receives handles."""
    follow_settings = follow_settings or FollowSettings()
    store_settings = StoreSettings(retention=RetentionSettings(max_age_s=settings.log_retention_s))
    async with (
        ApiClient(configuration=api_config) as api_client,
        aiohttp.ClientSession() as session,
        LogStore(settings.store_dir, settings=store_settings) as store,
    ):
        kube = kube_mod.Kube(api=api_client, timeout_s=10.0)
        status = StatusWriter(kube=kube)
        agent = AgentClient(kube=kube, settings=settings.agent, session=session)
        reporter = Reporter(
            kube=kube,
            agent=agent,
            session=session,
            settings=settings,
            status=status,
            log_url=f"http://podmortem-operator:{settings.log_http_port}",
        )

        async def make_sink(namespace: str, pod: str, pod_uid: str) -> Any:
            job = service.job_of(pod_uid)
            return store.sink(namespace=namespace, pod=pod, job=job)

        following = Following(
            api=PodLogApi(api_client, settings=follow_settings), make_sink=make_sink, settings=follow_settings
        )
        service = Podmortem(
            kube=kube, settings=settings, following=following, reporter=reporter, status=status
        )
        following.on_memory_line = service.on_memory_line
        ready_flag = asyncio.Event()
        handles = Running(service=service, store=store)

        def is_ready() -> tuple[bool, str]:
            if not store.is_open:
                return False, "log store closed"
            if not ready_flag.is_set():
                return False, "kopf is starting"
            return True, "ready"

        def is_alive() -> tuple[bool, str]:
            return (True, "alive") if store.is_open else (False, "log store closed")

        registry = registry_mod.build(service=service, settings=settings, server=server)
        async with probe_servers(settings, is_ready=is_ready, is_alive=is_alive) as (metrics_url, health_url):
            handles.metrics_url, handles.health_url = metrics_url, health_url
            if running is not None:
                running.append(handles)
            namespaces = list(settings.namespaces)
            try:
                await kopf.operator(
                    registry=registry,
                    settings=kopf_settings(settings),
                    clusterwide=not namespaces,
                    namespaces=namespaces,
                    standalone=True,
                    stop_flag=stop_flag,
                    ready_flag=ready_flag,
                )
            finally:
                await service.stop()  # idempotent; kopf's cleanup handler did it on a normal stop
