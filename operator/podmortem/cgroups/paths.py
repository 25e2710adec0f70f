"""Which pod and container a cgroup path belongs to, from the path alone.

Kernel OOM records name cgroups by path (``oom_memcg``, ``task_memcg``, ``cpuset``);
the kubelet lays those paths out in a few shapes:

- systemd driver: ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_underscored>.slice/
  cri-containerd-<id>.scope``
- cgroupfs driver: ``/kubepods/burstable/pod<uid>/<id>``
- Guaranteed pods sit directly under kubepods, with no QoS level;
- kind and other nested nodes prefix all of it (``/docker/<node>/kubelet/kubepods/…``);
- runtimes prefix the container id: ``cri-containerd-``, ``crio-``, ``docker-``, ``libpod-``;
- containerd with mismatched cgroup settings leaves the systemd-driver name unexpanded:
  ``/system.slice/containerd.service/kubepods-besteffort-pod<uid>.slice:cri-containerd:<id>``.

So the pod is found by its own segment anywhere in the path, never by anchoring at
``/kubepods``. Containers run outside pods too, and their ids are read the same way:

- docker: ``/docker/<id>`` (cgroupfs), ``/system.slice/docker-<id>.scope`` (systemd, also under a
  user's slice when rootless);
- containerd without the kubelet: ``nerdctl-<id>.scope``, ``cri-containerd-<id>.scope``, or
  ``/<namespace>/<id>`` (cgroupfs, which names no runtime);
- CRI-O: ``crio-<id>.scope`` / ``crio-<id>``, and ``crio-conmon-<id>[.scope]`` for its monitor;
- podman: ``/machine.slice/libpod-<id>.scope`` (crun may add a ``/container`` subgroup), under a
  user's slice when rootless, ``/libpod_parent/libpod-<id>`` (cgroupfs), ``libpod-conmon-<id>.scope``
  for its monitor.

Without a pod the deepest container segment is the process's own (docker in docker: the inner
one). A ``*-conmon-<id>`` cgroup holds the runtime's monitor process for container ``<id>``, not
the container: ``monitor`` says so. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from podmortem.reports.failure import PodRef

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"
_SYSTEMD_POD = re.compile(rf"kubepods(?:-(burstable|besteffort))?-pod({_UID})\.slice")
_CGROUPFS_POD = re.compile(rf"pod({_UID})")
_PREFIXES = "cri-containerd|crio-conmon|crio|docker|containerd|nerdctl|libpod-conmon|libpod"
_CONTAINER = re.compile(rf"(?:({_PREFIXES})-)?([0-9a-f]{{64}})(?:\.scope)?")
#: The systemd driver's ``<slice>:<prefix>:<id>`` name, where a runtime left it unexpanded.
_COLON = re.compile(rf"([^:]+\.slice):({_PREFIXES}):([0-9a-f]{{64}})")
_RUNTIMES = {
    "cri-containerd": "containerd",
    "containerd": "containerd",
    "nerdctl": "containerd",
    "crio": "cri-o",
    "crio-conmon": "cri-o",
    "docker": "docker",
    "libpod": "podman",
    "libpod-conmon": "podman",
}
_MONITORS = frozenset({"crio-conmon", "libpod-conmon"})
#: A bare id's runtime, from the directory it sits in (docker's cgroupfs layout).
_PARENT_RUNTIMES = {"docker": "docker"}
#: Sub-cgroups a runtime makes inside a container's own (crun's ``container``): still the container's.
_CONTAINER_SUBGROUPS = frozenset({"container"})

Qos = Literal["guaranteed", "burstable", "besteffort"]


@dataclass(frozen=True, slots=True)
class CgroupIdentity:
    """What a cgroup path says about its pod and container."""

    pod_uid: str | None
    container_id: str | None
    qos: Qos | None
    #: "containerd", "cri-o", "docker", "podman", or None when the id has no runtime prefix.
    runtime: str | None
    driver: Literal["systemd", "cgroupfs"] | None
    #: The cgroup of the runtime's monitor process for the container (conmon), not the container.
    monitor: bool = False
    #: Outside pods: the path goes on below the container's cgroup (a cgroup inside the container,
    #: e.g. its own ``init.scope``), so a limit on it is not the container's own.
    nested: bool = False

    @property
    def level(self) -> Literal["pod", "container"] | None:
        if self.container_id is not None:
            return None if self.nested else "container"
        return "pod" if self.pod_uid is not None else None


def _container(segment: str, parent: str = "") -> tuple[str, str | None, bool] | None:
    """(id, runtime, monitor) of a container's cgroup directory name; None when it names none."""
    m = _CONTAINER.fullmatch(segment)
    if m is None:
        return None
    prefix = m.group(1)
    runtime = _RUNTIMES[prefix] if prefix else _PARENT_RUNTIMES.get(parent)
    return m.group(2), runtime, prefix in _MONITORS


