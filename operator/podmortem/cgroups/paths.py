"""Which pod and container a cgroup path belongs to, from the path alone.

Kernel OOM records name cgroups by path (``oom_memcg``, ``task_memcg``, ``cpuset``);
the kubelet lays those paths out in a few shapes:

- systemd driver: ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_underscored>.slice/
  cri-containerd-<id>.scope``
- cgroupfs driver: ``/kubepods/burstable/pod<uid>/<id>``
- Guaranteed pods sit directly under kubepods, with no QoS level;
- kind and other nested nodes prefix all of it (``/docker/<node>/kubelet/kubepods/…``);
- runtimes prefix the container id: ``cri-containerd-``, ``crio-``, ``docker-``.

So the pod is found by its own segment anywhere in the path, never by anchoring at
``/kubepods``. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from podmortem.reports.failure import PodRef

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"
_SYSTEMD_POD = re.compile(rf"kubepods(?:-(burstable|besteffort))?-pod({_UID})\.slice")
_CGROUPFS_POD = re.compile(rf"pod({_UID})")
_CONTAINER = re.compile(r"(?:(cri-containerd|crio|docker|containerd)-)?([0-9a-f]{64})(?:\.scope)?")
_RUNTIMES = {"cri-containerd": "containerd", "containerd": "containerd", "crio": "cri-o", "docker": "docker"}

Qos = Literal["guaranteed", "burstable", "besteffort"]


@dataclass(frozen=True, slots=True)
class CgroupIdentity:
    """What a cgroup path says about its pod and container."""

    pod_uid: str | None
    container_id: str | None
    qos: Qos | None
    #: "containerd", "cri-o", "docker", or None when the id has no runtime prefix.
    runtime: str | None
    driver: Literal["systemd", "cgroupfs"] | None

    @property
    def level(self) -> Literal["pod", "container"] | None:
        if self.container_id is not None:
            return "container"
        return "pod" if self.pod_uid is not None else None


def _container(segment: str) -> tuple[str, str | None] | None:
    m = _CONTAINER.fullmatch(segment)
    if m is None:
        return None
    return m.group(2), _RUNTIMES.get(m.group(1) or "")


def identify(path: str) -> CgroupIdentity | None:
    """The pod and container of a kubelet cgroup path; None when the path has no pod in it."""
    segments = [s for s in path.strip().split("/") if s]
    for index, segment in enumerate(segments):
        qos: Qos | None
        m = _SYSTEMD_POD.fullmatch(segment)
        if m is not None:
            driver: Literal["systemd", "cgroupfs"] = "systemd"
            uid = m.group(2)
            qos = "burstable" if m.group(1) == "burstable" else "besteffort" if m.group(1) else "guaranteed"
        else:
            m = _CGROUPFS_POD.fullmatch(segment)
            if m is None:
                continue
            driver = "cgroupfs"
            uid = m.group(1)
            parent = segments[index - 1] if index else ""
            qos = (
                "burstable"
                if parent == "burstable"
                else "besteffort"
                if parent == "besteffort"
                else "guaranteed"
                if parent == "kubepods"
                else None
            )
        container_id = runtime = None
        if index + 1 < len(segments):
            found = _container(segments[index + 1])
            if found is not None:
                container_id, runtime = found
        return CgroupIdentity(
            pod_uid=uid.replace("_", "-"), container_id=container_id, qos=qos, runtime=runtime, driver=driver
        )
    return None


def container_from_cpuset(cpuset: str | None) -> tuple[str, str | None] | None:
    """``cpuset=cri-containerd-<id>.scope`` (or a bare 64-hex id) → (container id, runtime)."""
    if not cpuset:
        return None
    return _container(cpuset.rsplit("/", 1)[-1])


def pod_ref(*, task_memcg: str | None, oom_memcg: str | None, cpuset: str | None = None) -> PodRef | None:
    """The pod behind an OOM kill: the task's cgroup first, then the limit's, then the cpuset name.

    The cpuset alone names only a container, so it is used only once a pod was found.
    """
    task = identify(task_memcg) if task_memcg else None
    limit = identify(oom_memcg) if oom_memcg else None
    pod_uid = (task.pod_uid if task else None) or (limit.pod_uid if limit else None)
    if pod_uid is None:
        return None
    container_id = runtime = None
    for ident in (task, limit):
        if ident is not None and ident.container_id is not None:
            container_id, runtime = ident.container_id, ident.runtime
            break
    if container_id is None:
        found = container_from_cpuset(cpuset)
        if found is not None:
            container_id, runtime = found
    qos = (task.qos if task and task.qos else None) or (limit.qos if limit else None)
    return PodRef(
        pod_uid=pod_uid,
        container_id=container_id,
        qos=qos,
        runtime=runtime,
        limit_level=limit.level if limit is not None else None,
    )
