"""The lean kubeconfig loader: where the API is, and each way a kubeconfig authenticates.

TLS is checked for real: an aiohttp server with its own CA that requires a client
certificate, reached through ``pod_log_api.SessionTransport`` as the CLI reaches the API.
"""

from __future__ import annotations

import base64
import dataclasses
import ssl
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web

from podmortem.kube import config as kubeconfig
from podmortem.logs.following import pod_log_api
from podmortem.logs.settings import FollowSettings

pytest.importorskip("cryptography")
from podmortem_demo.emulated.tls import Pki, make_pki


def config(path: Path, *, cluster: Mapping[str, object], user: Mapping[str, object],
           namespace: str | None = "team", name: str = "c") -> Path:
    context: dict[str, object] = {"cluster": name, "user": name}
    if namespace:
        context["namespace"] = namespace
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": context}],
    }))
    return path


def test_token_and_namespace(tmp_path: Path) -> None:
    access = kubeconfig.load(config(tmp_path / "k", cluster={"server": "http://api:8080/"},
                                    user={"token": "abc"}))
    assert access.server == "http://api:8080"
    assert access.namespace == "team"
    assert access.headers()["Authorization"] == "Bearer abc"
    assert access.ssl_context is None and not access.plugin


def test_token_file_is_reread_when_it_rotates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    access = kubeconfig.load(config(tmp_path / "k", cluster={"server": "http://api"},
                                    user={"tokenFile": "token"}))  # relative to the kubeconfig
    assert access.headers()["Authorization"] == "Bearer one"
    reads = []
    real_read = Path.read_text
    monkeypatch.setattr(Path, "read_text",
                        lambda self, *a, **k: reads.append(self) or real_read(self, *a, **k))
    assert access.headers()["Authorization"] == "Bearer one"
    assert reads == []  # not re-read on every request
    # The kubelet's rotation: a new file swapped in (a new inode), as a projected volume does it.
    (tmp_path / "token.new").write_text("two")
    (tmp_path / "token.new").replace(token)
    assert access.headers()["Authorization"] == "Bearer two"
    monkeypatch.setattr(kubeconfig, "TOKEN_REREAD_S", 0.0)
    assert access.headers()["Authorization"] == "Bearer two"
    assert len(reads) == 2  # and, when due, read again even if unchanged


def test_basic_auth(tmp_path: Path) -> None:
    access = kubeconfig.load(config(tmp_path / "k", cluster={"server": "http://api"},
                                    user={"username": "u", "password": "p:w"}))
    assert access.headers()["Authorization"] == "Basic " + base64.b64encode(b"u:p:w").decode()


def test_plugins_are_left_to_kubernetes_asyncio(tmp_path: Path) -> None:
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "aws"}}
    access = kubeconfig.load(config(tmp_path / "k", cluster={"server": "https://eks"}, user=user))
    assert access.plugin and access.config_files == (tmp_path / "k",)


def test_order_flag_then_env_then_in_cluster_then_home(tmp_path: Path) -> None:
    flag = config(tmp_path / "flag", cluster={"server": "http://flag"}, user={})
    env = config(tmp_path / "env", cluster={"server": "http://env"}, user={})
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    config(home / ".kube" / "config", cluster={"server": "http://home"}, user={})
    account = tmp_path / "sa"
    account.mkdir()
    (account / "token").write_text("sa-token")
    (account / "ca.crt").write_text(make_pki().ca_pem.decode())
    (account / "namespace").write_text("ops\n")
    cluster_env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert kubeconfig.load(flag, environ={"KUBECONFIG": str(env)}).server == "http://flag"
    assert kubeconfig.load(None, environ={"KUBECONFIG": str(env), **cluster_env}).server == "http://env"
    in_cluster = kubeconfig.in_cluster(cluster_env, account_dir=account)
    assert (in_cluster.server, in_cluster.namespace) == ("https://10.0.0.1:443", "ops")
    assert in_cluster.headers()["Authorization"] == "Bearer sa-token"
    assert kubeconfig.load(None, environ={}, home=home).server == "http://home"
    with pytest.raises(kubeconfig.KubeconfigError, match="no Kubernetes credentials: tried --kubeconfig"):
        kubeconfig.load(None, environ={}, home=tmp_path / "nobody")


