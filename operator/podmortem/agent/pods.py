"""Which pods on this node the agent samples, and where their memory cgroups are.

A pod is sampled when a TrainingJob owns it or it carries ``podmortem.io/watch:
"true"``. The Kubernetes source lists this node's pods (``fieldSelector
spec.nodeName``) and finds each pod's cgroup by walking the host's memory
hierarchy for the pod UID, which covers the systemd and cgroupfs drivers and
nested nodes (kind) without knowing the kubelet's configuration. The static
source takes UID → cgroup path directly, for tests and API-less nodes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from podmortem.agent import cgroupfs
from podmortem.cgroups import paths

TRAINING_JOB_GROUP = "podmortem.io/"
TRAINING_JOB_KIND = "TrainingJob"

#: How deep below the hierarchy root a pod cgroup may sit. The deepest real layout seen is kind's
#: ``/docker/<id>/kubelet/kubepods/burstable/pod<uid>`` (6); systemd slices stay under 5.
MAX_POD_DEPTH = 8


@dataclass(frozen=True)
class WatchedPod:
    """A pod the agent samples. ``cgroup_path`` is None until its cgroup has been found."""

    uid: str
    namespace: str = ""
    name: str = ""
    cgroup_path: str | None = None


class PodSource(Protocol):
    """Something that says which pods to sample now, keyed by UID."""

    async def current(self) -> dict[str, WatchedPod]: ...


class StaticPods:
    """A fixed pod set: UID → cgroup path as the kernel prints it (relative to the memory root)."""

    def __init__(self, pods: Mapping[str, str]) -> None:
        self._pods = {uid: WatchedPod(uid=uid, name=uid, cgroup_path=path) for uid, path in pods.items()}

    async def current(self) -> dict[str, WatchedPod]:
        return dict(self._pods)


def is_watched(pod: Mapping[str, Any], *, watch_annotation: str) -> bool:
    """A pod (as the API returns it, a JSON dict) is sampled if a TrainingJob owns it or it opts in."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if str(annotations.get(watch_annotation, "")).strip().lower() == "true":
        return True
    for owner in metadata.get("ownerReferences") or []:
        if owner.get("kind") == TRAINING_JOB_KIND and str(owner.get("apiVersion", "")).startswith(
            TRAINING_JOB_GROUP
        ):
            return True
    return False


def pod_uid_in_name(name: str) -> str | None:
    """The pod UID a kubelet-made cgroup directory name carries (either driver), via the forensics core."""
    identity = paths.identify(name)
    if identity is None or identity.container_id is not None:
        return None
    return identity.pod_uid


def find_pod_cgroups(
    hierarchy: cgroupfs.MemoryHierarchy, *, max_depth: int = MAX_POD_DEPTH
) -> dict[str, str]:
    """Walk the memory hierarchy once: pod UID → cgroup path (relative to the root, leading '/').

    The walk does not descend into a pod's own directory (its children are containers) nor
    further than ``max_depth``; a node has a few hundred cgroups, so one walk is cheap.
    """
    found: dict[str, str] = {}
    root = str(hierarchy.root)
    for dirpath, dirnames, _ in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        depth = 0 if rel == "." else rel.count(os.sep) + 1
        keep = []
        for name in dirnames:
            uid = pod_uid_in_name(name)
            if uid is not None:
                found.setdefault(uid, "/" + (name if rel == "." else f"{rel}/{name}"))
            elif depth + 1 < max_depth:
                keep.append(name)
        dirnames[:] = keep
    return found


class KubernetesPods:
    """This node's watched pods, listed from the API server; cgroups found on the host.

    The listing is refreshed at most every ``refresh_s`` seconds; between refreshes the last
    result is returned. A failed listing keeps the last good pod set (and raises nothing), so
    sampling continues while the API server is away; ``last_error`` says why.
    """

    def __init__(
        self,
        *,
        node_name: str,
        hierarchy: cgroupfs.MemoryHierarchy | None,
        watch_annotation: str,
        refresh_s: float,
    ) -> None:
        if not node_name:
            raise ValueError("the Kubernetes pod source needs the node name (--node-name / NODE_NAME)")
        self.node_name = node_name
        self.hierarchy = hierarchy
        self.watch_annotation = watch_annotation
        self.refresh_s = refresh_s
        self.last_error: str | None = None
        self._pods: dict[str, WatchedPod] = {}
        self._listed_at: float | None = None
        self._api: Any = None

    async def _list(self) -> list[dict[str, Any]]:
        import json

        from kubernetes_asyncio import client, config

        if self._api is None:
            try:
                config.load_incluster_config()  # type: ignore[no-untyped-call]
            except config.ConfigException:
                await config.load_kube_config()
            self._api = client.ApiClient()
        core = client.CoreV1Api(self._api)
        response = await core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self.node_name}", _preload_content=False
        )
        body = json.loads(await response.read())  # type: ignore[attr-defined]
        items: list[dict[str, Any]] = body.get("items") or []
        return items

    async def current(self) -> dict[str, WatchedPod]:
        import asyncio

        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._listed_at is not None and now - self._listed_at < self.refresh_s:
            return self._resolve(self._pods)
        try:
            items = await self._list()
        except Exception as exc:  # the API server being away must not stop sampling
            self.last_error = f"listing pods on {self.node_name} failed: {exc!r}"
            return self._resolve(self._pods)
        self.last_error = None
        self._listed_at = now
        pods: dict[str, WatchedPod] = {}
        for item in items:
            if not is_watched(item, watch_annotation=self.watch_annotation):
                continue
            meta = item.get("metadata") or {}
            uid = meta.get("uid")
            if uid:
                pods[uid] = WatchedPod(
                    uid=uid, namespace=meta.get("namespace", ""), name=meta.get("name", "")
                )
        self._pods = pods
        return self._resolve(pods)

    def _resolve(self, pods: dict[str, WatchedPod]) -> dict[str, WatchedPod]:
        """Fill in cgroup paths, walking the hierarchy only when a pod's path is unknown or gone."""
        if self.hierarchy is None:
            return dict(pods)
        hierarchy = self.hierarchy
        stale = [
            p
            for p in pods.values()
            if p.cgroup_path is None or not Path(hierarchy.directory(p.cgroup_path)).is_dir()
        ]
        if stale:
            where = find_pod_cgroups(hierarchy)
            for pod in stale:
                pods[pod.uid] = WatchedPod(pod.uid, pod.namespace, pod.name, where.get(pod.uid))
        return dict(pods)

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()
            self._api = None
