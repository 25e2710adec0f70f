"""Running the node agent: sampling, the kernel log follower and the HTTP server, until told to stop.

Permissions (the DaemonSet's securityContext; never privileged): CAP_SYSLOG to
read the kernel log (/dev/kmsg, or syslog(2) where the device is blocked),
CAP_SYS_PTRACE to read other users' /proc/PID/smaps_rollup, ``hostPID: true``
so cgroup.procs lists pids this process can see, and the host's ``/proc`` and
``/sys/fs/cgroup`` mounted read-only (``--proc-root``, ``--cgroup-root``).
Everything else is dropped.

A graceful stop (SIGTERM, SIGINT) hands over complete kernel records, saves the
kernel log position and closes the server within ``stop_timeout_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from prometheus_client import CollectorRegistry

from podmortem import serving_limits
from podmortem.agent import pods, server
from podmortem.agent.kernel_log import KernelLog, KernelLogState
from podmortem.agent.metrics import AgentMetrics
from podmortem.agent.node import NodeAgent
from podmortem.agent.oom_events import ApiPoster, OomEvents
from podmortem.agent.settings import AgentSettings
from podmortem.background import Background
from podmortem.cgroups import cgroupfs
from podmortem.reports.evidence import KernelLogStatus

logger = logging.getLogger(__name__)


def build_agent(
    settings: AgentSettings,
    *,
    registry: CollectorRegistry | None = None,
    pod_source: pods.PodSource | None = None,
) -> NodeAgent:
    """The agent's state with its pod source; a missing cgroup hierarchy is reported, not raised.

    ``pod_source``: where the pods come from when not from the API server or ``static_pods`` (the
    demo's kubelet tells its own).
    """
    hierarchy: cgroupfs.MemoryHierarchy | None
    try:
        hierarchy = cgroupfs.detect(settings.cgroup_root)
        error = None
    except cgroupfs.HierarchyMissing as exc:
        hierarchy, error = None, str(exc)
        logger.error("cannot sample: %s", error)
    source: pods.PodSource
    kube_pods: pods.KubernetesPods | None = None
    if pod_source is not None:
        source = pod_source
    elif settings.static_pods:
        source = pods.StaticPods(settings.static_pods)
    else:
        source = kube_pods = pods.KubernetesPods(
            node_name=settings.node_name,
            hierarchy=hierarchy,
            watch_annotation=settings.watch_annotation,
            refresh_s=settings.pod_refresh_s,
            namespaces=settings.namespaces,
            foreign_kinds=settings.foreign_kinds,
            owner_cache_s=settings.owner_cache_s,
            kubeconfig=settings.kubeconfig,
            node_pod_labels=settings.oom_metric_pod_labels if settings.oom_events else None,
            follow_selector=settings.follow_selector,
        )
    metrics = AgentMetrics(registry if registry is not None else CollectorRegistry())
    oom_events = None
    if settings.oom_events and kube_pods is not None:
        listing = kube_pods
        oom_events = OomEvents(
            node=settings.node_name, lookup=lambda uid: listing.node_pods.get(uid),
            poster=ApiPoster(settings.kubeconfig), registry=metrics.registry,
            pod_labels=settings.oom_metric_pod_labels, per_pod_s=settings.oom_event_interval_s,
            per_minute=settings.oom_events_per_minute, keep_unknown_s=settings.unplaced_record_keep_s,
        )
    elif settings.oom_events:
        logger.warning("--oom-events needs the Kubernetes API (no --static-pod): no OOM-kill Events")
    agent = NodeAgent(
        settings=settings,
        pod_source=source,
        metrics=metrics,
        hierarchy=hierarchy,
        hierarchy_error=error,
        records_file=settings.records_state_file,
        oom_events=oom_events,
    )
    agent.restore_records()
    return agent


async def run_agent(settings: AgentSettings, *, stop: asyncio.Event | None = None) -> None:
    """Run until ``stop`` is set (or SIGTERM/SIGINT when no event is given)."""
    loop = asyncio.get_running_loop()
    stop = stop if stop is not None else asyncio.Event()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)

    agent = build_agent(settings)
    if settings.token_path is None:
        logger.warning("no token file configured: the evidence endpoint is open to anyone who can reach it")

    kernel_log: KernelLog | None = None
    if settings.kernel_log_source == "off":
        agent.on_kernel_log(KernelLogState(status=KernelLogStatus(
            readable=False, error="kernel log reading is off (--kernel-log-source off)"
        )))
        agent.metrics.kmsg_readable.set(0)
        logger.info("kernel log: not read (--kernel-log-source off); sampling only")
    else:
        kernel_log = KernelLog(
            settings=settings, metrics=agent.metrics, on_records=agent.on_records,
            on_status=agent.on_kernel_log,
        )

    app = server.make_app(agent, token_path=settings.token_path, limits=settings.connections)
    runner = serving_limits.runner(app)
    await runner.setup()
    runners = [runner]
    await serving_limits.start(runner, host=settings.listen_host, port=settings.listen_port)
    if settings.metrics_port and settings.metrics_port != settings.listen_port:
        metrics_runner = serving_limits.runner(server.make_metrics_app(agent, limits=settings.connections))
        await metrics_runner.setup()
        runners.append(metrics_runner)
        await serving_limits.start(metrics_runner, host=settings.listen_host, port=settings.metrics_port)
    logger.info(
        "agent on node %r serving on %s:%s (metrics on %s), cgroup v%s at %s",
        settings.node_name,
        settings.listen_host,
        settings.listen_port,
        settings.metrics_port or "same",
        agent.hierarchy.version if agent.hierarchy else "?",
        agent.hierarchy.root if agent.hierarchy else "?",
    )

    tasks = Background("agent")
    work = [tasks.start(agent.run_sampling(), name="sampling")]
    if kernel_log is not None:
        work.append(tasks.start(kernel_log.run(), name="kernel-log"))
    if agent.oom_events is not None:
        work.append(tasks.start(agent.oom_events.run(), name="oom-events"))
    try:
        waiter = tasks.start(stop.wait(), name="stop-wait")
        done, _ = await asyncio.wait([waiter, *work], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not waiter and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
    finally:
        logger.info("stopping: saving the kernel log position")
        await tasks.close(wait_s=settings.stop_timeout_s)
        if kernel_log is not None:
            kernel_log.close()  # idempotent; the task's finally has usually done it
        for r in runners:
            await r.cleanup()
        await agent.pod_source.close()
        if agent.oom_events is not None and isinstance(agent.oom_events.poster, ApiPoster):
            await agent.oom_events.poster.close()
        for sig in installed:
            loop.remove_signal_handler(sig)