def test_kubeconfig_list_merges_first_wins(tmp_path: Path) -> None:
    first = tmp_path / "a"
    first.write_text(yaml.safe_dump({"current-context": "x", "clusters": [
        {"name": "x", "cluster": {"server": "http://first"}}]}))
    second = config(tmp_path / "b", cluster={"server": "http://second"}, user={"token": "t"}, name="x")
    access = kubeconfig.load(None, environ={"KUBECONFIG": f"{first}:{tmp_path / 'absent'}:{second}"})
    assert access.server == "http://first"  # the first file defining cluster "x" wins
    assert access.headers()["Authorization"] == "Bearer t"  # the user comes from the second


@pytest.mark.parametrize("content, message", [
    ("not: [yaml", r"cannot read kubeconfig .*: not valid YAML at line 2, column 1"),
    ("- a\n- list\n", "is not a mapping"),
    ("", "no current-context"),
    ("current-context: nope\n", "context 'nope' is not defined"),
    ("clusters: {a: 1}\n", "clusters is not a list"),
    ("clusters: [{name: c, cluster: text}]\n", "clusters entry 'c' has no cluster mapping"),
    ("current-context: c\ncontexts: [{name: c, context: {cluster: x}}]\n", "cluster 'x' is not defined"),
])
def test_bad_kubeconfigs_say_what_is_wrong(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "k"
    path.write_text(content)
    with pytest.raises(kubeconfig.KubeconfigError, match=message) as caught:
        kubeconfig.load(path)
    assert "\n" not in str(caught.value)  # one line, for a one-line error at start


# -- TLS for real -----------------------------------------------------------------------------------


@pytest.fixture
async def tls_server(tmp_path: Path) -> AsyncIterator[tuple[str, Pki]]:
    pki = make_pki()
    (tmp_path / "server.pem").write_bytes(pki.server_pem)
    (tmp_path / "server.key").write_bytes(pki.server_key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cadata=pki.ca_pem.decode())
    context.load_cert_chain(tmp_path / "server.pem", tmp_path / "server.key")
    context.verify_mode = ssl.CERT_REQUIRED  # the client must present a certificate from our CA

    async def pod(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(x[0] for x in peer["subject"]) if peer else {}
        return web.json_response({"metadata": {"name": request.match_info["name"]},
                                  "client": subject.get("commonName")})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{ns}/pods/{name}", pod)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"https://127.0.0.1:{port}", pki
    finally:
        await runner.cleanup()


async def test_client_certificate_over_verified_tls(tls_server: tuple[str, Pki],
                                                    tmp_path: Path) -> None:
    url, pki = tls_server
    b64 = {k: base64.b64encode(v).decode() for k, v in dataclasses.asdict(pki).items()}
    access = kubeconfig.load(config(
        tmp_path / "k",
        cluster={"server": url, "certificate-authority-data": b64["ca_pem"], "tls-server-name": "kube.test"},
        user={"client-certificate-data": b64["client_pem"], "client-key-data": b64["client_key"]}))
    async with pod_log_api.SessionTransport(access) as transport:
        api = pod_log_api.PodLogApi(transport, settings=FollowSettings())
        pod = await api.read_pod(namespace="default", name="p")
    assert pod == {"metadata": {"name": "p"}, "client": "alice"}


async def test_wrong_ca_is_refused_and_insecure_skips_verification(
    tls_server: tuple[str, Pki], tmp_path: Path,
) -> None:
    url, pki = tls_server
    other = make_pki()
    (tmp_path / "client.pem").write_bytes(pki.client_pem)
    (tmp_path / "client.key").write_bytes(pki.client_key)
    (tmp_path / "other-ca.pem").write_bytes(other.ca_pem)
    user = {"client-certificate": "client.pem", "client-key": "client.key"}  # files, relative paths
    wrong = kubeconfig.load(config(tmp_path / "wrong", user=user, cluster={
        "server": url, "certificate-authority": "other-ca.pem", "tls-server-name": "kube.test"}))
    async with pod_log_api.SessionTransport(wrong) as transport:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await transport.get("/api/v1/namespaces/default/pods/p", query=[],
                                client_timeout=aiohttp.ClientTimeout(total=10))
    insecure = kubeconfig.load(config(tmp_path / "insecure", user=user,
                                      cluster={"server": url, "insecure-skip-tls-verify": True}))
    async with pod_log_api.SessionTransport(insecure) as transport:
        api = pod_log_api.PodLogApi(transport, settings=FollowSettings())
        pod = await api.read_pod(namespace="d", name="q")
    assert pod["client"] == "alice"
