"""``agent.oomEvents``: the agent is told to post every pod's OOM kill as an Event, and may.

The rendered variables go through ``podmortem agent``'s own option parsing; the agent's
ServiceAccount's rules are checked against the Event create the agent makes
(``podmortem.agent.oom_events``), as the apiserver derives its attributes.
"""

from __future__ import annotations

from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest

from podmortem.cli import agent as agent_cli
from podmortem.cli.main import build_parser
from podmortem_demo.emulated import calls

from . import _rbac, _render

ENABLED = {"enabled": True, "intervalSeconds": 30, "perMinute": 12,
           "podLabels": ["app", "app.kubernetes.io/name"]}


def agent_account(rendered: _render.Rendered) -> str:
    return str(rendered.one("DaemonSet", "agent")["spec"]["template"]["spec"]["serviceAccountName"])


def agent_env(rendered: _render.Rendered) -> dict[str, str]:
    return _render.env_of(rendered.one("DaemonSet", "agent")["spec"]["template"]["spec"]["containers"][0])


def posts_event(rendered: _render.Rendered, namespace: str) -> bool:
    rules = _rbac.rules_for(rendered, account=agent_account(rendered), namespace=_render.NAMESPACE)
    event = calls.attributes("POST", f"/api/v1/namespaces/{namespace}/events", {})
    return _rbac.unallowed([event], rules) == []


def test_off_by_default_and_then_no_right_to_post(default_rendered: _render.Rendered) -> None:
    env = agent_env(default_rendered)
    assert env["PODMORTEM_OOM_EVENTS"] == "false"
    assert not posts_event(default_rendered, "web")


@pytest.mark.parametrize(("values", "allowed", "refused"), [
    ({}, ["web", "kube-system"], []),
    ({"watchNamespaces": ["web"]}, ["web"], ["ml"]),
])
def test_enabled_the_agent_is_told_and_may_post_where_it_lists(
        chart: helm.Chart, monkeypatch: pytest.MonkeyPatch, values: dict[str, Any], allowed: list[str],
        refused: list[str]) -> None:
    rendered = _render.render(chart, {**values, "agent": {"oomEvents": ENABLED}})
    env = agent_env(rendered)
    for name, value in {**env, "PODMORTEM_NODE_NAME": "node-1"}.items():
        monkeypatch.setenv(name, value)
    settings = agent_cli.settings_from(build_parser("agent").parse_args(["agent"]))
    assert settings.oom_events is True
    assert (settings.oom_event_interval_s, settings.oom_events_per_minute) == (30, 12)
    assert settings.oom_metric_pod_labels == ("app", "app.kubernetes.io/name")
    assert all(posts_event(rendered, ns) for ns in allowed)
    assert not any(posts_event(rendered, ns) for ns in refused)
    for role in rendered.of_kind("ClusterRole"):
        kubernetes_validate.validate(role, "1.33", strict=True)


def test_the_schema_bounds_the_labels(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmValuesError) as caught:
        too_many = [f"l{i}" for i in range(11)]
        chart.validate_schema({"agent": {"oomEvents": {**ENABLED, "podLabels": too_many}}})
    assert "'/agent/oomEvents/podLabels'" in str(caught.value)
