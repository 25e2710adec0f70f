"""cgroup path → pod UID, container ID, QoS and runtime, for every layout the kubelet makes."""

from __future__ import annotations

import pytest

from podmortem.cgroups import paths

UID = "ef91e487-dec5-4613-800b-eb23e1a1617d"
SYS_UID = UID.replace("-", "_")
CID = "100093783c22a3ae1a42e21dd887b7c26eef52d56ba44c7273ef54507b6efe7c"


@pytest.mark.parametrize(
    ("path", "uid", "cid", "qos", "runtime", "driver"),
    [
        (
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYS_UID}.slice/cri-containerd-{CID}.scope",
            UID,
            CID,
            "burstable",
            "containerd",
            "systemd",
        ),
        (
            f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SYS_UID}.slice/crio-{CID}.scope",
            UID,
            CID,
            "besteffort",
            "cri-o",
            "systemd",
        ),
        (
            f"/kubepods.slice/kubepods-pod{SYS_UID}.slice/docker-{CID}.scope",
            UID,
            CID,
            "guaranteed",
            "docker",
            "systemd",
        ),
        (
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYS_UID}.slice",
            UID,
            None,
            "burstable",
            None,
            "systemd",
        ),
        (f"/kubepods/burstable/pod{UID}/{CID}", UID, CID, "burstable", None, "cgroupfs"),
        (f"/kubepods/besteffort/pod{UID}/crio-{CID}", UID, CID, "besteffort", "cri-o", "cgroupfs"),
        (f"/kubepods/pod{UID}/{CID}", UID, CID, "guaranteed", None, "cgroupfs"),
        (f"/kubepods/pod{UID}", UID, None, "guaranteed", None, "cgroupfs"),
        (
            f"/docker/{'4' * 64}/kubelet/kubepods/burstable/pod{UID}/{CID}",
            UID,
            CID,
            "burstable",
            None,
            "cgroupfs",
        ),
        (f"/docker/{'4' * 64}/kubelet/kubepods/pod{UID}/{CID}", UID, CID, "guaranteed", None, "cgroupfs"),
        (
            f"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/"
            f"kubepods-burstable-pod{SYS_UID}.slice/cri-containerd-{CID}.scope",
            UID,
            CID,
            "burstable",
            "containerd",
            "systemd",
        ),
        # as posted in a real record: "kubepods-urstable" in the QoS slice; the pod slice says it all
        (
            f"/kubepods.slice/kubepods-urstable.slice/kubepods-burstable-pod{SYS_UID}.slice/cri-containerd-{CID}.scope",
            UID,
            CID,
            "burstable",
            "containerd",
            "systemd",
        ),
    ],
)
def test_identify(path: str, uid: str, cid: str | None, qos: str, runtime: str | None, driver: str) -> None:
    ident = paths.identify(path)
    assert ident is not None
    assert (ident.pod_uid, ident.container_id, ident.qos, ident.runtime, ident.driver) == (
        uid,
        cid,
        qos,
        runtime,
        driver,
    )
    assert ident.level == ("container" if cid else "pod")


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "",
        "/user.slice/user-1000.slice/session-1.scope",
        "/podmortem-test-abc",
        "/system.slice/containerd.service",
        "/kubepods/burstable",
        "/kubepods.slice",
        "/kubepods/podnot-a-uid/x",
    ],
)
def test_non_pod_paths(path: str) -> None:
    assert paths.identify(path) is None


def test_pod_ref_prefers_task_memcg_and_uses_cpuset_only_with_a_pod() -> None:
    pod_path = f"/kubepods/burstable/pod{UID}"
    ref = paths.pod_ref(task_memcg=None, oom_memcg=pod_path, cpuset=f"cri-containerd-{CID}.scope")
    assert ref is not None and ref.pod_uid == UID and ref.container_id == CID and ref.runtime == "containerd"
    assert ref.limit_level == "pod"
    assert paths.pod_ref(task_memcg=None, oom_memcg="/", cpuset=CID) is None
    ref = paths.pod_ref(task_memcg=f"{pod_path}/{CID}", oom_memcg=f"{pod_path}/{CID}")
    assert ref is not None and ref.limit_level == "container"


