"""Every scenario renders with Helm's engine, lints clean, and is valid Kubernetes."""

from __future__ import annotations

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate import utils as kv_utils

from . import _render

#: The chart's kubeVersion floor, and the newest schemas kubernetes-validate ships.
KUBE_VERSIONS = ("1.29", kv_utils.latest_version())

#: Kinds kubernetes-validate has no schema for (CRDs of other projects), and why that is fine.
NO_UPSTREAM_SCHEMA = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "Prometheus Operator CRD, not in Kubernetes' schemas",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "Prometheus Operator CRD, not in Kubernetes' schemas",
    ("cert-manager.io/v1", "Certificate"): "cert-manager CRD, not in Kubernetes' schemas",
}

WARNING = 2  # helm lint severities: 1 info, 2 warning, 3 error


def test_lint_defaults_has_no_warnings() -> None:
    report = helm.lint(_render.CHART_DIR, strict=True, kube_version=f"v{KUBE_VERSIONS[-1]}.0")
    problems = [m for m in report["messages"] if m["severity"] >= WARNING]
    assert report["errors"] == [] and problems == [], report


@pytest.mark.parametrize("scenario", _render.SCENARIOS)
def test_lint_scenario(scenario: str) -> None:
    report = helm.lint(
        _render.CHART_DIR, _render.scenario_values(scenario), strict=True, namespace=_render.NAMESPACE
    )
    problems = [m for m in report["messages"] if m["severity"] >= WARNING]
    assert report["errors"] == [] and problems == [], report


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_manifests_validate_against_kubernetes(rendered: _render.Rendered, version: str) -> None:
    skipped = set()
    for obj in rendered.objects:
        key = (obj["apiVersion"], obj["kind"])
        if key in NO_UPSTREAM_SCHEMA:
            skipped.add(key)
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} at {where}: {exc.message}")
    # Only the kinds named above may go unchecked.
    assert skipped <= NO_UPSTREAM_SCHEMA.keys()


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_crd_validates_against_kubernetes(version: str) -> None:
    crd = yaml.safe_load(_render.CRD_FILE.read_text())
    kubernetes_validate.validate(crd, version, strict=True)


def test_chart_ships_the_crd(chart: helm.Chart) -> None:
    crds = [yaml.safe_load(c["data"]) for c in chart.crds]
    assert [c["metadata"]["name"] for c in crds] == ["trainingjobs.podmortem.io"]


def test_every_scenario_is_schema_valid(chart: helm.Chart, scenario: str) -> None:
    chart.validate_schema(_render.scenario_values(scenario))


def test_servicemonitor_only_where_asked(rendered: _render.Rendered, scenario: str) -> None:
    values = _render.scenario_values(scenario)
    monitors = rendered.of_kind("ServiceMonitor")
    if values.get("serviceMonitor", {}).get("enabled"):
        assert {m["metadata"]["labels"]["app.kubernetes.io/component"] for m in monitors} == {
            "operator",
            "agent",
        }
        for monitor in monitors:
            assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
            assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    else:
        assert monitors == []
