"""``podmortem operator`` stops within the chart's grace period with followers and readers open.

Started as a process against the emulated API; stopped with SIGTERM as the kubelet stops a
pod. A following reader gets the server's stopping marker, a silent client holds nothing up,
and the process exits in under 10 s (the chart gives it 30). The cursors it persisted let the
next operator resume: the stored log holds every line once.
"""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.cli import entrypoints as ep
from tests.cli.entrypoints import Process

from podmortem.logs.serving.http import STOPPING_MARKER
from podmortem_demo.emulated.tls import Pki, make_pki
from podmortem_demo.harness import Harness, harness, run_pod

pytest.importorskip("cryptography")

TOKEN = "operator-token"
TJ = ep.TJ_PATH


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Harness]:
    with harness(tmp_path_factory.mktemp("shutdown"), pki=pki, tokens={TOKEN, "admin"},
                 admin_token="admin") as h:
        h.add_agent_pod()
        yield h


def test_sigterm_with_a_follower_and_open_readers_exits_within_the_grace_period(
    cluster: Harness, pki: Pki, tmp_path: Path
) -> None:
    kubeconfig = ep.write_kubeconfig(tmp_path / "kubeconfig", server=cluster.url, token=TOKEN,
                                     ca_pem=pki.ca_pem)
    env = ep.operator_env(cluster, tmp_path)
    log_port = int(env["PODMORTEM_HTTP_PORT"])
    first = start(env, tmp_path, kubeconfig, "first")
    try:
        first.wait_http(f"http://127.0.0.1:{env['PODMORTEM_HEALTH_PORT']}/readyz")
        cluster.create(TJ, {
            "apiVersion": "podmortem.io/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "stopper", "namespace": "default"},
            "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "pointgroup:1"}]}}},
        })
        cluster.wait(lambda: cluster.get("/api/v1/namespaces/default/pods/stopper-train"), what="the pod",
                     timeout=60)
        run_pod(cluster, name="stopper-train")
        container = cluster.sync(lambda: cluster.api.pods["default", "stopper-train"]).containers["trainer"]
        cluster.sync(lambda: container.write(300))
        stored = first.wait_http(f"http://127.0.0.1:{log_port}/logs/default/stopper-train", contains="\n")[1]
        deadline = time.monotonic() + 30
        while stored.count("\n") < 300 and time.monotonic() < deadline:
            time.sleep(0.2)
            stored = ep.http_get(f"http://127.0.0.1:{log_port}/logs/default/stopper-train")[1]
        assert stored.count("\n") == 300

        reader = http.client.HTTPConnection("127.0.0.1", log_port, timeout=20)
        reader.request("GET", "/logs/default/stopper-train?follow=true&tail=1")
        response = reader.getresponse()
        assert response.status == 200
        assert response.readline().endswith(b"\n")  # the last stored line; now it waits for more
        silent = socket.create_connection(("127.0.0.1", log_port))  # connects, sends nothing

        started = time.monotonic()
        first.proc.terminate()
        code = first.proc.wait(30)
        took = time.monotonic() - started
        assert code == 0, first.output()[-3000:]
        assert took < 10, f"stopped in {took:.1f} s\n{first.output()[-3000:]}"
        assert response.read() == STOPPING_MARKER
        silent.close()
        reader.close()
    finally:
        first.stop()

    # The lines written while no operator ran are fetched once by the next one.
    cluster.sync(lambda: container.write(200))
    second = start(env, tmp_path, kubeconfig, "second")
    try:
        second.wait_http(f"http://127.0.0.1:{env['PODMORTEM_HEALTH_PORT']}/readyz")
        url = f"http://127.0.0.1:{log_port}/logs/default/stopper-train"
        deadline = time.monotonic() + 30
        body = ""
        while time.monotonic() < deadline:
            body = ep.http_get(url)[1]
            if body.count("\n") >= 500:
                break
            time.sleep(0.2)
        written = cluster.sync(lambda: container.current.log.lines())
        assert body.encode() == b"".join(text + b"\n" for _, text in written)
    finally:
        assert second.stop() == 0


def start(env: dict[str, str], tmp: Path, kubeconfig: Path, name: str) -> Process:
    return ep.start(["operator", "--kubeconfig", str(kubeconfig)], env=env, log=tmp / f"{name}.log")