@pytest.mark.parametrize(
    ("cpuset", "expected"),
    [
        (f"cri-containerd-{CID}.scope", (CID, "containerd")),
        (CID, (CID, None)),
        (f"/kubepods/pod{UID}/docker-{CID}.scope", (CID, "docker")),
        ("/", None),
        ("user.slice", None),
        (None, None),
    ],
)
def test_container_from_cpuset(cpuset: str | None, expected: tuple[str, str | None] | None) -> None:
    assert paths.container_from_cpuset(cpuset) == expected


# Container ids outside pods (issue 22 item 5). The forms are the runtimes' own, as seen in real
# /proc/PID/cgroup files and kernel OOM records posted publicly (oom-kill lines of the form
# ``oom_memcg=/system.slice/docker-<id>.scope,task_memcg=/system.slice/docker-<id>.scope``,
# ``global_oom,task_memcg=/docker/<id>``), and the runtimes' code: docker (cgroupfs ``/docker/<id>``,
# systemd ``docker-<id>.scope``), containerd (CRI ``cri-containerd-<id>.scope``, nerdctl
# ``nerdctl-<id>.scope``, the unexpanded systemd-driver name ``<pod>.slice:cri-containerd:<id>``),
# CRI-O (``crio-<id>.scope``, cgroupfs ``crio-<id>``, its monitor ``crio-conmon-<id>.scope``) and
# podman (``libpod-<id>.scope`` under machine.slice or a user's slice, crun's ``/container``
# subgroup, cgroupfs ``/libpod_parent/libpod-<id>``, its monitor ``libpod-conmon-<id>.scope``).
USER = "/user.slice/user-1000.slice/user@1000.service"
POD64 = "5" * 64  # a podman pod's id (not a Kubernetes pod)


@pytest.mark.parametrize(
    ("path", "runtime", "monitor", "level"),
    [
        (f"/docker/{CID}", "docker", False, "container"),
        (f"/system.slice/docker-{CID}.scope", "docker", False, "container"),
        # a container running systemd: the process sits in a cgroup inside the container's
        (f"/system.slice/docker-{CID}.scope/init.scope", "docker", False, None),
        (f"{USER}/docker-{CID}.scope", "docker", False, "container"),
        (f"/system.slice/nerdctl-{CID}.scope", "containerd", False, "container"),
        (f"{USER}/user.slice/nerdctl-{CID}.scope", "containerd", False, "container"),
        (f"/system.slice/cri-containerd-{CID}.scope", "containerd", False, "container"),
        (f"/system.slice/crio-{CID}.scope", "cri-o", False, "container"),
        (f"/system.slice/crio-conmon-{CID}.scope", "cri-o", True, "container"),
        (f"/machine.slice/libpod-{CID}.scope", "podman", False, "container"),
        (f"/machine.slice/libpod-{CID}.scope/container", "podman", False, "container"),
        (f"/machine.slice/libpod-conmon-{CID}.scope", "podman", True, "container"),
        (f"{USER}/user.slice/libpod-{CID}.scope", "podman", False, "container"),
        (f"/machine.slice/machine-libpod_pod_{POD64}.slice/libpod-{CID}.scope", "podman", False, "container"),
        (f"/libpod_parent/libpod-{CID}", "podman", False, "container"),
        # containerd's cgroupfs layout names the namespace, not the runtime
        (f"/default/{CID}", None, False, "container"),
        # docker in docker (a kind node): the deepest container is the process's own
        (f"/docker/{'4' * 64}/system.slice/docker-{CID}.scope", "docker", False, "container"),
    ],
)
def test_containers_outside_pods(path: str, runtime: str | None, monitor: bool, level: str | None) -> None:
    ident = paths.identify(path)
    assert ident is not None
    assert (ident.pod_uid, ident.qos, ident.driver) == (None, None, None)
    assert (ident.container_id, ident.runtime, ident.monitor, ident.level) == (CID, runtime, monitor, level)


