"""The control plane under the other tests is the real one, as pinned, and set up as a managed cluster.

If these fail, every other test in this folder would be testing something else than it claims.
"""

from __future__ import annotations

import json
import subprocess
import time

from tests.controlplane.cluster import ControlPlane, cri_line, versions


def test_the_servers_are_the_pinned_releases(control_plane: ControlPlane) -> None:
    reported = json.loads(control_plane.kubectl("version", "-o", "json"))
    assert reported["serverVersion"]["gitVersion"] == versions()["KUBERNETES_VERSION"]
    assert reported["clientVersion"]["gitVersion"] == versions()["KUBERNETES_VERSION"]
    etcd = control_plane.run("etcdctl", "version").stdout
    assert versions()["ETCD_VERSION"].lstrip("v") in etcd


def test_rbac_and_admission_are_a_managed_clusters(control_plane: ControlPlane, namespace: str) -> None:
    """RBAC refuses a ServiceAccount with no role; PodSecurity rejects a privileged pod where enforced."""
    control_plane.kubectl("create", "serviceaccount", "nobody", "-n", namespace)
    denied = control_plane.run("kubectl", "auth", "can-i", "list", "pods", "-n", namespace,
                               f"--as=system:serviceaccount:{namespace}:nobody", check=False)
    assert denied.stdout.strip() == "no"
    control_plane.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    refused = control_plane.run("kubectl", "run", "priv", "-n", namespace, "--image=busybox",
                                "--privileged", check=False)
    assert refused.returncode != 0 and "violates PodSecurity" in refused.stderr, refused.stderr


def test_pod_logs_go_through_the_api_servers_proxy_to_kwok(control_plane: ControlPlane,
                                                           namespace: str) -> None:
    control_plane.apply({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": "talker", "namespace": namespace},
                         "spec": {"containers": [{"name": "main", "image": "busybox"}]}})
    control_plane.serve_logs(namespace, "talker", ["main"])
    log = control_plane.pod_log_file(namespace, "talker", "main")
    log.write_text(cri_line("first") + cri_line("second"))
    control_plane.wait(lambda: (control_plane.get(f"/api/v1/namespaces/{namespace}/pods/talker") or {})
                       .get("status", {}).get("phase") == "Running" or None, what="the pod Running")
    with subprocess.Popen([str(control_plane.bin / "kubectl"), "logs", "-f", "talker", "-n", namespace],
                          env=control_plane.env(), stdout=subprocess.PIPE, text=True) as follow:
        assert follow.stdout is not None
        assert follow.stdout.readline() == "first\n"
        assert follow.stdout.readline() == "second\n"
        with log.open("a") as out:
            out.write(cri_line("third, written while followed"))
        assert follow.stdout.readline() == "third, written while followed\n"
        follow.terminate()


def test_etcd_compaction_makes_an_old_resource_version_gone(control_plane: ControlPlane,
                                                            namespace: str) -> None:
    """What the pod watch's 410 tests rely on: after a compaction, an older revision is 410 Gone.

    The watch cache still answers from its own window after a compaction (kube-apiserver keeps
    snapshots); once the API server restarts, its cache starts at the current revision, and an older
    one must be read from etcd, which has compacted it.
    """
    first = control_plane.get(f"/api/v1/namespaces/{namespace}/configmaps")
    assert first is not None
    old = first["metadata"]["resourceVersion"]
    for i in range(3):
        control_plane.kubectl("create", "configmap", f"c{i}", "-n", namespace)
    control_plane.compact_etcd()
    control_plane.restart("kube-apiserver")
    deadline = time.monotonic() + 30
    status = 0
    while time.monotonic() < deadline:
        status, _ = control_plane.request(
            "GET", f"/api/v1/namespaces/{namespace}/configmaps?resourceVersion={old}"
                   "&resourceVersionMatch=Exact&limit=1")
        if status == 410:
            break
        time.sleep(0.5)
    assert status == 410
