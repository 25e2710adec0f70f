from __future__ import annotations

from pathlib import Path

import pytest
from tests.agent import trees

from podmortem.agent import pods
from podmortem.cgroups import cgroupfs

UID2 = "0b7c1e4e-1111-2222-3333-444455556666"


@pytest.mark.parametrize(
    "name",
    [
        f"pod{trees.POD_UID}",
        f"kubepods-burstable-pod{trees.POD_UID.replace('-', '_')}.slice",
        f"kubepods-pod{trees.POD_UID.replace('-', '_')}.slice",
    ],
)
def test_pod_uid_in_kubelet_names(name: str) -> None:
    assert pods.pod_uid_in_name(name) == trees.POD_UID


@pytest.mark.parametrize(
    "name",
    [
        "kubepods",
        "kubepods-burstable.slice",
        "podmortem-test-abc",
        "pod1234",
        trees.CONTAINER_ID,
        f"cri-containerd-{trees.CONTAINER_ID}.scope",
    ],
)
def test_non_pod_names(name: str) -> None:
    assert pods.pod_uid_in_name(name) is None


def test_find_pod_cgroups_v1_both_drivers_and_kind(tmp_path: Path) -> None:
    trees.make_v1_root(tmp_path)
    trees.make_v1_cgroup(tmp_path, trees.cgroupfs_container())
    trees.make_v1_cgroup(tmp_path, trees.systemd_container(uid=UID2))
    kind_uid = "99999999-8888-7777-6666-555555555555"
    trees.make_v1_cgroup(tmp_path, f"/docker/{'f' * 64}/kubelet/kubepods/burstable/pod{kind_uid}/{'c' * 64}")
    trees.make_v1_cgroup(tmp_path, "/system.slice/containerd.service")
    found = pods.find_pod_cgroups(cgroupfs.detect(tmp_path))
    assert found == {
        trees.POD_UID: trees.cgroupfs_pod(),
        UID2: trees.systemd_pod(uid=UID2),
        kind_uid: f"/docker/{'f' * 64}/kubelet/kubepods/burstable/pod{kind_uid}",
    }


def test_find_pod_cgroups_v2_guaranteed_systemd(tmp_path: Path) -> None:
    trees.make_v2_root(tmp_path)
    path = f"/kubepods.slice/kubepods-pod{trees.POD_UID.replace('-', '_')}.slice"
    trees.make_v2_cgroup(tmp_path, path + "/cri-containerd-abc.scope")
    assert pods.find_pod_cgroups(cgroupfs.detect(tmp_path)) == {trees.POD_UID: path}


def _pod(
    annotations: dict[str, str] | None = None, owners: list[dict[str, str]] | None = None
) -> dict[str, object]:
    return {"metadata": {"uid": "u", "annotations": annotations, "ownerReferences": owners}}


def test_watched_by_annotation_or_training_job_owner() -> None:
    w = "podmortem.io/watch"
    assert pods.is_watched(_pod({w: "true"}), watch_annotation=w)
    assert pods.is_watched(_pod({w: "True "}), watch_annotation=w)
    assert not pods.is_watched(_pod({w: "false"}), watch_annotation=w)
    assert not pods.is_watched(_pod(), watch_annotation=w)
    tj = {"kind": "TrainingJob", "apiVersion": "podmortem.io/v1alpha1", "name": "j", "uid": "x"}
    assert pods.is_watched(_pod(owners=[tj]), watch_annotation=w)
    other = {"kind": "TrainingJob", "apiVersion": "example.com/v1", "name": "j", "uid": "x"}
    assert not pods.is_watched(_pod(owners=[other]), watch_annotation=w)
    assert not pods.is_watched(
        _pod(owners=[{"kind": "ReplicaSet", "apiVersion": "apps/v1"}]), watch_annotation=w
    )


async def test_static_pods() -> None:
    source = pods.StaticPods({"u1": "/a/b"})
    assert await source.current() == {"u1": pods.WatchedPod(uid="u1", name="u1", cgroup_path="/a/b")}