def _pod(segment: str, parent: str) -> tuple[str, Qos | None, Literal["systemd", "cgroupfs"]] | None:
    m = _SYSTEMD_POD.fullmatch(segment)
    if m is not None:
        level = m.group(1)
        qos: Qos | None = "burstable" if level == "burstable" else "besteffort" if level else "guaranteed"
        return m.group(2), qos, "systemd"
    m = _CGROUPFS_POD.fullmatch(segment)
    if m is None:
        return None
    qos = (
        "burstable"
        if parent == "burstable"
        else "besteffort"
        if parent == "besteffort"
        else "guaranteed"
        if parent == "kubepods"
        else None
    )
    return m.group(1), qos, "cgroupfs"


def identify(path: str) -> CgroupIdentity | None:
    """The pod and container of a cgroup path; None when it names neither.

    With a pod, the container is the segment right below the pod's (or the one its unexpanded
    systemd name carries); without one, the deepest segment that names a container.
    """
    segments = [s for s in path.strip().split("/") if s]
    for index, segment in enumerate(segments):
        parent = segments[index - 1] if index else ""
        found: tuple[str, str | None, bool] | None = None
        colon = _COLON.fullmatch(segment)
        if colon is not None:
            pod = _pod(colon.group(1), parent)
            if pod is not None:
                prefix = colon.group(2)
                found = colon.group(3), _RUNTIMES[prefix], prefix in _MONITORS
        else:
            pod = _pod(segment, parent)
            if pod is not None and index + 1 < len(segments):
                found = _container(segments[index + 1], segment)
        if pod is None:
            continue
        uid, qos, driver = pod
        container_id, runtime, monitor = found if found is not None else (None, None, False)
        return CgroupIdentity(
            pod_uid=uid.replace("_", "-"),
            container_id=container_id,
            qos=qos,
            runtime=runtime,
            driver=driver,
            monitor=monitor,
        )
    for index in range(len(segments) - 1, -1, -1):
        found = _container(segments[index], segments[index - 1] if index else "")
        if found is None:
            continue
        below = segments[index + 1 :]
        return CgroupIdentity(
            pod_uid=None,
            container_id=found[0],
            qos=None,
            runtime=found[1],
            driver=None,
            monitor=found[2],
            nested=any(s not in _CONTAINER_SUBGROUPS for s in below),
        )
    return None


def container_from_cpuset(cpuset: str | None) -> tuple[str, str | None] | None:
    """``cpuset=cri-containerd-<id>.scope`` (or a bare 64-hex id) → (container id, runtime)."""
    if not cpuset:
        return None
    parts = cpuset.rsplit("/", 2)
    found = _container(parts[-1], parts[-2] if len(parts) > 1 else "")
    return (found[0], found[1]) if found is not None else None


def pod_ref(*, task_memcg: str | None, oom_memcg: str | None, cpuset: str | None = None) -> PodRef | None:
    """The pod and container behind an OOM kill: the task's cgroup first, then the limit's.

    A container outside pods (docker, nerdctl, podman, CRI-O) gives a `PodRef` with no pod uid.
    The cpuset, which the kernel prints for the task that triggered the kill and not for the
    victim, only completes a pod found in the paths.
    """
    task = identify(task_memcg) if task_memcg else None
    limit = identify(oom_memcg) if oom_memcg else None
    pod_uid = (task.pod_uid if task else None) or (limit.pod_uid if limit else None)
    if pod_uid is None:
        return _outside_pods(task, limit)
    # Only the pod's own paths name its container: a kind node's limit path names the node's.
    own = [i for i in (task, limit) if i is not None and i.pod_uid == pod_uid]
    container = next((i for i in own if i.container_id is not None), None)
    container_id = container.container_id if container else None
    runtime = container.runtime if container else None
    if container_id is None:
        found = container_from_cpuset(cpuset)
        if found is not None:
            container_id, runtime = found
    qos = next((i.qos for i in own if i.qos), None)
    return PodRef(
        pod_uid=pod_uid,
        container_id=container_id,
        qos=qos,
        runtime=runtime,
        limit_level=limit.level if limit is not None and limit.pod_uid == pod_uid else None,
        monitor=container.monitor if container else False,
    )


def _outside_pods(task: CgroupIdentity | None, limit: CgroupIdentity | None) -> PodRef | None:
    """A container that is no pod's: its id and runtime; the limit is its own when it is its cgroup."""
    ident = next((i for i in (task, limit) if i is not None and i.container_id is not None), None)
    if ident is None:
        return None
    own_limit = limit is not None and limit.container_id == ident.container_id and limit.level == "container"
    return PodRef(
        pod_uid=None,
        container_id=ident.container_id,
        runtime=ident.runtime,
        limit_level="container" if own_limit else None,
        monitor=ident.monitor,
    )
