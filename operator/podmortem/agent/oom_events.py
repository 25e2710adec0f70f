"""Every pod's OOM kill on this node as an Event on that pod and a counter, marked or not.

Inspektor Gadget's ``trace oomkill`` and kube-state-metrics taught users to expect an OOM kill to
show up on the pod whatever the pod is; podmortem otherwise reports only the pods it was asked to
follow. With ``--oom-events`` the agent places each kernel OOM-kill record on the pod its cgroup
path names (the pod UID the kubelet puts in the path, looked up in this node's last pod listing)
and then:

* counts it in ``podmortem_agent_oom_kills_total`` with the pod's namespace, name and container,
  plus the pod labels the operator allowed (``--oom-metric-pod-labels``, as kube-state-metrics'
  ``label_*``): the label set is fixed at start, and the series are capped (the oldest pod's go
  first), so a node running thousands of short pods cannot grow the scrape without bound;
* posts a core/v1 Event on the pod, reason ``OOMKilling`` (node-problem-detector's reason for the
  same kernel line, so alert rules written for it match), type Warning, its message cut to the
  1024 bytes every podmortem Event keeps (`podmortem.kube.api.event_message`). Events are paced:
  one per pod per ``--oom-event-interval`` (kills in between are counted into the next one's
  message, and always into the counter) and at most ``--oom-events-per-minute`` for the node, so a
  crash-looping pod or a node-wide OOM storm cannot flood the API server.

A record whose pod the last listing does not know yet (a pod killed in its first seconds) is held
and placed again after later listings, for ``unplaced_record_keep_s``; one that names no pod (a
system daemon) is left alone.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from podmortem.agent.matching import record_paths
from podmortem.cgroups import paths
from podmortem.kube.api import event_message
from podmortem.kube.bodies import PodBody
from podmortem.reports.oom_record import OomKillRecord

logger = logging.getLogger(__name__)

#: The Event's reason: node-problem-detector's for the kernel's "Killed process" line.
REASON = "OOMKilling"
#: Who the Event says reported it (``source.component``, ``reportingComponent``).
COMPONENT = "podmortem-agent"
#: Pod labels the counter may carry at most: each is a label on every series.
MAX_POD_LABELS = 10
#: Series of the counter kept at most; past it the pod killed longest ago loses its series.
MAX_SERIES = 2000
#: Pods whose Event pacing is remembered at most (the oldest forgotten first).
MAX_PACED_PODS = 4096
#: Records held for a pod the listing does not know yet, at most.
MAX_HELD = 256
#: Events waiting to be posted at most; more are dropped (and counted) while the API server lags.
QUEUE_SIZE = 64
#: Kills remembered, so one read twice (a restart before the kernel log position was saved) counts once.
MAX_SEEN = 4096

Poster = Callable[[str, dict[str, Any]], Awaitable[Any]]


@dataclass(frozen=True)
class NodePod:
    """What the agent's pod listing says of one pod on this node, marked or not."""

    uid: str
    namespace: str
    name: str
    #: The pod's labels that ``--oom-metric-pod-labels`` allows, nothing else.
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Container id (without the ``containerd://`` scheme) → container name, from the pod's status.
    containers: Mapping[str, str] = field(default_factory=dict)


def node_pod(item: Mapping[str, Any], allowed_labels: tuple[str, ...]) -> NodePod | None:
    """A listed pod (the API's JSON) as a `NodePod`; None without a UID."""
    meta = item.get("metadata") or {}
    uid = meta.get("uid")
    if not uid:
        return None
    labels = meta.get("labels") or {}
    pod = PodBody(item)
    containers: dict[str, str] = {}
    for entry in (*pod.init_statuses, *pod.statuses, *pod.ephemeral_statuses):
        # The killed instance is lastState's once the container restarted.
        before = entry.last_terminated.container_id if entry.last_terminated is not None else ""
        for raw in (entry.container_id, before):
            if raw:
                containers[raw.rpartition("://")[2]] = entry.name
    return NodePod(
        uid=str(uid), namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
        labels={k: str(labels[k]) for k in allowed_labels if k in labels}, containers=containers,
    )


def metric_label(key: str) -> str:
    """A pod label's key as a Prometheus label name, as kube-state-metrics writes it (``label_app``)."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)


def place(record: OomKillRecord) -> tuple[str, str | None] | None:
    """The pod UID (and container id, if named) of the cgroup a record names; None outside pods."""
    for path in record_paths(record):
        identity = paths.identify(path)
        if identity is not None and identity.pod_uid is not None:
            return identity.pod_uid, identity.container_id
    return None


def _mib(kb: int) -> str:
    return f"{kb / 1024:.1f} MiB"


def describe(record: OomKillRecord, container: str | None, *, folded: int, node: str) -> str:
    """The Event's message: who was killed, at what usage and limit, and kills folded into it."""
    comm, pid = record.victim_comm or "?", record.victim_pid
    who = f"{comm} (pid {pid})" if pid is not None else comm
    where = f" in container {container}" if container else ""
    scope = "node out of memory" if record.scope == "global" else "memory cgroup out of memory"
    parts = [f"Kernel OOM kill ({scope}): killed {who}{where}"]
    memory = record.counters.get("memory")
    if memory is not None:
        parts.append(f"usage {_mib(memory.usage_kb)} of limit {_mib(memory.limit_kb)}")
    victim = record.victim
    if victim is not None and victim.anon_rss_kb is not None:
        parts.append(f"anon-rss {_mib(victim.anon_rss_kb)}")
    if folded:
        parts.append(f"{folded} earlier kill(s) of this pod since the last Event, not posted apart")
    return "; ".join(parts) + f" (podmortem agent on {node})"


def event_body(pod: NodePod, message: str, *, node: str, now: datetime) -> dict[str, Any]:
    """A core/v1 Event on ``pod``: reason `REASON`, type Warning, the message within 1024 bytes."""
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{pod.name[:200]}.{uuid.uuid4().hex[:12]}", "namespace": pod.namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "namespace": pod.namespace,
                           "uid": pod.uid},
        "type": "Warning",
        "reason": REASON,
        "message": event_message(message),
        "source": {"component": COMPONENT, "host": node},
        "reportingComponent": COMPONENT,
        "reportingInstance": node,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class Pacing:
    """When an Event may go: one per pod per ``per_pod_s``, ``per_minute`` for the node (a token bucket)."""

    def __init__(self, *, per_pod_s: float, per_minute: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_pod_s = per_pod_s
        self.per_minute = per_minute
        self.clock = clock
        #: uid → (when its last Event went, kills folded since).
        self._pods: OrderedDict[str, tuple[float, int]] = OrderedDict()
        self._tokens = float(per_minute)
        self._filled_at = clock()

    def admit(self, uid: str) -> int | None:
        """The kills to fold into an Event that may go now; None: not now (this kill is folded)."""
        now = self.clock()
        self._tokens = min(float(self.per_minute),
                           self._tokens + (now - self._filled_at) * self.per_minute / 60.0)
        self._filled_at = now
        last, folded = self._pods.get(uid, (None, 0))
        if (last is not None and now - last < self.per_pod_s) or self._tokens < 1.0:
            self._remember(uid, (last if last is not None else -float("inf"), folded + 1))
            return None
        self._tokens -= 1.0
        self._remember(uid, (now, 0))
        return folded

    def _remember(self, uid: str, state: tuple[float, int]) -> None:
        self._pods[uid] = state
        self._pods.move_to_end(uid)
        while len(self._pods) > MAX_PACED_PODS:
            self._pods.popitem(last=False)


class ApiPoster:
    """Posts with the agent's own API connection, opened at the first Event (most nodes never need one)."""

    def __init__(self, kubeconfig: Any = None) -> None:
        self.kubeconfig = kubeconfig
        self._api: Any = None

    async def __call__(self, path: str, body: dict[str, Any]) -> Any:
        from podmortem.kube.api import connect

        if self._api is None:
            self._api = await connect(self.kubeconfig)
        return await self._api.create(path, body)

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()
            self._api = None


class OomEvents:
    """Places OOM records on this node's pods, counts them, and posts the paced Events."""

    def __init__(
        self,
        *,
        node: str,
        lookup: Callable[[str], NodePod | None],
        poster: Poster,
        registry: CollectorRegistry,
        pod_labels: tuple[str, ...] = (),
        per_pod_s: float = 60.0,
        per_minute: int = 30,
        keep_unknown_s: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if len(pod_labels) > MAX_POD_LABELS:
            raise ValueError(f"at most {MAX_POD_LABELS} pod labels on the OOM-kill counter, "
                             f"got {len(pod_labels)}")
        self.node = node
        self.lookup = lookup
        self.poster = poster
        self.pod_labels = pod_labels
        self.keep_unknown_s = keep_unknown_s
        self.clock = clock
        self.pacing = Pacing(per_pod_s=per_pod_s, per_minute=per_minute, clock=clock)
        self.kills = Counter(
            "podmortem_agent_oom_kills",
            "Kernel OOM kills of any pod on this node (marked for podmortem or not), by pod and container.",
            ("namespace", "pod", "container", *(metric_label(k) for k in pod_labels)),
            registry=registry,
        )
        self.events = Counter(
            "podmortem_agent_oom_events",
            "OOM-kill Events on pods: posted, folded (paced into a later one), dropped (queue full), failed.",
            ("result",),
            registry=registry,
        )
        self._series: OrderedDict[tuple[str, ...], None] = OrderedDict()
        self._seen: OrderedDict[tuple[Any, ...], None] = OrderedDict()
        self._held: list[tuple[float, str, str | None, OomKillRecord]] = []
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=QUEUE_SIZE)

    def on_records(self, records: list[OomKillRecord]) -> int:
        """Count and queue an Event for each record that names a pod; returns how many were placed now."""
        placed = 0
        for record in records:
            where = place(record)
            if where is None:
                continue
            uid, container_id = where
            key = (uid, record.kmsg_seq, record.victim_pid, record.monotonic_s)
            if key in self._seen:
                continue
            self._seen[key] = None
            while len(self._seen) > MAX_SEEN:
                self._seen.popitem(last=False)
            if self._placed(uid, container_id, record):
                placed += 1
            else:
                self._held.append((self.clock(), uid, container_id, record))
        del self._held[:-MAX_HELD]
        return placed

    def retry(self) -> None:
        """Place the held records again (after a new pod listing); those past ``keep_unknown_s`` go."""
        now, held, self._held = self.clock(), self._held, []
        for at, uid, container_id, record in held:
            if not self._placed(uid, container_id, record) and now - at <= self.keep_unknown_s:
                self._held.append((at, uid, container_id, record))

    def _placed(self, uid: str, container_id: str | None, record: OomKillRecord) -> bool:
        pod = self.lookup(uid)
        if pod is None:
            return False
        container = pod.containers.get(container_id or "", "") if container_id else ""
        self._count(pod, container)
        folded = self.pacing.admit(uid)
        if folded is None:
            self.events.labels("folded").inc()
            return True
        message = describe(record, container or None, folded=folded, node=self.node)
        try:
            self._queue.put_nowait(event_body(pod, message, node=self.node, now=datetime.now(UTC)))
        except asyncio.QueueFull:
            self.events.labels("dropped").inc()
        return True

    def _count(self, pod: NodePod, container: str) -> None:
        labels = (pod.namespace, pod.name, container, *(pod.labels.get(k, "") for k in self.pod_labels))
        self.kills.labels(*labels).inc()
        self._series[labels] = None
        self._series.move_to_end(labels)
        while len(self._series) > MAX_SERIES:
            oldest, _ = self._series.popitem(last=False)
            self.kills.remove(*oldest)

    async def run(self) -> None:
        """Post queued Events until cancelled; a failed post is logged and counted, never retried."""
        while True:
            event = await self._queue.get()
            try:
                await self.poster(f"/api/v1/namespaces/{event['metadata']['namespace']}/events", event)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.events.labels("failed").inc()
                logger.warning("cannot post the OOM-kill Event on pod %s/%s: %s",
                               event["metadata"]["namespace"], event["involvedObject"]["name"], exc)
            else:
                self.events.labels("posted").inc()
