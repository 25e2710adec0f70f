"""``podmortem logs`` as a user runs it (a process, a kubeconfig) against the real control plane.

The stored-copy path end to end: the chart is installed with the real helm and its operator runs here
as a process, with the chart's auth (TokenReview, SubjectAccessReview against the real RBAC); it follows
a TrainingJob's pod (kwok serves the lines through the API server's log proxy) into its store. The pod
is then deleted, and ``podmortem logs POD`` reads the operator's copy: it finds the chart's Service,
opens ``pods/portforward`` to the operator's pod through the real API server (kwok plays that pod's
kubelet and forwards the port to the local operator process: :meth:`ControlPlane.forward_port`) and
asks with the ServiceAccount's own token, so the log server's access check decides.

Also ``-l`` over live pods, and the kubectl plugin run by the real ``kubectl``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.chart import _render
from tests.controlplane import _operator
from tests.controlplane import test_log_auth_real as auth_real
from tests.controlplane.cluster import ControlPlane, cri_line

LINES = auth_real.LINES
PODMORTEM = str(Path(sys.executable).with_name("podmortem"))


@dataclass
class Stored:
    plane: ControlPlane
    release: _operator.Release
    namespace: str
    pod: str
    service: str
    tmp: Path


def run_cli(argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 120
            ) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")}
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env={**base, **(env or {})}, stdin=subprocess.DEVNULL)


def grant(plane: ControlPlane, *, namespace: str, account_ns: str, account: str, name: str,
          rules: list[dict[str, Any]]) -> None:
    plane.apply(
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": name, "namespace": namespace}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": name, "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account_ns}]},
    )


#: What a reader of the stored copy needs in the operator's namespace (docs/logs.md): find the Service
#: and its pod, and open a port-forward to it (create: a WebSocket upgrade is authorized as create too).
OPERATOR_ACCESS = [
    {"apiGroups": [""], "resources": ["services", "pods"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods/portforward"], "verbs": ["get", "create"]},
]


def reader_kubeconfig(stored: Stored, name: str, *, logs: bool, portforward: bool = True) -> Path:
    """A kubeconfig with the token of a new ServiceAccount ``name`` of the pod's namespace, allowed to
    read pods there, ``get pods/log`` (``logs``) and the operator's namespace's :data:`OPERATOR_ACCESS`
    (``portforward``)."""
    plane = stored.plane
    plane.run("kubectl", "create", "serviceaccount", name, "-n", stored.namespace, check=False)
    grant(plane, namespace=stored.namespace, account_ns=stored.namespace, account=name, name=f"{name}-logs",
          rules=[{"apiGroups": [""], "resources": ["pods", "pods/log"] if logs else ["pods"],
                  "verbs": ["get", "list"]}])
    if portforward:
        grant(plane, namespace=stored.release.namespace, account_ns=stored.namespace, account=name,
              name=f"{name}-operator", rules=OPERATOR_ACCESS)
    return plane.service_account_kubeconfig(stored.tmp / f"{name}.kubeconfig", namespace=stored.namespace,
                                            name=name)


def operator_pod(plane: ControlPlane, release: _operator.Release) -> dict[str, Any]:
    """The pod the operator Deployment made (kwok runs it: Running and Ready, no process behind it)."""
    workload = release.rendered.one("Deployment", "operator")
    labels = workload["spec"]["selector"]["matchLabels"]
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))

    def probe() -> dict[str, Any] | None:
        body = plane.get(f"/api/v1/namespaces/{release.namespace}/pods?labelSelector={selector}") or {}
        running = [p for p in body.get("items", []) if p.get("status", {}).get("phase") == "Running"]
        return running[0] if running else None

    return plane.wait(probe, what="the operator Deployment's pod Running", timeout=120)


@pytest.fixture(scope="module")
def stored(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stored]:
    """A TrainingJob's pod whose log the operator stored, then deleted."""
    tmp = tmp_path_factory.mktemp("logs-cli-real")
    suffix = uuid.uuid4().hex[:5]
    team, release_ns = f"team-{suffix}", f"podmortem-{suffix}"
    control_plane.create_namespace(team)
    values = _render.scenario_values(auth_real.SCENARIO)
    values["operator"] = {**values["operator"], **_operator.free_ports()}
    values["watchNamespaces"] = [team]
    try:
        with _operator.installed(control_plane, tmp, name=_operator.release_name("cli"),
                                 namespace=release_ns, values=values) as release, \
                _operator.operator(control_plane, release, tmp) as (process, pod):
            port = int(pod.env["PODMORTEM_HTTP_PORT"])
            # The operator pod's kubelet (kwok) forwards its log port to the process started here.
            control_plane.forward_port(release_ns, operator_pod(control_plane, release)["metadata"]["name"],
                                       port, to=("127.0.0.1", port))
            name = auth_real.follow_a_trainingjob(control_plane, team)
            setup = auth_real.Setup(control_plane, release, {team: name}, team, team,
                                    f"http://127.0.0.1:{port}", tmp)
            auth_real.wait_stored(setup, team, process)
            control_plane.kubectl("delete", "pod", name, "-n", team, "--wait=true", "--timeout=60s")
            control_plane.wait(lambda: True if control_plane.get(
                f"/api/v1/namespaces/{team}/pods/{name}") is None else None, what=f"{name} gone")
            service = release.rendered.one("Service", "operator")["metadata"]["name"]
            yield Stored(control_plane, release, team, name, service, tmp)
    finally:
        control_plane.run("kubectl", "delete", "namespace", team, "--wait=false", check=False)


