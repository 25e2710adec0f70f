"""``followSelector``: the operator is told which pods to follow without their opting in.

The rendered variables go through ``podmortem operator``'s own option parsing, so what the chart
writes is what the operator reads; the Deployment stays valid Kubernetes.
"""

from __future__ import annotations

from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest

from podmortem.cli import agent as agent_cli
from podmortem.cli import operator as operator_cli
from podmortem.cli.main import build_parser
from podmortem.operator.settings import OperatorSettings

from . import _render


def operator_settings(rendered: _render.Rendered, monkeypatch: pytest.MonkeyPatch) -> OperatorSettings:
    deployment = rendered.one("Deployment", "operator")
    env = _render.env_of(deployment["spec"]["template"]["spec"]["containers"][0])
    for name, value in {**env, "PODMORTEM_POD_NAME": "pm-operator-0",
                        "PODMORTEM_POD_NAMESPACE": _render.NAMESPACE}.items():
        monkeypatch.setenv(name, value)
    return operator_cli.settings_from(build_parser().parse_args(["operator"]))


def test_off_by_default(default_rendered: _render.Rendered, monkeypatch: pytest.MonkeyPatch) -> None:
    assert operator_settings(default_rendered, monkeypatch).follow_selector is None
    agent_env = _render.env_of(default_rendered.one("DaemonSet", "agent")["spec"]["template"]["spec"]
                               ["containers"][0])
    assert (agent_env["PODMORTEM_FOLLOW_SELECTOR"], agent_env["PODMORTEM_FOLLOW_NAMESPACES"]) == ("", "")


@pytest.mark.parametrize("values", [
    {"followSelector": {"labelSelector": "app=trainer, tier in (gpu,tpu), !canary"}},
    {"followSelector": {"labelSelector": "app=trainer", "namespaces": ["ml", "vision"]},
     "watchNamespaces": ["ml", "vision", "web"]},
    {"followSelector": {"namespaces": ["ml"]}},
])
def test_the_deployment_carries_it_and_the_operator_reads_it(
        chart: helm.Chart, monkeypatch: pytest.MonkeyPatch, values: dict[str, Any]) -> None:
    rendered = _render.render(chart, values)
    deployment = rendered.one("Deployment", "operator")
    kubernetes_validate.validate(deployment, "1.33", strict=True)
    follow = operator_settings(rendered, monkeypatch).follow_selector
    assert follow is not None
    given = values["followSelector"]
    assert follow.namespaces == tuple(given.get("namespaces", ()))
    trainer = {"app": "trainer", "tier": "gpu"}
    in_namespace = given.get("namespaces", ["anywhere"])[0]
    assert follow.selects(in_namespace, trainer)
    if "labelSelector" in given:
        assert not follow.selects(in_namespace, {"app": "web"})
    if "namespaces" in given:
        assert not follow.selects("elsewhere", trainer)
    # The agent samples the same pods, so that their reports have samples and kernel records.
    agent_env = _render.env_of(rendered.one("DaemonSet", "agent")["spec"]["template"]["spec"]
                               ["containers"][0])
    for name, value in {**agent_env, "PODMORTEM_NODE_NAME": "node-1"}.items():
        monkeypatch.setenv(name, value)
    assert agent_cli.settings_from(build_parser().parse_args(["agent"])).follow_selector == follow


def test_a_namespace_that_is_not_watched_fails_the_render(chart: helm.Chart) -> None:
    refused = r"followSelector\.namespaces: vision is not in watchNamespaces"
    with pytest.raises(helm.HelmRenderError, match=refused):
        _render.render(chart, {"watchNamespaces": ["ml"], "followSelector": {"namespaces": ["ml", "vision"]}})


def test_the_schema_refuses_what_is_not_a_namespace_or_too_long(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmValuesError) as caught:
        chart.validate_schema({"followSelector": {"namespaces": ["Not_A_Namespace"]}})
    assert "/followSelector/namespaces" in str(caught.value)
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema({"followSelector": {"labelSelector": "a" * 4097}})
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema({"followSelector": {"selector": "app=x"}})  # a misspelt key is refused
