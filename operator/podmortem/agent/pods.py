"""Which pods on this node the agent samples, and where their memory cgroups are.

A pod is sampled when a TrainingJob owns it, it carries ``podmortem.io/watch:
"true"``, or its direct owner is an object of a configured foreign kind (a batch
Job, a PyTorchJob) carrying that annotation (see `owners`). The Kubernetes source
lists this node's pods (``fieldSelector spec.nodeName``) and finds each pod's
cgroup by walking the host's memory hierarchy for the pod UID, which covers the
systemd and cgroupfs drivers and nested nodes (kind) without knowing the
kubelet's configuration. The static
source takes UID → cgroup path directly, for tests and API-less nodes.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from podmortem.agent.oom_events import NodePod, node_pod
from podmortem.cgroups import cgroupfs, paths
from podmortem.kube import owners
from podmortem.kube.api import KubeApi, connect
from podmortem.kube.bodies import Body
from podmortem.kube.label_selector import PodSelector

TRAINING_JOB_GROUP = "podmortem.io/"
TRAINING_JOB_KIND = "TrainingJob"

#: How deep below the hierarchy root a pod cgroup may sit. The deepest real layout seen is kind's
#: ``/docker/<id>/kubelet/kubepods/burstable/pod<uid>`` (6); systemd slices stay under 5.
MAX_POD_DEPTH = 8

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WatchedPod:
    """A pod the agent samples. ``cgroup_path`` is None until its cgroup has been found."""

    uid: str
    namespace: str = ""
    name: str = ""
    cgroup_path: str | None = None


class PodSource(Protocol):
    """Something that says which pods to sample now, keyed by UID."""

    #: Why the last listing failed (the agent reports it); None when it worked.
    last_error: str | None

    async def current(self) -> dict[str, WatchedPod]: ...

    def ready(self) -> tuple[bool, str]:
        """Whether it knows this node's pods now, and why not."""
        ...

    async def close(self) -> None:
        """Release connections at the agent's stop."""
        ...


class FixedPods:
    """A pod set given by its owner, never failing: the base of `StaticPods` and test or demo sources."""

    last_error: str | None = None

    def __init__(self, pods: Mapping[str, WatchedPod] | None = None) -> None:
        self._pods = dict(pods or {})

    async def current(self) -> dict[str, WatchedPod]:
        return dict(self._pods)

    def ready(self) -> tuple[bool, str]:
        return True, "ready"

    async def close(self) -> None:
        return None


class StaticPods(FixedPods):
    """A fixed pod set: UID → cgroup path as the kernel prints it (relative to the memory root)."""

    def __init__(self, pods: Mapping[str, str]) -> None:
        super().__init__({uid: WatchedPod(uid=uid, name=uid, cgroup_path=path) for uid, path in pods.items()})