@pytest.mark.parametrize(
    ("path", "uid", "cid", "runtime", "monitor"),
    [
        # the unexpanded systemd-driver name, as a real 5.4 record's task_memcg prints it (corpus 165)
        (
            f"/system.slice/containerd.service/kubepods-besteffort-pod{SYS_UID}.slice:cri-containerd:{CID}",
            UID, CID, "containerd", False,
        ),
        (f"/kubepods-burstable-pod{SYS_UID}.slice:crio:{CID}", UID, CID, "cri-o", False),
        (
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYS_UID}.slice/crio-{CID}.scope/container",
            UID, CID, "cri-o", False,
        ),
        (
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYS_UID}.slice/crio-conmon-{CID}.scope",
            UID, CID, "cri-o", True,
        ),
        (f"/kubepods/burstable/pod{UID}/crio-conmon-{CID}", UID, CID, "cri-o", True),
        (f"/kubepods.slice/kubepods-pod{SYS_UID}.slice/libpod-{CID}.scope", UID, CID, "podman", False),
    ],
)
def test_more_pod_container_forms(path: str, uid: str, cid: str, runtime: str, monitor: bool) -> None:
    ident = paths.identify(path)
    assert ident is not None
    assert (ident.pod_uid, ident.container_id, ident.runtime, ident.monitor) == (uid, cid, runtime, monitor)
    assert ident.level == "container"


def test_a_pod_inside_a_node_container_takes_no_container_id_from_the_node() -> None:
    """kind: the node is a docker container; a pod's own cgroup in it has no container of its own."""
    ident = paths.identify(f"/docker/{'4' * 64}/kubelet/kubepods/burstable/pod{UID}")
    assert ident is not None and (ident.pod_uid, ident.container_id, ident.level) == (UID, None, "pod")
    # a QoS cgroup inside the node names the node's container, but is not that container's own cgroup
    ident = paths.identify(f"/docker/{'4' * 64}/kubelet/kubepods/burstable")
    assert ident is not None and ident.pod_uid is None and ident.container_id == "4" * 64
    assert ident.level is None


def test_pod_ref_for_a_container_outside_pods() -> None:
    scope = f"/system.slice/docker-{CID}.scope"
    ref = paths.pod_ref(task_memcg=scope, oom_memcg=scope, cpuset=f"docker-{CID}.scope")
    assert ref is not None
    assert (ref.pod_uid, ref.container_id, ref.runtime, ref.qos, ref.limit_level, ref.monitor) == (
        None, CID, "docker", None, "container", False,
    )
    # a global OOM names only the task's cgroup
    ref = paths.pod_ref(task_memcg=f"/docker/{CID}", oom_memcg=None)
    assert ref is not None and (ref.pod_uid, ref.container_id, ref.runtime, ref.limit_level) == (
        None, CID, "docker", None,
    )
    # the limit of a slice above the container is not the container's own
    ref = paths.pod_ref(task_memcg=scope, oom_memcg="/system.slice")
    assert ref is not None and ref.container_id == CID and ref.limit_level is None
    ref = paths.pod_ref(task_memcg=f"/machine.slice/libpod-conmon-{CID}.scope", oom_memcg=None)
    assert ref is not None and (ref.container_id, ref.runtime, ref.monitor) == (CID, "podman", True)
    # outside pods the cpuset (the trigger's, not the victim's) names nothing on its own
    cron = "/system.slice/cron.service"
    assert paths.pod_ref(task_memcg=cron, oom_memcg=None, cpuset=f"docker-{CID}.scope") is None
    assert paths.pod_ref(task_memcg=None, oom_memcg=None, cpuset=CID) is None


def test_pod_ref_takes_the_container_only_from_the_pods_own_paths() -> None:
    node = "4" * 64
    pod_path = f"/docker/{node}/kubelet/kubepods/burstable/pod{UID}"
    ref = paths.pod_ref(task_memcg=pod_path, oom_memcg=f"/docker/{node}/kubelet/kubepods/burstable")
    assert ref is not None and (ref.pod_uid, ref.container_id, ref.limit_level) == (UID, None, None)
    ref = paths.pod_ref(task_memcg=f"{pod_path}/{CID}", oom_memcg=f"/docker/{node}/kubelet/kubepods")
    assert ref is not None and (ref.pod_uid, ref.container_id, ref.limit_level) == (UID, CID, None)


def test_the_agent_does_not_match_containers_outside_pods_to_pods() -> None:
    from podmortem.agent import pods

    for name in (f"docker-{CID}.scope", f"libpod-{CID}.scope", f"crio-conmon-{CID}.scope", CID):
        assert pods.pod_uid_in_name(name) is None
    assert pods.pod_uid_in_name(f"kubepods-burstable-pod{SYS_UID}.slice") == UID
