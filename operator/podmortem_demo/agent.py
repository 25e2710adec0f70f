"""The real node agent, told about the demo's pods by the demo's kubelet.

On a node the agent lists its pods from the API server and finds their
cgroups by walking the hierarchy for ``pod<uid>`` directories. The demo's
kubelet knows each pod's cgroup the moment it makes it, so here the pod set
comes from :class:`KubeletPods`, which the kubelet fills; sampling, the kernel
log follower, record-to-pod matching and the evidence endpoint are the agent's
own (``podmortem.agent``).

This mirrors ``podmortem.agent.main.run_agent`` with a different pod source
(``build_agent(pod_source=...)``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator

from aiohttp import web

from podmortem.agent import main as agent_main
from podmortem.agent import server
from podmortem.agent.kernel_log import KernelLog, KernelLogState
from podmortem.agent.node import NodeAgent
from podmortem.agent.pods import FixedPods, WatchedPod
from podmortem.agent.settings import AgentSettings
from podmortem.reports.evidence import KernelLogStatus, PodEvidence


class KubeletPods(FixedPods):
    """The pods the demo's kubelet runs: UID → namespace, name and cgroup path."""

    def add(self, *, uid: str, namespace: str, name: str, cgroup_path: str | None) -> None:
        self._pods[uid] = WatchedPod(uid=uid, namespace=namespace, name=name, cgroup_path=cgroup_path)


@dataclasses.dataclass
class RunningAgent:
    """A started agent: its state (for the recorded mode and for waiting) and where it listens."""

    agent: NodeAgent
    port: int

    async def kernel_records_for(
        self, uid: str, *, within_s: float, poll_s: float = 0.05
    ) -> PodEvidence | None:
        """The pod's evidence once it holds a kernel record; None if none came within ``within_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while True:
            evidence = self.agent.evidence(uid)
            if evidence is not None and evidence.kernel_records:
                return evidence
            if loop.time() >= deadline:
                return None
            await asyncio.sleep(poll_s)


@contextlib.asynccontextmanager
async def running_agent(settings: AgentSettings, *, pods: KubeletPods) -> AsyncIterator[RunningAgent]:
    """Sampling, the kernel log (unless ``kernel_log_source="off"``) and the HTTP server, until exit."""
    agent = agent_main.build_agent(settings, pod_source=pods)
    kernel_log: KernelLog | None = None
    if settings.kernel_log_source == "off":
        agent.on_kernel_log(KernelLogState(
            status=KernelLogStatus(readable=False, error="the demo runs with a recorded kernel record")
        ))
    else:
        kernel_log = KernelLog(
            settings=settings, metrics=agent.metrics, on_records=agent.on_records,
            on_status=agent.on_kernel_log,
        )
    runner = web.AppRunner(server.make_app(agent, token_path=settings.token_path), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.listen_host, settings.listen_port)
    await site.start()
    port = int(runner.addresses[0][1])
    tasks = [asyncio.create_task(agent.run_sampling(), name="demo-agent-sampling")]
    if kernel_log is not None:
        tasks.append(asyncio.create_task(kernel_log.run(), name="demo-agent-kernel-log"))
    try:
        yield RunningAgent(agent=agent, port=port)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=settings.stop_timeout_s)
        if kernel_log is not None:
            kernel_log.close()
        await runner.cleanup()
