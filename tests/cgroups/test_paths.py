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
