"""The chart's pods start: the operator and the agent, run with the command, args and env Helm renders.

For the default values and every ``ci/`` scenario, the operator Deployment's and the
agent DaemonSet's container is started as a process against the emulated API over
TLS, logging in with the service account files that pod would have mounted (see
``_pods``). Each must pass its own readiness probe and do its job: the operator
creates a TrainingJob's pod, the agent lists its node's pods. A flag, env var or
port that the chart and the CLI disagree on fails here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
from tests.cli import entrypoints as ep

from podmortem_demo.emulated.tls import Pki, make_pki
from podmortem_demo.harness import Harness, harness

from . import _pods, _render

pytest.importorskip("cryptography")

SA_TOKENS = {"operator": "operator-sa-token", "agent": "agent-sa-token"}
ADMIN = "admin-token"


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Harness]:
    tmp = tmp_path_factory.mktemp("chart-cluster")
    with harness(tmp, pki=pki, tokens={ADMIN, *SA_TOKENS.values()}, admin_token=ADMIN) as h:
        yield h


def scenario_values(name: str) -> dict[str, Any]:
    return {} if name == "defaults" else _render.scenario_values(name)


def run_pod(cluster: Harness, pki: Pki, rendered: _render.Rendered, component: str, tmp: Path
            ) -> tuple[ep.Process, _pods.PodProcess]:
    workload = next(w for w in rendered.workloads()
                    if w["metadata"]["labels"]["app.kubernetes.io/component"] == component)
    namespace = workload["metadata"].get("namespace", _render.NAMESPACE)
    account = ep.service_account_dir(tmp / f"{component}-sa", token=SA_TOKENS[component], pki=pki,
                                     namespace=namespace)
    base = ep.clean_env(tmp, **ep.in_cluster_env(cluster.url, account))
    pod = _pods.materialize(rendered, workload, podmortem=ep.PODMORTEM, tmp=tmp / component, base_env=base)
    process = ep.Process(pod.argv, pod.env, tmp / f"{component}.log").start()
    return process, pod


@pytest.mark.parametrize("scenario", ["defaults", *_render.SCENARIOS])
def test_the_rendered_pods_start_and_work(chart: helm.Chart, cluster: Harness, pki: Pki, tmp_path: Path,
                                          scenario: str) -> None:
    rendered = _render.render(chart, scenario_values(scenario))
    components = {w["metadata"]["labels"]["app.kubernetes.io/component"] for w in rendered.workloads()}
    assert "operator" in components

    operator, pod = run_pod(cluster, pki, rendered, "operator", tmp_path)
    watched_namespaces = [n for n in pod.env.get("PODMORTEM_NAMESPACES", "").split(",") if n]
    ns = watched_namespaces[0] if watched_namespaces else "default"
    cluster.sync(lambda: cluster.api.namespaces.update(watched_namespaces))
    try:
        operator.wait_http(pod.ready_url, timeout=90)
        name = f"chart-{scenario}"[:40]
        cluster.create(f"/apis/podmortem.io/v1alpha1/namespaces/{ns}/trainingjobs", {
            "apiVersion": "podmortem.io/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"template": {"spec": {"containers": [{"name": "trainer", "image": "x"}]}}},
        })
        created = cluster.wait(lambda: cluster.get(f"/api/v1/namespaces/{ns}/pods/{name}-train"),
                               what=f"the operator ({scenario}) creating the TrainingJob's pod", timeout=60)
        assert created["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"
    finally:
        assert operator.stop() == 0, operator.output()[-3000:]

    if "agent" not in components:
        return
    watched = f"watched-{scenario}"[:40]
    cluster.create(f"/api/v1/namespaces/{ns}/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": watched, "namespace": ns, "annotations": {"podmortem.io/watch": "true"}},
        "spec": {"nodeName": _pods.NODE, "containers": [{"name": "c", "image": "x"}]},
    })
    agent, pod = run_pod(cluster, pki, rendered, "agent", tmp_path)
    try:
        agent.wait_http(pod.ready_url, timeout=60)
        health_url = pod.ready_url.rsplit("/", 1)[0] + "/healthz"
        deadline = time.monotonic() + 30
        while True:
            _, body = ep.http_get(health_url)
            if '"watched_pods": 0' not in body and '"watched_pods"' in body:
                break
            assert time.monotonic() < deadline, f"the agent ({scenario}) never watched {watched}: {body}"
            time.sleep(0.3)
        assert f"watching pod {ns}/{watched}" in agent.output()
    finally:
        assert agent.stop() == 0, agent.output()[-3000:]