def logs_argv(stored: Stored, kubeconfig: Path, *extra: str) -> list[str]:
    return [PODMORTEM, "logs", stored.pod, "-n", stored.namespace, "--kubeconfig", str(kubeconfig),
            "--operator-namespace", stored.release.namespace, *extra]


def test_a_deleted_pods_log_is_read_from_the_operators_copy_with_the_users_token(stored: Stored) -> None:
    kubeconfig = reader_kubeconfig(stored, f"reader-{uuid.uuid4().hex[:4]}", logs=True)
    got = run_cli(logs_argv(stored, kubeconfig))
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == list(LINES), got
    notes = got.stderr.splitlines()
    assert notes[0] == (f"podmortem: pod {stored.namespace}/{stored.pod} is gone: reading the operator's "
                        f"stored copy ({stored.release.namespace}/{stored.service})"), got.stderr
    assert all(n.startswith("podmortem: ") for n in notes), got.stderr  # the store's own lines are notes
    # kubectl's flags go to the store as its own parameters.
    got = run_cli(logs_argv(stored, kubeconfig, "--tail", "1", "--timestamps"))
    assert got.returncode == 0, got.stderr
    (line,) = got.stdout.splitlines()
    assert line.endswith(" " + LINES[-1]) and line[:4].isdigit(), got.stdout


def test_a_reader_without_pods_log_in_that_namespace_is_refused(stored: Stored) -> None:
    """Allowed to reach the operator, not to read the namespace's logs: the log server's 403, one line."""
    kubeconfig = reader_kubeconfig(stored, f"nolog-{uuid.uuid4().hex[:4]}", logs=False)
    got = run_cli(logs_argv(stored, kubeconfig))
    assert got.returncode == 1, got
    assert got.stdout == ""
    (line,) = got.stderr.splitlines()
    assert line.startswith(f"podmortem logs: error: pod {stored.namespace}/{stored.pod} not found; the "
                           "operator's stored copy cannot be read:"), line
    assert f"not allowed to read logs in namespace {stored.namespace}" in line, line
    assert 'cannot get resource "pods/log"' in line, line


def test_a_reader_who_may_not_read_pods_is_told_so(stored: Stored) -> None:
    name = f"nopods-{uuid.uuid4().hex[:4]}"
    stored.plane.run("kubectl", "create", "serviceaccount", name, "-n", stored.namespace, check=False)
    kubeconfig = stored.plane.service_account_kubeconfig(stored.tmp / f"{name}.kubeconfig",
                                                         namespace=stored.namespace, name=name)
    got = run_cli(logs_argv(stored, kubeconfig))
    assert got.returncode == 1, got
    (line,) = got.stderr.splitlines()
    assert line.startswith(f"podmortem logs: error: reading pod {stored.namespace}/{stored.pod}: "
                           "HTTP 403: "), line


def test_a_reader_who_may_not_port_forward_is_told_what_is_missing(stored: Stored) -> None:
    name = f"nopf-{uuid.uuid4().hex[:4]}"
    kubeconfig = reader_kubeconfig(stored, name, logs=True, portforward=False)
    grant(stored.plane, namespace=stored.release.namespace, account_ns=stored.namespace, account=name,
          name=f"{name}-find", rules=OPERATOR_ACCESS[:1])
    got = run_cli(logs_argv(stored, kubeconfig))
    assert got.returncode == 1, got
    (line,) = got.stderr.splitlines()
    assert "HTTP 403" in line and "pods/portforward" in line, line


def test_no_operator_in_the_namespace_given(stored: Stored) -> None:
    name = f"lost-{uuid.uuid4().hex[:4]}"
    kubeconfig = reader_kubeconfig(stored, name, logs=True)
    grant(stored.plane, namespace=stored.namespace, account_ns=stored.namespace, account=name,
          name=f"{name}-find", rules=OPERATOR_ACCESS[:1])
    argv = logs_argv(stored, kubeconfig)
    argv[argv.index("--operator-namespace") + 1] = stored.namespace
    got = run_cli(argv)
    assert got.returncode == 1, got
    (line,) = got.stderr.splitlines()
    assert "no podmortem operator found: no Service labelled app.kubernetes.io/part-of=podmortem," in line
    assert f"in namespace {stored.namespace}" in line, line


