"""NetworkPolicies: off by default; when on, only the operator reaches the agent's evidence port."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest

from . import _render


def _policy(rendered: _render.Rendered, component: str) -> dict[str, Any]:
    return rendered.one("NetworkPolicy", component)


def _rule_for(policy: dict[str, Any], port: str) -> dict[str, Any]:
    [rule] = [r for r in policy["spec"]["ingress"] if [p["port"] for p in r["ports"]] == [port]]
    return rule


def _pod_labels(rendered: _render.Rendered, component: str) -> dict[str, str]:
    workload = next(
        w for w in rendered.workloads() if w["metadata"]["labels"]["app.kubernetes.io/component"] == component
    )
    labels: dict[str, str] = workload["spec"]["template"]["metadata"]["labels"]
    return labels


def _port_names(rendered: _render.Rendered, component: str) -> set[str]:
    return {
        port["name"]
        for name, pod in _render.pod_specs(rendered)
        if name == component
        for container in _render.containers(pod)
        for port in container.get("ports", [])
    }


def test_no_network_policy_unless_asked(rendered: _render.Rendered, scenario: str) -> None:
    if not _render.scenario_values(scenario).get("networkPolicy", {}).get("enabled"):
        assert rendered.of_kind("NetworkPolicy") == []


@pytest.mark.parametrize("scenario", ["network-policy"])
def test_only_the_operator_reaches_the_agents_evidence_port(rendered: _render.Rendered) -> None:
    agent, operator = _policy(rendered, "agent"), _policy(rendered, "operator")
    assert agent["spec"]["podSelector"]["matchLabels"].items() <= _pod_labels(rendered, "agent").items()
    assert operator["spec"]["podSelector"]["matchLabels"].items() <= _pod_labels(rendered, "operator").items()
    assert agent["spec"]["policyTypes"] == ["Ingress"] == operator["spec"]["policyTypes"]

    [peer] = _rule_for(agent, "http")["from"]
    allowed = peer["podSelector"]["matchLabels"].items()
    assert set(peer) == {"podSelector"}  # this namespace only
    assert allowed <= _pod_labels(rendered, "operator").items()
    assert not allowed <= _pod_labels(rendered, "agent").items()

    monitoring = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert _rule_for(agent, "metrics")["from"] == monitoring == _rule_for(operator, "metrics")["from"]
    assert _rule_for(operator, "http")["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ml-platform"}}}
    ]
    assert "from" not in _rule_for(operator, "health")  # the kubelet's probes
    # Every named port a rule opens exists on the component's container.
    for component, policy in (("agent", agent), ("operator", operator)):
        opened = {p["port"] for r in policy["spec"]["ingress"] for p in r["ports"]}
        assert opened <= _port_names(rendered, component), component


def test_empty_peer_lists_open_the_port_to_any_source(chart: helm.Chart) -> None:
    rendered = _render.render(chart, {"networkPolicy": {"enabled": True}})
    agent, operator = _policy(rendered, "agent"), _policy(rendered, "operator")
    assert "from" not in _rule_for(agent, "metrics") and "from" not in _rule_for(operator, "http")
    assert _rule_for(agent, "http")["from"]  # never open to all


@pytest.mark.parametrize("peer", [{}, {"pods": {}}, {"ipBlock": {"except": ["10.0.0.0/8"]}}])
def test_a_malformed_peer_is_refused(chart: helm.Chart, peer: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema({"networkPolicy": {"enabled": True, "metricsFrom": [peer]}})
