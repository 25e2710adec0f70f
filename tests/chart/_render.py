"""Rendering the chart with Helm's own engine, and walking what it renders.

The tests never template YAML themselves: helm-python-sdk binds Helm's Go SDK, so the output
is what `helm install` would send, including values.schema.json validation.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

CHART_DIR = Path(__file__).resolve().parents[2] / "charts" / "podmortem"
CI_DIR = CHART_DIR / "ci"
CRD_FILE = CHART_DIR / "crds" / "trainingjob.yaml"
RELEASE = "pm"
NAMESPACE = "podmortem-system"

#: Scenario names, from charts/podmortem/ci/<name>-values.yaml.
SCENARIOS: tuple[str, ...] = tuple(
    sorted(p.name.removesuffix("-values.yaml") for p in CI_DIR.glob("*-values.yaml"))
)


@dataclass(frozen=True)
class Rendered:
    """One rendering of the chart: the objects it would create, and NOTES.txt."""

    objects: tuple[dict[str, Any], ...]
    notes: str

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, component: str | None = None) -> dict[str, Any]:
        found = [
            o
            for o in self.of_kind(kind)
            if component is None
            or o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component
        ]
        assert len(found) == 1, f"expected one {kind} ({component}), found {len(found)}"
        return found[0]

    def workloads(self) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] in ("Deployment", "DaemonSet")]


def scenario_values(scenario: str) -> dict[str, Any]:
    return helm.values_from_yaml((CI_DIR / f"{scenario}-values.yaml").read_text())


def render(
    chart: helm.Chart, values: dict[str, Any], *, name: str = RELEASE, namespace: str = NAMESPACE
) -> Rendered:
    manifests = chart.render(values, name=name, namespace=namespace, is_install=True)
    objects: list[dict[str, Any]] = []
    notes = ""
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                assert isinstance(doc, dict) and "kind" in doc, f"{path}: not a Kubernetes object"
                objects.append(doc)
    return Rendered(objects=tuple(objects), notes=notes)


def pod_specs(rendered: Rendered) -> Iterator[tuple[str, dict[str, Any]]]:
    for workload in rendered.workloads():
        component = workload["metadata"]["labels"]["app.kubernetes.io/component"]
        yield component, workload["spec"]["template"]["spec"]


def containers(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod_spec.get("initContainers", []), *pod_spec["containers"]]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", []) if "value" in e}
