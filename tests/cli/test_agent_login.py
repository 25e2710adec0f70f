"""``podmortem agent`` as a process: logs in like the operator, and says in its log and /readyz when it can't.

The agent samples cgroups without the API, so it keeps running when the API is
unusable; it is not ready, though, since without the pod list it cannot tell
which cgroups belong to watched pods.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli import entrypoints as ep

from podmortem_demo.emulated.tls import Pki, make_pki
from podmortem_demo.harness import NODE, Harness, harness

pytest.importorskip("cryptography")


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Harness]:
    tmp = tmp_path_factory.mktemp("agent-cluster")
    with harness(tmp, pki=pki, tokens={"admin", "agent"}, admin_token="admin") as h:
        yield h


def start_agent(tmp: Path, *args: str, env: dict[str, str] | None = None) -> tuple[ep.Process, int]:
    port = ep.free_port()
    process = ep.start(["agent", "--node-name", NODE, "--cgroup-root", "/sys/fs/cgroup",
                        "--state-dir", str(tmp / "state"), "--kernel-log-source", "off",
                        "--host", "127.0.0.1", "--port", str(port), "--metrics-port", "0", *args],
                       env=env or ep.clean_env(tmp), log=tmp / "agent.log")
    return process, port


def test_kubeconfig_over_tls(cluster: Harness, pki: Pki, tmp_path: Path) -> None:
    config = ep.write_kubeconfig(tmp_path / "k", server=cluster.url, token="agent", ca_pem=pki.ca_pem)
    agent, port = start_agent(tmp_path, "--kubeconfig", str(config))
    try:
        _, body = agent.wait_http(f"http://127.0.0.1:{port}/readyz")
        assert body.strip() == "ready"
    finally:
        assert agent.stop() == 0


def test_in_cluster(cluster: Harness, pki: Pki, tmp_path: Path) -> None:
    account = ep.service_account_dir(tmp_path / "sa", token="agent", pki=pki)
    agent, port = start_agent(tmp_path, env=ep.clean_env(tmp_path, **ep.in_cluster_env(cluster.url, account)))
    try:
        agent.wait_http(f"http://127.0.0.1:{port}/readyz")
    finally:
        agent.stop()


@pytest.mark.parametrize(("content", "message"), [
    ("clusters: [unclosed\n", "not valid YAML at line 2"),
    ("- a list\n", "is not a mapping"),
])
def test_a_kubeconfig_it_cannot_parse_is_logged_and_not_ready(tmp_path: Path, content: str,
                                                              message: str) -> None:
    (tmp_path / "k").write_text(content)
    agent, port = start_agent(tmp_path, "--kubeconfig", str(tmp_path / "k"))
    try:
        _, body = agent.wait_http(f"http://127.0.0.1:{port}/readyz", status=503, contains=message)
        assert body.startswith("not ready: cannot use the API server: ") and "kubeconfig" in body, body
        agent.wait_log(message)
        assert ep.http_get(f"http://127.0.0.1:{port}/healthz")[0] == 200  # it still samples
        assert agent.alive()
    finally:
        agent.stop()


def test_a_refused_token_is_logged_and_not_ready(cluster: Harness, pki: Pki, tmp_path: Path) -> None:
    config = ep.write_kubeconfig(tmp_path / "k", server=cluster.url, token="wrong", ca_pem=pki.ca_pem)
    agent, port = start_agent(tmp_path, "--kubeconfig", str(config))
    try:
        agent.wait_http(f"http://127.0.0.1:{port}/readyz", status=503, contains="401")
        agent.wait_log("401")
        assert agent.alive()
    finally:
        agent.stop()