def is_watched(pod: Mapping[str, Any], *, watch_annotation: str) -> bool:
    """A pod (as the API returns it, a JSON dict) is sampled if a TrainingJob owns it or it opts in."""
    body = Body(pod)
    if body.annotations.get(watch_annotation, "").strip().lower() == "true":
        return True
    for owner in body.owner_references:
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

    The listing (``fieldSelector=spec.nodeName=<node>``, cluster-wide or in each configured
    namespace, as the chart's RBAC allows) is refreshed at most every ``refresh_s`` seconds; between
    refreshes the last result is returned. A failed listing keeps the last good pods of that
    namespace (and raises nothing), so sampling continues while the API server is away;
    ``last_error`` says why.
    """

    def __init__(
        self,
        *,
        node_name: str,
        hierarchy: cgroupfs.MemoryHierarchy | None,
        watch_annotation: str,
        refresh_s: float,
        namespaces: tuple[str, ...] = (),
        foreign_kinds: tuple[owners.ForeignKind, ...] = (),
        owner_cache_s: float = 60.0,
        kubeconfig: Path | None = None,
        api: KubeApi | None = None,
        clock: Callable[[], float] = time.monotonic,
        node_pod_labels: tuple[str, ...] | None = None,
        follow_selector: PodSelector | None = None,
    ) -> None:
        """``node_pod_labels``: keep every pod of the node in `node_pods`, with these labels (the OOM
        Events of `oom_events`); None keeps none. ``follow_selector``: pods it selects are sampled too,
        annotated or not."""
        if not node_name:
            raise ValueError(
                "the Kubernetes pod source needs the node name (--node-name / PODMORTEM_NODE_NAME)"
            )
        self.node_name = node_name
        self.hierarchy = hierarchy
        self.watch_annotation = watch_annotation
        self.refresh_s = refresh_s
        self.namespaces = namespaces
        self.foreign_kinds = foreign_kinds
        self.owner_cache_s = owner_cache_s
        self.kubeconfig = kubeconfig
        self.last_error: str | None = None
        #: Whether a listing has ever worked.
        self.listed = False
        self._pods: dict[str, WatchedPod] = {}
        self._listed_at: float | None = None
        self._api = api
        self.clock = clock
        self.owner_resolver: owners.OwnerResolver | None = None
        self.node_pod_labels = node_pod_labels
        self.follow_selector = follow_selector
        #: Every pod of this node the last listing saw, marked or not (with ``node_pod_labels``).
        self.node_pods: dict[str, NodePod] = {}

    async def _connect(self) -> owners.OwnerResolver:
        if self._api is None:
            self._api = await connect(self.kubeconfig)
        if self.owner_resolver is None:
            self.owner_resolver = owners.OwnerResolver(
                api=self._api,
                kinds=self.foreign_kinds,
                watch_annotation=self.watch_annotation,
                cache_s=self.owner_cache_s,
                clock=self.clock,
            )
        return self.owner_resolver

    async def _list(self, namespace: str | None) -> list[dict[str, Any]]:
        assert self._api is not None
        path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
        body = await self._api.get_json(path, query=[("fieldSelector", f"spec.nodeName={self.node_name}")])
        items: list[dict[str, Any]] = body.get("items") or []
        return items

    async def _why_watched(self, item: Mapping[str, Any], resolver: owners.OwnerResolver) -> str | None:
        if is_watched(item, watch_annotation=self.watch_annotation):
            return "annotated or owned by a TrainingJob"
        body = Body(item)
        if self.follow_selector is not None and self.follow_selector.selects(body.namespace, body.labels):
            return "selected by the follow selector"
        owner = await resolver.watching_owner(item)
        return f"owner {owner} is annotated" if owner is not None else None

    async def current(self) -> dict[str, WatchedPod]:
        import asyncio

        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._listed_at is not None and now - self._listed_at < self.refresh_s:
            return self._resolve(self._pods)
        errors: list[str] = []
        try:
            resolver = await self._connect()
        except Exception as exc:  # no credentials yet, or a broken kubeconfig: keep sampling what we had
            self._fail(f"cannot use the API server: {exc}")
            return self._resolve(self._pods)
        resolver.begin_round()
        await resolver.resolve_kinds()
        pods: dict[str, WatchedPod] = {}
        node_pods: dict[str, NodePod] = {}
        for namespace in self.namespaces or (None,):
            try:
                items = await self._list(namespace)
            except Exception as exc:  # the API server being away must not stop sampling
                where = f"namespace {namespace}" if namespace else "all namespaces"
                errors.append(f"listing pods on {self.node_name} in {where} failed: {exc}")
                pods.update(
                    {u: p for u, p in self._pods.items() if namespace is None or p.namespace == namespace}
                )
                node_pods.update({u: p for u, p in self.node_pods.items()
                                  if namespace is None or p.namespace == namespace})
                continue
            for item in items:
                body = Body(item)
                uid = body.uid
                if not uid:
                    continue
                if self.node_pod_labels is not None:
                    seen = node_pod(item, self.node_pod_labels)
                    if seen is not None:
                        node_pods[uid] = seen
                why = await self._why_watched(item, resolver)
                if why is None:
                    continue
                known = self._pods.get(uid)
                if known is None:
                    logger.info(
                        "watching pod %s/%s (%s): %s", body.namespace, body.name, uid, why
                    )
                pods[uid] = known or WatchedPod(uid=uid, namespace=body.namespace, name=body.name)
        resolver.end_round()
        if resolver.last_error:
            errors.append(resolver.last_error)
        if errors:
            self._fail("; ".join(errors))
        elif self.last_error is not None:
            logger.info("listing this node's pods works again")
            self.last_error = None
        self._listed_at = now
        self.listed = True
        self._pods = pods
        self.node_pods = node_pods
        return self._resolve(pods)

    def _fail(self, error: str) -> None:
        """Record why the pod list is not current; logged once per distinct error."""
        if error != self.last_error:
            logger.error("%s", error)
        self.last_error = error

    def ready(self) -> tuple[bool, str]:
        """Ready once this node's pods were listed and the last listing worked."""
        if self.last_error is not None:
            return False, self.last_error
        if not self.listed:
            return False, "this node's pods have not been listed yet"
        return True, "listing this node's pods"

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
                pods[pod.uid] = dataclasses.replace(pod, cgroup_path=where.get(pod.uid))
        return dict(pods)

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()
            self._api = None
