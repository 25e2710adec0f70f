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
import dataclasses
import logging
import signal
import threading
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import kopf
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from podmortem import open_files, serving_limits, startup_gc
from podmortem.background import Background
from podmortem.errors import PodmortemError
from podmortem.kube.api import Kube
from podmortem.kube.config import ClusterAccess
from podmortem.kube.connection import Connection, Listable, list_path
from podmortem.kube.session import ApiSession
from podmortem.logs.following import pod_log_api
from podmortem.logs.following.pod_log_api import PodLogApi
from podmortem.logs.serving import auth as log_auth
from podmortem.logs.serving import http as log_http
from podmortem.logs.settings import FollowSettings, HttpSettings
from podmortem.logs.storage.retention import RetentionSettings
from podmortem.logs.storage.store import LogStore, StoreSettings
from podmortem.operator import metrics
from podmortem.operator.followed_pods import Following
from podmortem.operator.reporting import report_page
from podmortem.operator.reporting.agent_client import AgentClient
from podmortem.operator.reporting.reporter import Reporter
from podmortem.operator.settings import (
    TRAININGJOB_GROUP,
    TRAININGJOB_PLURAL,
    TRAININGJOB_VERSION,
    OperatorSettings,
)
from podmortem.operator.status import StatusWriter
from podmortem.operator.targets import Targets
from podmortem.operator.watch_options import Retention
from podmortem.operator.watching import admission
from podmortem.operator.watching import handlers as registry_mod
from podmortem.operator.watching import service as service_mod
from podmortem.operator.watching.early_warning import EarlyWarning
from podmortem.operator.watching.leadership import Elector
from podmortem.operator.watching.no_diffbase import NoDiffBaseStorage
from podmortem.operator.watching.pod_watch import PodWatches
from podmortem.operator.watching.service import OperatorService

logger = logging.getLogger(__name__)


@dataclass
class Running:
    """Handles of a running operator, for tests and the benchmark."""

    service: OperatorService
    store: LogStore
    metrics_url: str = ""
    health_url: str = ""
    #: Where the log HTTP API listens (``GET {log_url}/logs/{namespace}/{pod}``).
    log_url: str = ""
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    #: The Lease candidate, when leader election is on.
    elector: Elector | None = None
    #: The link to the API server (login and its standing checks).
    connection: Connection | None = None
    #: Where the admission webhook listens (``POST {webhook_url}/mutate/pods``); empty when off.
    webhook_url: str = ""


class LeadershipLost(PodmortemError, RuntimeError):
    """The Lease could not be renewed: this replica stopped its handlers and must exit (to restart)."""


class KopfStuck(PodmortemError, RuntimeError):
    """kopf did not finish within `KOPF_STOP_GRACE_S` of its stop (nor of its cancellation): the
    operator stops without it and exits non-zero, rather than hang until the kubelet's SIGKILL."""


#: Connections to the API server the operator's writes and reads hold at once (the client it had
#: before pooled 100): a burst of reports waits for one instead of opening, then keeping, one each.
API_CONNECTIONS = 100

#: Seconds kopf gets to finish once it is stopping (a signal, our stop, or its own failure, which
#: all run its cleanup): it waits 5 s for its tasks itself, then cancels them. Seen on a real API
#: server: a watch kopf was re-authenticating when a 403 made kopf give up never ended, and the
#: process (kopf's signal handlers spent) ignored SIGTERM. The chart's terminationGracePeriodSeconds
#: (30) must cover this plus `KOPF_CANCEL_GRACE_S` and the store's close.
KOPF_STOP_GRACE_S = 8.0
#: Seconds a cancelled kopf gets before it is left behind.
KOPF_CANCEL_GRACE_S = 2.0
#: Seconds tasks still running when the operator has returned get to end after their cancellation.
LEFTOVER_GRACE_S = 2.0


def kopf_settings(settings: OperatorSettings) -> kopf.OperatorSettings:
    ks = kopf.OperatorSettings()
    ks.peering.standalone = True  # replicas are coordinated by the Lease, not kopf peering
    # No watch of CRDs or Namespaces: the watched namespaces are exact names and the CRD comes with
    # the chart, so neither needs cluster-wide rights the chart does not grant (test_rbac_calls).
    ks.scanning.disabled = True
    ks.posting.level = logging.WARNING
    ks.watching.reconnect_backoff = 1.0
    # Only event handlers: no diff-base to build per event (a deep copy of each body).
    ks.persistence.diffbase_storage = NoDiffBaseStorage()
    return ks