def test_as_a_kubectl_plugin(stored: Stored) -> None:
    """``kubectl podmortem logs ...``: the real kubectl finds ``kubectl-podmortem`` on PATH and runs it
    with the rest of the command line and its environment (KUBECONFIG)."""
    kubeconfig = reader_kubeconfig(stored, f"plugin-{uuid.uuid4().hex[:4]}", logs=True)
    path = os.pathsep.join((str(Path(sys.executable).parent), str(stored.plane.bin), os.environ["PATH"]))
    got = run_cli([str(stored.plane.bin / "kubectl"), "plugin", "list"], env={"PATH": path})
    assert "kubectl-podmortem" in got.stdout, got
    got = run_cli([str(stored.plane.bin / "kubectl"), "podmortem", "logs", stored.pod, "-n", stored.namespace,
                   "--operator-namespace", stored.release.namespace],
                  env={"PATH": path, "KUBECONFIG": str(kubeconfig)})
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == list(LINES), got
    got = run_cli([str(stored.plane.bin / "kubectl"), "podmortem", "logs", "--bogus-flag"],
                  env={"PATH": path, "KUBECONFIG": str(kubeconfig)})
    assert got.returncode == 2
    assert got.stderr.startswith("usage: kubectl podmortem logs "), got.stderr
    got = run_cli([str(stored.plane.bin / "kubectl"), "podmortem", "diagnose", "--example", "k3s-stress"],
                  env={"PATH": path})
    assert got.returncode == 0 and "OOM" in got.stdout, got


def test_selector_prints_each_matching_pod_prefixed(control_plane: ControlPlane, namespace: str,
                                                    tmp_path: Path) -> None:
    """``-l``: the live pods the selector matches, each line as stern prints it (``pod container``),
    kubectl's default of the last 10 lines each; a pod the selector leaves out is not printed."""
    pods = {"sel-a": "app=train", "sel-b": "app=train", "sel-c": "app=other"}
    for pod, label in pods.items():
        control_plane.serve_logs(namespace, pod, ["trainer"])
        control_plane.pod_log_file(namespace, pod, "trainer").write_text(
            "".join(cri_line(f"{pod} line {i}") for i in range(15)))
        key, _, value = label.partition("=")
        control_plane.apply({"apiVersion": "v1", "kind": "Pod",
                             "metadata": {"name": pod, "namespace": namespace, "labels": {key: value}},
                             "spec": {"containers": [{"name": "trainer", "image": "pointgroup:1"}]}})
    for pod in pods:
        auth_real.pod_running(control_plane, namespace, pod)
    got = run_cli([PODMORTEM, "logs", "-l", "app=train", "-n", namespace,
                   "--kubeconfig", str(control_plane.admin_kubeconfig)])
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    for pod in ("sel-a", "sel-b"):
        assert [x for x in lines if x.startswith(f"{pod} trainer ")] == [
            f"{pod} trainer {pod} line {i}" for i in range(5, 15)], got.stdout
    assert len(lines) == 20, got.stdout
    # The same through an exec credential plugin (kubernetes_asyncio's client lists the pods).
    control_plane.kubectl("create", "serviceaccount", "sel-reader", "-n", namespace)
    grant(control_plane, namespace=namespace, account_ns=namespace, account="sel-reader", name="sel-reader",
          rules=[{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]}])
    plugin_config = exec_kubeconfig(control_plane.service_account_kubeconfig(
        tmp_path / "sel.kubeconfig", namespace=namespace, name="sel-reader"), tmp_path / "sel")
    got = run_cli([PODMORTEM, "logs", "-l", "app=train", "-n", namespace, "--kubeconfig", str(plugin_config)])
    assert got.returncode == 0, got.stderr
    assert sorted(got.stdout.splitlines()) == sorted(lines)
    got = run_cli([PODMORTEM, "logs", "-l", "app=none", "-n", namespace,
                   "--kubeconfig", str(control_plane.admin_kubeconfig)])
    assert got.returncode == 0 and got.stdout == "", got
    assert got.stderr.strip() == f"podmortem: No resources found in {namespace} namespace.", got.stderr


EXEC_PLUGIN = """#!{python}
import json
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {{"token": {token!r}}}}}))
"""


def exec_kubeconfig(token_kubeconfig: Path, base: Path) -> Path:
    """``token_kubeconfig`` with its user's token handed out by an ``exec`` credential plugin instead."""
    import yaml

    config = yaml.safe_load(token_kubeconfig.read_text())
    plugin = base.with_name(base.name + "-plugin")
    plugin.write_text(EXEC_PLUGIN.format(python=sys.executable, token=config["users"][0]["user"]["token"]))
    plugin.chmod(0o755)
    config["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                           "command": str(plugin), "interactiveMode": "Never"}}
    path = base.with_name(base.name + "-exec.kubeconfig")
    path.write_text(yaml.safe_dump(config))
    return path


def test_an_exec_plugin_kubeconfig_reads_the_stored_copy_with_the_plugins_token(stored: Stored) -> None:
    """A kubeconfig whose user is an ``exec`` credential plugin (as EKS and GKE hand out): its token is
    what the port-forward and the log server are given."""
    name = f"execp-{uuid.uuid4().hex[:4]}"
    kubeconfig = exec_kubeconfig(reader_kubeconfig(stored, name, logs=True), stored.tmp / name)
    got = run_cli(logs_argv(stored, kubeconfig))
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == list(LINES), got
