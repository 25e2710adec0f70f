"""``podmortem operator``, started as users and pods start it, logs in over TLS, or says why it can't.

The emulated API serves HTTPS with its own CA and accepts only known bearer
tokens (401 otherwise, 403 for resources a test forbids). The operator gets a
kubeconfig, or the service-account files of a pod, and nothing else; the test
sees only /readyz, the log and the objects in the API. Before login went through
``podmortem.kube`` the operator exited with kopf's "Ran out of valid credentials"
while /readyz answered 200.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli import entrypoints as ep
from tests.cli.entrypoints import Process

from podmortem_demo.emulated.tls import Pki, make_pki
from podmortem_demo.harness import Harness, harness

pytest.importorskip("cryptography")

ADMIN_TOKEN = "admin-token"
OPERATOR_TOKEN = "operator-token"


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Harness]:
    tmp = tmp_path_factory.mktemp("tls-cluster")
    with harness(tmp, pki=pki, tokens={ADMIN_TOKEN, OPERATOR_TOKEN}, admin_token=ADMIN_TOKEN) as h:
        h.add_agent_pod()
        yield h


def readyz(env: dict[str, str]) -> str:
    return f"http://127.0.0.1:{env['PODMORTEM_HEALTH_PORT']}/readyz"


@pytest.fixture
def operator() -> Iterator[list[Process]]:
    """Processes started by a test, stopped (SIGTERM) at its end."""
    started: list[Process] = []
    yield started
    for p in started:
        p.stop()


@contextlib.contextmanager
def own_cluster(tmp: Path, pki: Pki, started: list[Process]) -> Iterator[Harness]:
    """A cluster of the test's own, whose operators stop before it does.

    An operator still running when its cluster stops keeps connecting to it; a TLS connection the
    cluster accepted in its last moments is never closed, and its socket's ResourceWarning fails
    whichever later test the garbage collector happens to run in.
    """
    with harness(tmp, pki=pki, tokens={ADMIN_TOKEN, OPERATOR_TOKEN}, admin_token=ADMIN_TOKEN) as h:
        try:
            yield h
        finally:
            for p in started:
                p.stop()


def start_operator(started: list[Process], env: dict[str, str], tmp: Path, *args: str) -> Process:
    p = ep.start(["operator", *args], env=env, log=tmp / f"operator-{len(started)}.log")
    started.append(p)
    return p


def test_kubeconfig_over_tls_with_a_token(cluster: Harness, pki: Pki, tmp_path: Path,
                                          operator: list[Process]) -> None:
    kubeconfig = ep.write_kubeconfig(tmp_path / "kubeconfig", server=cluster.url, token=OPERATOR_TOKEN,
                                     ca_pem=pki.ca_pem)
    assert cluster.url.startswith("https://")
    env = ep.operator_env(cluster, tmp_path)
    p = start_operator(operator, env, tmp_path, "--kubeconfig", str(kubeconfig))
    p.wait_http(readyz(env))
    report = ep.follow_to_report(cluster, "via-kubeconfig")
    assert report["verdict"] == "memcg-limit"
    assert "connected to the API server at https://127.0.0.1" in p.output()
    assert p.stop() == 0


def test_kubeconfig_from_the_environment_variable(cluster: Harness, pki: Pki, tmp_path: Path,
                                                  operator: list[Process]) -> None:
    kubeconfig = ep.write_kubeconfig(tmp_path / "kubeconfig", server=cluster.url, token=OPERATOR_TOKEN,
                                     ca_pem=pki.ca_pem)
    env = ep.operator_env(cluster, tmp_path, KUBECONFIG=str(kubeconfig))
    p = start_operator(operator, env, tmp_path)
    p.wait_http(readyz(env))


def test_in_cluster_service_account_and_token_rotation(cluster: Harness, pki: Pki, tmp_path: Path,
                                                       operator: list[Process]) -> None:
    account = ep.service_account_dir(tmp_path / "sa", token=OPERATOR_TOKEN, pki=pki)
    env = ep.operator_env(cluster, tmp_path, **ep.in_cluster_env(cluster.url, account))
    p = start_operator(operator, env, tmp_path)
    p.wait_http(readyz(env))
    assert "in-cluster service account" in p.output()
    ep.follow_to_report(cluster, "in-cluster")

    # The kubelet rotates the token: the old one stops working, the file holds the new one.
    (account / "token").write_text("rotated-token")
    cluster.sync(lambda: cluster.api.tokens.add("rotated-token"))
    cluster.sync(lambda: cluster.api.tokens.discard(OPERATOR_TOKEN))
    report = ep.follow_to_report(cluster, "after-rotation")
    assert report["verdict"] == "memcg-limit"
    assert p.wait_http(readyz(env))[0] == 200
    cluster.sync(lambda: cluster.api.tokens.add(OPERATOR_TOKEN))


def test_a_wrong_token_is_not_ready_says_why_and_recovers(cluster: Harness, pki: Pki, tmp_path: Path,
                                                          operator: list[Process]) -> None:
    account = ep.service_account_dir(tmp_path / "sa", token="expired-or-wrong", pki=pki)
    env = ep.operator_env(cluster, tmp_path, **ep.in_cluster_env(cluster.url, account))
    p = start_operator(operator, env, tmp_path)
    _, body = p.wait_http(readyz(env), status=503, contains="refused our credentials")
    assert "401" in body
    p.wait_log("API server not usable: the API server refused our credentials")
    assert p.alive(), "the operator keeps retrying; it does not exit"
    (account / "token").write_text(OPERATOR_TOKEN)  # a fixed Secret, or the next rotation
    p.wait_http(readyz(env), timeout=90)


def test_a_ca_that_does_not_match_is_not_ready(cluster: Harness, tmp_path: Path,
                                               operator: list[Process]) -> None:
    other = make_pki()
    kubeconfig = ep.write_kubeconfig(tmp_path / "kubeconfig", server=cluster.url, token=OPERATOR_TOKEN,
                                     ca_pem=other.ca_pem)
    env = ep.operator_env(cluster, tmp_path)
    p = start_operator(operator, env, tmp_path, "--kubeconfig", str(kubeconfig))
    _, body = p.wait_http(readyz(env), status=503, contains="not trusted by the configured CA")
    assert "certificate verify failed" in body
    p.wait_log("is not trusted by the configured CA")
    assert p.alive()


def test_rbac_forbidden_on_a_watched_resource_is_not_ready(cluster: Harness, pki: Pki, tmp_path: Path,
                                                          operator: list[Process]) -> None:
    kubeconfig = ep.write_kubeconfig(tmp_path / "kubeconfig", server=cluster.url, token=OPERATOR_TOKEN,
                                     ca_pem=pki.ca_pem)
    env = ep.operator_env(cluster, tmp_path)
    cluster.sync(lambda: cluster.api.forbidden.add("podmortem.io/v1alpha1/trainingjobs"))
    try:
        p = start_operator(operator, env, tmp_path, "--kubeconfig", str(kubeconfig))
        _, body = p.wait_http(readyz(env), status=503, contains="forbidden")
        assert "trainingjobs.podmortem.io cluster-wide" in body and "RBAC" in body
    finally:
        cluster.sync(lambda: cluster.api.forbidden.clear())
    p.wait_http(readyz(env), timeout=90)


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "--kubeconfig {tmp}/nope: no such file"),
        ("not-yaml", "cannot read kubeconfig"),
        ("not-a-mapping", "is not a mapping"),
        ("nothing", "no Kubernetes credentials: tried --kubeconfig (not given), $KUBECONFIG (not set)"),
    ],
)
def test_unusable_configuration_is_one_line_and_exit_2(tmp_path: Path, setup: str, message: str) -> None:
    import subprocess

    args = ["operator"]
    if setup == "missing":
        args += ["--kubeconfig", str(tmp_path / "nope")]
    elif setup == "not-yaml":
        (tmp_path / "k").write_text("clusters: [unclosed\n")
        args += ["--kubeconfig", str(tmp_path / "k")]
    elif setup == "not-a-mapping":
        (tmp_path / "k").write_text("- just\n- a list\n")
        args += ["--kubeconfig", str(tmp_path / "k")]
    env = ep.clean_env(tmp_path, PODMORTEM_LOG_STORE_DIR=str(tmp_path / "store"),
                       PODMORTEM_HTTP_PORT=str(ep.free_port()), PODMORTEM_METRICS_PORT=str(ep.free_port()),
                       PODMORTEM_HEALTH_PORT=str(ep.free_port()))
    run = subprocess.run([ep.PODMORTEM, *args], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, run.stderr
    assert message.format(tmp=tmp_path) in lines[0]
    assert "Traceback" not in run.stderr


EXEC_PLUGIN = """#!{python}
import json
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {{"token": "{token}"}}}}))
"""


def kubeconfig_form(form: str, tmp: Path, *, url: str, pki: Pki) -> Path:
    """A kubeconfig of one of the forms users have, all reaching the same emulated API."""
    import base64
    import os
    import sys

    import yaml

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    cluster: dict[str, object] = {"server": url, "certificate-authority-data": b64(pki.ca_pem)}
    user: dict[str, object] = {"token": OPERATOR_TOKEN}
    if form == "exec-plugin":
        plugin = tmp / "credential-plugin"
        plugin.write_text(EXEC_PLUGIN.format(python=sys.executable, token=OPERATOR_TOKEN))
        os.chmod(plugin, 0o755)
        user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
                         "interactiveMode": "Never"}}
    elif form == "client-certificate":
        user = {"client-certificate-data": b64(pki.client_pem), "client-key-data": b64(pki.client_key)}
    elif form == "tls-server-name":
        # The server certificate names only kube.test; the URL is an address.
        cluster["tls-server-name"] = "kube.test"
    elif form == "insecure-skip-tls-verify":
        cluster = {"server": url, "insecure-skip-tls-verify": True}
    elif form == "token-file":
        (tmp / "token").write_text(OPERATOR_TOKEN + "\n")
        user = {"tokenFile": "token"}
    path = tmp / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": cluster}], "users": [{"name": "c", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "c"}}],
    }))
    return path


@pytest.mark.parametrize("form", ["exec-plugin", "client-certificate", "tls-server-name",
                                  "insecure-skip-tls-verify", "token-file"])
def test_kubeconfig_forms(tmp_path: Path, form: str, operator: list[Process]) -> None:
    """Each form logs in (kopf's watches and our own calls alike): the TrainingJob's pod is created."""
    names = ("kube.test",) if form == "tls-server-name" else ("kube.test", "127.0.0.1")
    pki = make_pki(server_names=names)
    with own_cluster(tmp_path / "cluster", pki, operator) as h:
        kubeconfig = kubeconfig_form(form, tmp_path, url=h.url, pki=pki)
        env = ep.operator_env(h, tmp_path)
        p = start_operator(operator, env, tmp_path, "--kubeconfig", str(kubeconfig))
        p.wait_http(readyz(env))
        h.create(ep.TJ_PATH, {
            "apiVersion": "podmortem.io/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "forms", "namespace": "default"},
            "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "x"}]}}},
        })
        h.wait(lambda: h.get("/api/v1/namespaces/default/pods/forms-train"), what="the pod", timeout=60)
        assert p.stop() == 0


def test_without_tls_server_name_the_address_does_not_match_the_certificate(
        tmp_path: Path, operator: list[Process]) -> None:
    """The counter-test of the tls-server-name form: the same certificate, no tls-server-name."""
    pki = make_pki(server_names=("kube.test",))
    with own_cluster(tmp_path / "cluster", pki, operator) as h:
        kubeconfig = ep.write_kubeconfig(tmp_path / "k", server=h.url, token=OPERATOR_TOKEN,
                                         ca_pem=pki.ca_pem)
        env = ep.operator_env(h, tmp_path)
        p = start_operator(operator, env, tmp_path, "--kubeconfig", str(kubeconfig))
        p.wait_http(readyz(env), status=503, contains="set tls-server-name")