@dataclass
class Servers:
    """The operator's HTTP servers, running; :meth:`stop` may come early (at kopf's cleanup)."""

    metrics_url: str
    health_url: str
    log_url: str
    runners: list[web.AppRunner]

    async def stop(self) -> None:
        """Stop every server, the log server first: its following readers get their end marker.

        Called from kopf's cleanup activity, before kopf waits for (and then cancels) every
        task started after it: stopping here ends the servers' connection tasks at once.
        """
        while self.runners:
            await self.runners.pop().cleanup()


@contextlib.asynccontextmanager
async def probe_servers(
    settings: OperatorSettings, *, is_ready: Any, is_alive: Any, log_app: web.Application | None = None
) -> AsyncIterator[Servers]:
    """``/metrics`` on the metrics port; ``/healthz`` and ``/readyz`` on the health port; the log
    API (``log_app``) on the log HTTP port."""

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
    serving_limits.install(metrics_app, settings.probe_connections, name="metrics")
    metrics_app.router.add_get("/metrics", metrics_view)
    health_app = web.Application()
    serving_limits.install(health_app, settings.probe_connections, name="health")
    health_app.router.add_get("/healthz", healthz)
    health_app.router.add_get("/readyz", readyz)
    runners = []
    urls = []
    log = settings.log_server
    apps: list[tuple[web.Application, int, HttpSettings | None]] = [
        (metrics_app, settings.metrics_port, None), (health_app, settings.health_port, None),
    ]
    if log_app is not None:
        apps.append((log_app, settings.log_http_port, log))
    watching = Background("log-server")
    try:
        for app, port, log_settings in apps:
            if log_settings is None:
                runner = serving_limits.runner(app, shutdown_timeout=2.0)
            else:
                runner = log_http.runner(app, log_settings)
            await runner.setup()
            runners.append(runner)
            certificate = log_settings.certificate() if log_settings is not None else None
            tls = certificate.context if certificate is not None else None
            if certificate is not None:  # a renewed certificate is loaded without a restart
                watching.start(certificate.watch(), name="tls-certificate", eternal=True)
            await serving_limits.start(runner, host=settings.listen_host, port=port, ssl_context=tls)
            real_port = port
            for address in runner.addresses:
                real_port = int(address[1])
            host = "127.0.0.1" if settings.listen_host in ("0.0.0.0", "") else settings.listen_host
            urls.append(f"{'https' if tls is not None else 'http'}://{host}:{real_port}")
        servers = Servers(urls[0], urls[1], urls[2] if log_app is not None else "", runners)
        yield servers
    finally:
        await watching.close()
        await Servers("", "", "", runners).stop()


@contextlib.asynccontextmanager
async def _webhook(settings: OperatorSettings) -> AsyncIterator[admission.Serving | None]:
    """The admission webhook, served on every replica (it keeps no state), when it is configured."""
    if settings.webhook is None:
        yield None
        return
    async with admission.serve(webhook=settings.webhook, sidecar=settings.sidecar,
                               host=settings.listen_host) as serving:
        yield serving


def job_retention(asked: Retention, *, settings: OperatorSettings) -> RetentionSettings:
    """A job's own retention: what it asked for, the operator's default for what it left out."""
    return RetentionSettings(
        max_age_s=asked.max_age_s if asked.max_age_s is not None else settings.log_retention_s,
        max_job_bytes=asked.max_bytes if asked.max_bytes is not None else settings.log_retention_bytes,
    )


def watched_listables(settings: OperatorSettings) -> list[Listable]:
    """What the operator's watches list, where they list it: the readiness check lists the same."""
    kinds = [(TRAININGJOB_GROUP, TRAININGJOB_VERSION, TRAININGJOB_PLURAL), ("", "v1", "pods")]
    kinds += [(k.group, k.version, k.resource) for k in settings.foreign_kinds if k.version]
    out = []
    for group, version, plural in kinds:
        what = f"{plural}.{group}" if group else plural
        for namespace in settings.namespaces or (None,):
            where = f" in namespace {namespace}" if namespace else " cluster-wide"
            out.append(Listable(what=what + where, path=list_path(group, version, plural, namespace)))
    return out


