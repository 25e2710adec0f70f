"""Ask the node agent on a pod's node for its evidence: kernel OOM records and memory samples.

The agent runs as a DaemonSet, so "the agent of node N" is the agent pod whose
``spec.nodeName`` is N; its pod IP is found through the API with the agent's
label selector and a node field selector. Failures are answers too: an
unreachable agent becomes an :class:`AgentUnavailable` whose message goes into
the report, never an exception that stops the report.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import pydantic

from podmortem.kube.api import Kube, KubeError, resource_path
from podmortem.kube.bodies import PodBody
from podmortem.operator.settings import AgentAccessSettings
from podmortem.reports.evidence import PodEvidence

#: Seconds an agent's address stays cached: agent pods move only on node or DaemonSet changes.
ADDRESS_TTL_S = 60.0


@dataclass(frozen=True)
class AgentUnavailable:
    """Why no evidence came from the agent, in words fit for a report."""

    node: str | None
    reason: str


class AgentClient:
    """Finds agents by node and fetches ``GET /v1/pods/{uid}/evidence`` with a bearer token."""

    def __init__(
        self, *, kube: Kube, settings: AgentAccessSettings, session: aiohttp.ClientSession
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.session = session
        self._addresses: dict[str, tuple[float, str]] = {}

    def _token(self) -> str | None:
        path = self.settings.token_path
        if path is None:
            return None
        # Re-read every time: a rotated Secret then needs no restart, and the file is tiny.
        return path.read_text().strip()

    async def address(self, *, node: str) -> str | None:
        cached = self._addresses.get(node)
        if cached is not None and time.monotonic() - cached[0] < ADDRESS_TTL_S:
            return cached[1]
        pods = await self.kube.list(
            resource_path("", "v1", "pods", self.settings.namespace),
            label_selector=self.settings.label_selector,
            field_selector=f"spec.nodeName={node}",
        )
        wanted = _parse_selector(self.settings.label_selector)
        for item in pods:
            pod = PodBody(item)
            labels = pod.labels
            if pod.node_name != node or any(labels.get(k) != v for k, v in wanted.items()):
                continue  # the API filters already; this guards against servers that do not
            if pod.pod_ip and (pod.phase or "Running") == "Running":
                self._addresses[node] = (time.monotonic(), pod.pod_ip)
                return pod.pod_ip
        return None

    def forget(self, *, node: str) -> None:
        self._addresses.pop(node, None)

    async def evidence(
        self, *, node: str | None, pod_uid: str, timeout_s: float | None = None
    ) -> PodEvidence | AgentUnavailable:
        """The pod's evidence, or why not. ``timeout_s`` defaults to the in-budget ``settings.timeout_s``."""
        if not self.settings.enabled:
            return AgentUnavailable(node=node, reason="the node agent is disabled in this installation")
        if not node:
            return AgentUnavailable(node=node, reason="the pod was never scheduled to a node")
        limit = self.settings.timeout_s if timeout_s is None else timeout_s
        try:
            async with asyncio.timeout(limit):
                return await self._fetch(node=node, pod_uid=pod_uid)
        except TimeoutError:
            self.forget(node=node)
            return AgentUnavailable(node, f"the agent on node {node} did not answer within {limit:g} s")
        except (aiohttp.ClientError, OSError) as exc:
            self.forget(node=node)
            return AgentUnavailable(node, f"the agent on node {node} is unreachable: {exc}")
        except KubeError as exc:
            return AgentUnavailable(node, f"could not look up the agent pod on node {node}: {exc}")

    async def _fetch(self, *, node: str, pod_uid: str) -> PodEvidence | AgentUnavailable:
        ip = await self.address(node=node)
        if ip is None:
            return AgentUnavailable(
                node, f"no running agent pod on node {node} ({self.settings.label_selector})"
            )
        host = f"[{ip}]" if ":" in ip else ip
        url = f"{self.settings.scheme}://{host}:{self.settings.port}/v1/pods/{pod_uid}/evidence"
        headers = {"Accept": "application/json"}
        try:
            token = self._token()
        except OSError as exc:
            return AgentUnavailable(node, f"cannot read the agent token file: {exc}")
        if token:
            headers["Authorization"] = f"Bearer {token}"
        async with self.session.get(url, headers=headers) as resp:
            body = await resp.read()
            if resp.status == 404:
                return AgentUnavailable(node, f"the agent on node {node} has no evidence of pod {pod_uid}")
            if resp.status in (401, 403):
                return AgentUnavailable(
                    node, f"the agent on node {node} refused the token (HTTP {resp.status})"
                )
            if resp.status >= 400:
                return AgentUnavailable(node, f"the agent on node {node} answered HTTP {resp.status}")
        try:
            return PodEvidence.model_validate_json(body)
        except pydantic.ValidationError as exc:
            return AgentUnavailable(
                node,
                f"the agent on node {node} sent evidence this operator cannot read: "
                f"{exc.error_count()} error(s), first: {exc.errors()[0]['msg']}",
            )


def _parse_selector(selector: str) -> Mapping[str, str]:
    """Equality terms of a label selector (``a=b,c==d``); other forms are left to the API."""
    terms: dict[str, Any] = {}
    for term in selector.split(","):
        key, sep, value = term.partition("=")
        if sep and not key.endswith("!"):
            terms[key.strip()] = value.lstrip("=").strip()
    return terms
