"""The chart installed into the real control plane with the real ``helm``, and its operator run as a local
process with the ServiceAccount's real token.

Pods do not run here (kwok plays the kubelets), so the operator Deployment that ``helm install`` creates
never starts a process. Its container is started here instead, exactly as rendered (``tests/chart/_pods``):
its args and env, its Secret volumes written from what Helm sent to the API server (``helm get manifest``,
so the webhook's generated certificate is the one whose CA is in the stored ``caBundle``), and the
service-account files the kubelet would mount: a token the API server issued for the chart's
ServiceAccount (TokenRequest) and the control plane's CA. Every API call it makes is authenticated and
authorised by the real server, with the RBAC the chart installed.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from tests.chart import _pods, _render
from tests.cli import entrypoints as ep
from tests.controlplane.cluster import ControlPlane


@dataclass(frozen=True)
class Release:
    """One ``helm install`` of charts/podmortem: its name, namespace and the objects Helm sent."""

    name: str
    namespace: str
    rendered: _render.Rendered

    @property
    def operator_service_account(self) -> str:
        workload = self.rendered.one("Deployment", "operator")
        name: str = workload["spec"]["template"]["spec"]["serviceAccountName"]
        return name

    def webhook(self) -> dict[str, Any]:
        (config,) = self.rendered.of_kind("MutatingWebhookConfiguration")
        (hook,) = config["webhooks"]
        return dict(hook)


def release_name(prefix: str) -> str:
    """A release name no other test of the session uses (cluster-scoped objects carry it)."""
    return f"{prefix}-{uuid.uuid4().hex[:5]}"


def free_ports() -> dict[str, Any]:
    """Values giving every port the operator binds a free one (it runs on this machine, not in a pod)."""
    return {"http": {"port": ep.free_port()}, "metrics": {"port": ep.free_port()},
            "health": {"port": ep.free_port()}}


@contextlib.contextmanager
def installed(plane: ControlPlane, tmp: Path, *, name: str, namespace: str,
              values: dict[str, Any]) -> Iterator[Release]:
    """``helm install name charts/podmortem -n namespace -f values``; uninstalled after the block."""
    tmp.mkdir(parents=True, exist_ok=True)
    values_file = tmp / f"{name}-values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    plane.run("helm", "install", name, str(_render.CHART_DIR), "--namespace", namespace,
              "--create-namespace", "--values", str(values_file), timeout=300)
    try:
        manifest = plane.run("helm", "get", "manifest", name, "--namespace", namespace).stdout
        objects = tuple(doc for doc in yaml.safe_load_all(manifest) if doc)
        yield Release(name, namespace, _render.Rendered(objects=objects, notes=""))
    finally:
        plane.run("helm", "uninstall", name, "--namespace", namespace, "--wait=false", check=False,
                  timeout=300)
        plane.run("kubectl", "delete", "namespace", namespace, "--wait=false", check=False)


def start_operator(plane: ControlPlane, release: Release, tmp: Path) -> tuple[ep.Process, _pods.PodProcess]:
    """The release's operator container as a local process, logged in as the chart's ServiceAccount."""
    account = plane.mounted_service_account(tmp / "serviceaccount", namespace=release.namespace,
                                            name=release.operator_service_account)
    base = ep.clean_env(tmp, **ep.in_cluster_env(plane.url, account))
    workload = release.rendered.one("Deployment", "operator")
    pod = _pods.materialize(release.rendered, workload, podmortem=ep.PODMORTEM, tmp=tmp / "pod",
                            base_env=base)
    process = ep.Process(pod.argv, pod.env, tmp / f"operator-{uuid.uuid4().hex[:4]}.log").start()
    return process, pod


@contextlib.contextmanager
def operator(plane: ControlPlane, release: Release, tmp: Path, *, ready_timeout: float = 120
             ) -> Iterator[tuple[ep.Process, _pods.PodProcess]]:
    """:func:`start_operator`, ready (its readiness probe answers 200); stopped after the block."""
    process, pod = start_operator(plane, release, tmp)
    try:
        process.wait_http(pod.ready_url, timeout=ready_timeout)
        yield process, pod
    finally:
        process.stop()