async def run_operator(
    *,
    settings: OperatorSettings,
    access: ClusterAccess,
    stop_flag: asyncio.Event | threading.Event | None = None,
    running: list[Running] | None = None,
    follow_settings: FollowSettings | None = None,
) -> None:
    """Run until ``stop_flag`` is set (or SIGINT/SIGTERM in the main thread). ``running`` receives handles.

    ``access`` is where the API server is and how to log in (:func:`podmortem.kube.config.load`).
    """
    connection = Connection(access, listables=watched_listables(settings), component="operator")
    await connection.credentials()  # a token file that cannot be read, a plugin that fails: no start
    follow_settings = follow_settings or FollowSettings(
        api_qps=settings.api_qps, api_burst=settings.api_burst
    )
    # The open-files limit (raised at start-up) shared out: followers past their share wait for a
    # connection instead of taking the descriptors the servers, watches and store need.
    descriptors = open_files.budget(segments=StoreSettings.max_open_segments)
    if follow_settings.max_connections is None:
        follow_settings = dataclasses.replace(follow_settings, max_connections=descriptors.connections)
    store_settings = StoreSettings(
        retention=RetentionSettings(
            max_age_s=settings.log_retention_s, max_job_bytes=settings.log_retention_bytes
        ),
        max_store_bytes=settings.log_store_max_bytes,
        max_open_segments=descriptors.segments,
    )
    logger.info("open files: %s for log connections, %s for open segment files, %s kept for the rest",
                "no limit" if descriptors.connections is None else f"{descriptors.connections:,}",
                f"{descriptors.segments:,}", f"{descriptors.reserved:,}")
    async with (
        # The reports, statuses, Events, the Lease and the log server's reviews: at most
        # API_CONNECTIONS at once, so a burst of reports keeps that many sockets, not one each.
        ApiSession(connection, max_connections=API_CONNECTIONS) as api_session,
        # Log follows hold their connection for hours: they get a session of their own, without
        # a cap on connections, so status writes never queue behind them.
        pod_log_api.SessionTransport(
            access, limit=pod_log_api.follow_limit(follow_settings)) as log_transport,
        aiohttp.ClientSession() as session,
        # A standby reads the store its leader writes (a ReadWriteMany volume): read-only until it
        # wins the Lease, then its writer (`LogStore.take_over`, once the old leader's lock is gone).
        LogStore(settings.store_dir, settings=store_settings, registry=REGISTRY,
                 read_only=settings.leader_election is not None) as store,
    ):
        kube = Kube(api=api_session, timeout_s=10.0)
        status = StatusWriter(kube=kube)
        agent = AgentClient(kube=kube, settings=settings.agent, session=session)
        targets = Targets()
        metrics.WATCHED_PODS.set_function(lambda: len(targets.pods))
        early_warning = EarlyWarning(kube=kube, status=status, targets=targets, log_url=settings.log_base_url)
        reporter = Reporter(
            kube=kube,
            agent=agent,
            session=session,
            settings=settings,
            status=status,
            log_url=settings.log_base_url,
            log_store=store,
            projection_of=early_warning.projection_of,
            targets=targets,
        )

        async def make_sink(namespace: str, pod: str, pod_uid: str) -> Any:
            job = targets.job_of(pod_uid)
            asked = targets.retention_of(pod_uid)
            if asked is not None:
                # A bare pod's log is filed under its own name as the job.
                store.set_job_retention(
                    namespace=namespace, job=job or pod, settings=job_retention(asked, settings=settings)
                )
            return store.sink(namespace=namespace, pod=pod, job=job)

        pod_logs = PodLogApi(log_transport, settings=follow_settings)
        slots = pod_logs.slots
        if slots is not None:
            metrics.CONNECTION_WAITS.set_function(lambda: slots.waiting)

        def headroom() -> str:
            return open_files.headroom() + (f"; {slots.describe()}" if slots is not None else "")

        following = Following(
            api=pod_logs,
            make_sink=make_sink,
            settings=follow_settings,
            on_memory_line=early_warning.on_memory_line,
            release=lambda namespace, pod: store.release(namespace=namespace, pod=pod),
        )
        ready_flag = asyncio.Event()

        async def on_pod(body: Mapping[str, Any], deleted: bool) -> None:
            await service.on_pod(body, deleted=deleted)

        pod_watches = PodWatches(connection=connection, namespaces=settings.namespaces, handler=on_pod,
                                 accept=registry_mod.pod_filter(settings), freezer=startup_gc.pod_freezer())
        elector = None
        if settings.leader_election is not None:
            elector = Elector(kube=kube, settings=settings.leader_election)

        def is_ready() -> tuple[bool, str]:
            # Ready means working: logged in, every watched resource listable, kopf's watches started
            # (a standby: logged in and serving logs, ready to take over).
            if not store.is_open:
                return False, "log store closed"
            if not connection.ok:
                return False, f"not ready: {connection.describe()}"
            if elector is not None and not elector.is_leader:
                return True, f"ready: {elector.describe()}; {headroom()}"
            if not ready_flag.is_set():
                return False, "not ready: kopf is starting its watches"
            if not pod_watches.listed:
                return False, "not ready: listing pods"
            head = "ready" if elector is None else f"ready: {elector.describe()}"
            return True, f"{head}; {headroom()}"

        def is_alive() -> tuple[bool, str]:
            return (True, "alive") if store.is_open else (False, "log store closed")

        reviewer = log_auth.Reviewer(
            api=api_session if settings.log_http_auth else None,
            settings=log_auth.AuthSettings(
                authenticate=settings.log_http_auth, authorize=settings.log_http_auth,
                audiences=settings.log_http_token_audiences,
            ),
        )
        log_app = log_http.make_app(log_store=store, reviewer=reviewer, settings=settings.log_server)
        report_page.add_routes(
            log_app, report_page.ReportFinder(kube=kube, foreign=report_page.ReporterReports(reporter))
        )
        async with (
            probe_servers(settings, is_ready=is_ready, is_alive=is_alive, log_app=log_app) as servers,
            _webhook(settings) as webhook,
        ):
            # kopf stops on this; the service sets it when it has stopped (kopf's cleanup, or ours).
            kopf_stop = asyncio.Event()

            async def stopped() -> None:
                # A signal stops kopf by itself; its waiter on our stop flag would hold its exit 5 s.
                kopf_stop.set()
                await servers.stop()
                if webhook is not None:  # the API server's kept-alive connections end now, too
                    await webhook.stop()

            service = OperatorService(
                kube=kube, settings=settings, following=following, reporter=reporter, status=status,
                targets=targets, early_warning=early_warning, on_stopped=stopped,
            )
            registry = registry_mod.build(service=service, settings=settings, connection=connection,
                                          pod_watches=pod_watches)
            handles = Running(
                service=service, store=store, connection=connection, elector=elector,
                metrics_url=servers.metrics_url, health_url=servers.health_url, log_url=servers.log_url,
                webhook_url=webhook.url if webhook is not None else "",
            )
            logger.info("serving stored pod logs on %s/logs/{namespace}/{pod} (auth: %s)",
                        servers.log_url, "kubernetes" if settings.log_http_auth else "none")
            if running is not None:
                running.append(handles)
            async with connection.checking():
                await _lead_and_run(
                    settings=settings,
                    registry=registry,
                    service=service,
                    store=store,
                    elector=elector,
                    stop_flag=stop_flag,
                    ready_flag=ready_flag,
                    kopf_stop=kopf_stop,
                    pod_watches=pod_watches,
                )


