"""``podmortem operator`` with the chart's follow selector variables reports pods nobody opted in.

Started as a process, as the chart starts it (``PODMORTEM_FOLLOW_SELECTOR`` and
``PODMORTEM_FOLLOW_NAMESPACES``), against the emulated API: a bare pod with matching labels and no
podmortem annotation that is OOM-killed gets the report annotation and an Event; a pod whose labels
do not match gets neither.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli import entrypoints as ep

from podmortem_demo.emulated.tls import Pki, make_pki
from podmortem_demo.harness import Harness, harness, kill, run_pod

pytest.importorskip("cryptography")

TOKEN = "operator-token"


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Harness]:
    with harness(tmp_path_factory.mktemp("follow-selector"), pki=pki, tokens={TOKEN, "admin"},
                 admin_token="admin") as h:
        h.add_agent_pod()
        yield h


def labelled_pod(h: Harness, name: str, labels: dict[str, str]) -> None:
    h.create("/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"containers": [{"name": "trainer", "image": "pointgroup:1"}]},
    })


def report_of(h: Harness, name: str) -> dict[str, Any] | None:
    meta = (h.stored("v1/pods", "default", name) or {}).get("metadata", {})
    raw = (meta.get("annotations") or {}).get("podmortem.io/failure-report")
    return dict(json.loads(raw)) if raw else None


def test_an_unannotated_pod_matching_the_selector_is_reported(cluster: Harness, pki: Pki, tmp_path: Path
                                                              ) -> None:
    h = cluster
    kubeconfig = ep.write_kubeconfig(tmp_path / "kubeconfig", server=h.url, token=TOKEN, ca_pem=pki.ca_pem)
    env = ep.operator_env(h, tmp_path, PODMORTEM_FOLLOW_SELECTOR="team=vision, tier in (gpu,tpu), !canary",
                          PODMORTEM_FOLLOW_NAMESPACES="default")
    operator = ep.start(["operator", "--kubeconfig", str(kubeconfig)], env=env, log=tmp_path / "operator.log")
    try:
        operator.wait_http(f"http://127.0.0.1:{env['PODMORTEM_HEALTH_PORT']}/readyz")
        labelled_pod(h, "vision-0", {"team": "vision", "tier": "gpu"})
        labelled_pod(h, "vision-canary", {"team": "vision", "tier": "gpu", "canary": "yes"})
        for name in ("vision-0", "vision-canary"):
            run_pod(h, name=name)
            kill(h, name=name)
        report = h.wait(lambda: report_of(h, "vision-0"), what="the report annotation of vision-0",
                        timeout=60)
        assert report["pod"]["name"] == "vision-0" and report["pod"]["exitCode"] == 137
        assert report["verdict"] == "memcg-limit"
        h.wait(lambda: next((e for e in h.events_for("vision-0") if e["type"] == "Warning"), None),
               what="the report's Event on vision-0", timeout=30)
        assert report_of(h, "vision-canary") is None
        assert h.events_for("vision-canary") == []
        assert operator.alive()
    finally:
        assert operator.stop() == 0, operator.output()[-4000:]


def test_a_bad_selector_stops_the_operator_at_start(cluster: Harness, tmp_path: Path) -> None:
    env = ep.operator_env(cluster, tmp_path, PODMORTEM_FOLLOW_SELECTOR="tier in (gpu")
    operator = ep.start(["operator"], env=env, log=tmp_path / "operator.log")
    assert operator.proc.wait(60) == 2
    assert "PODMORTEM_FOLLOW_SELECTOR='tier in (gpu'" in operator.output()