async def await_kopf(task: asyncio.Task[None], *, stopping: asyncio.Event,
                     grace_s: float = KOPF_STOP_GRACE_S, cancel_grace_s: float = KOPF_CANCEL_GRACE_S) -> None:
    """Wait for kopf's task; once ``stopping`` is set, give it ``grace_s``, then cancel it and give it
    ``cancel_grace_s``; then raise `KopfStuck`. kopf's own error, if it ends with one, is raised."""
    while not task.done() and not stopping.is_set():
        await asyncio.wait({task}, timeout=0.2)  # no task of ours created while kopf runs
    if not task.done():
        await asyncio.wait({task}, timeout=grace_s)
    if not task.done():
        logger.error("kopf has not stopped %.0f s after its stop: cancelling it", grace_s)
        task.cancel()
        await asyncio.wait({task}, timeout=cancel_grace_s)
        # Its own error (if it failed) is lost with the cancel: the exit is not a clean one either way.
        raise KopfStuck(f"kopf did not stop within {grace_s:.0f} s of its stop; cancelled, it "
                        + ("ended" if task.done() else f"was left behind after {cancel_grace_s:.0f} s more"))
    if not task.cancelled():
        task.result()


def run_to_end(main: Coroutine[Any, Any, None], *, leftover_grace_s: float = LEFTOVER_GRACE_S) -> None:
    """``asyncio.run(main)``, except that tasks still running when ``main`` returns, cancelled, get
    ``leftover_grace_s`` to end and are then left (logged by name): asyncio.run waits for them for
    ever, and a task that ignores its cancellation (kopf's, see `KopfStuck`) would hold the exit."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main)
    finally:
        leftovers = asyncio.all_tasks(loop)
        for task in leftovers:
            task.cancel()
        if leftovers:
            loop.run_until_complete(asyncio.wait(leftovers, timeout=leftover_grace_s))
        stuck = sorted(t.get_name() for t in leftovers if not t.done())
        if stuck:
            logger.error("exiting with %d task(s) that did not end on cancellation: %s", len(stuck),
                         ", ".join(stuck[:10]))
        else:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


async def _wait_flag(flag: asyncio.Event | threading.Event) -> None:
    if isinstance(flag, asyncio.Event):
        await flag.wait()
        return
    # A thread's Event cannot be awaited; a worker thread blocked in wait() would outlive a cancel.
    while not flag.is_set():  # noqa: ASYNC110
        await asyncio.sleep(0.1)


def _install_signals(stop: asyncio.Event) -> None:
    """SIGTERM/SIGINT stop a standby too (kopf installs its own once it runs)."""
    if threading.current_thread() is not threading.main_thread():
        return
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)


async def _set_when(flag: asyncio.Event, target: asyncio.Event) -> None:
    """Set ``target`` once ``flag`` is set."""
    await flag.wait()
    target.set()


async def _lead_and_run(
    *,
    settings: OperatorSettings,
    registry: kopf.OperatorRegistry,
    service: OperatorService,
    store: LogStore,
    elector: Elector | None,
    stop_flag: asyncio.Event | threading.Event | None,
    ready_flag: asyncio.Event,
    kopf_stop: asyncio.Event,
    pod_watches: PodWatches,
) -> None:
    """Run kopf, as the Lease holder when leader election is on.

    Order on a graceful stop: kopf stops, the service cancels the followers (each
    cursor is already persisted with its lines), and only then the Lease is
    released, so the next leader resumes from cursors that are complete.
    """
    namespaces = list(settings.namespaces)
    stop = asyncio.Event()  # the caller's stop, or a signal before kopf runs
    lost = asyncio.Event()
    background = Background("operator")
    if stop_flag is not None:
        background.start(_wait_flag(stop_flag), name="stop-flag").add_done_callback(lambda _t: stop.set())
    try:
        if elector is not None:
            _install_signals(stop)
            logger.info("standby: waiting for the lease %s/%s",
                        elector.settings.lease_namespace, elector.settings.lease_name)
            if not await elector.acquire(stop=stop):
                return
            background.start(elector.keep(lost=lost), name="lease")
            # The followers resume from the cursors on disk: only once this process writes the store.
            # Waiting for the old leader's lock ends on a stop or on losing the Lease meanwhile.
            halt = asyncio.Event()
            for flag, name in ((stop, "take-over-stop"), (lost, "take-over-lost")):
                background.start(_set_when(flag, halt), name=name)
            if not await store.take_over(stop=halt):
                if lost.is_set():
                    raise LeadershipLost("lost the leader Lease while waiting for the log store's lock; "
                                         "exiting so the Deployment restarts this replica as a standby")
                await elector.release()
                return

        if settings.last_log_line_interval_s > 0:
            background.start(
                service.refresh_forever(interval_s=settings.last_log_line_interval_s), name="log-status"
            )
        background.start(service.drop_finished_forever(interval_s=service_mod.FINISHED_SWEEP_S),
                         name="finished-pods")

        # Every task is created before kopf starts: kopf takes tasks created after it for its own,
        # and at its stop waits 5 s for them before cancelling them.
        pod_watches.start()
        waits = [background.start(stop.wait(), name="stop-wait"),
                 background.start(lost.wait(), name="lease-lost-wait")]

        async def relay() -> None:
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
            kopf_stop.set()

        background.start(relay(), name="stop-relay")
        # A task of its own, awaited by `await_kopf` (which raises kopf's error, so not a Background
        # task: that would log it twice), so that a kopf that does not finish can be left behind.
        running_kopf = asyncio.create_task(kopf.operator(
            registry=registry,
            settings=kopf_settings(settings),
            clusterwide=not namespaces,
            namespaces=namespaces,
            standalone=True,
            stop_flag=kopf_stop,
            ready_flag=ready_flag,
        ), name="podmortem-operator-kopf")
        try:
            await await_kopf(running_kopf, stopping=kopf_stop)
        finally:
            await pod_watches.stop()  # idempotent, as is the service's: kopf's cleanup did both
            await service.stop()
            if elector is not None and not lost.is_set():
                await elector.release()
    finally:
        await background.close()
    if lost.is_set():
        raise LeadershipLost("lost the leader Lease; exiting so the Deployment restarts this replica")
