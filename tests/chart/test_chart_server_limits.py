"""The chart's ``serverLimits`` reach each server's settings; its ``logReaders`` roles grant what readers use.

The limits are checked the way the pods read them: the rendered containers' variables go through
``podmortem operator``'s and ``podmortem agent``'s own option parsing, and the resulting
``ServerLimits`` must be the values given (the story in ``test_chart_pods_start`` also starts the
processes with the ``readers-server-limits`` scenario). The reader roles are checked against the
API requests ``podmortem logs`` makes for a deleted pod's stored copy and a live pod, as the
apiserver derives their attributes.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest

from podmortem.agent.settings import AgentSettings
from podmortem.cli import agent as agent_cli
from podmortem.cli import operator as operator_cli
from podmortem.cli.main import build_parser
from podmortem.connection_limits import ServerLimits
from podmortem.operator.settings import OperatorSettings, WebhookSettings
from podmortem_demo.emulated import calls

from . import _rbac, _render

CUSTOM: dict[str, dict[str, float]] = {
    "logApi": {"headerTimeoutSeconds": 30, "bodyTimeoutSeconds": 15, "idleTimeoutSeconds": 120,
               "maxConnections": 1000, "maxConnectionsPerPeer": 500},
    "probes": {"headerTimeoutSeconds": 5, "bodyTimeoutSeconds": 5, "idleTimeoutSeconds": 30,
               "maxConnections": 64, "maxConnectionsPerPeer": 16},
    "webhook": {"headerTimeoutSeconds": 20, "bodyTimeoutSeconds": 25, "idleTimeoutSeconds": 45,
                "maxConnections": 40, "maxConnectionsPerPeer": 8},
    "agent": {"headerTimeoutSeconds": 2.5, "bodyTimeoutSeconds": 7, "idleTimeoutSeconds": 90,
              "maxConnections": 200_000, "maxConnectionsPerPeer": 128},
}


def limits_of(values: dict[str, float]) -> ServerLimits:
    return ServerLimits(
        header_timeout_s=values["headerTimeoutSeconds"], body_timeout_s=values["bodyTimeoutSeconds"],
        idle_timeout_s=values["idleTimeoutSeconds"], max_connections=int(values["maxConnections"]),
        max_connections_per_peer=int(values["maxConnectionsPerPeer"]))


def container_env(rendered: _render.Rendered, kind: str, component: str) -> dict[str, str]:
    return _render.env_of(rendered.one(kind, component)["spec"]["template"]["spec"]["containers"][0])


def operator_settings(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> OperatorSettings:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return operator_cli.settings_from(build_parser("operator").parse_args(["operator"]))


def agent_settings(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> AgentSettings:
    for name, value in {**env, "PODMORTEM_NODE_NAME": "node-1"}.items():
        monkeypatch.setenv(name, value)
    return agent_cli.settings_from(build_parser("agent").parse_args(["agent"]))


def test_each_servers_limits_reach_its_settings(chart: helm.Chart, monkeypatch: pytest.MonkeyPatch) -> None:
    rendered = _render.render(chart, {"serverLimits": CUSTOM, "webhook": {"enabled": True}})
    op = operator_settings(container_env(rendered, "Deployment", "operator"), monkeypatch)
    assert op.log_server.connections == limits_of(CUSTOM["logApi"])
    assert op.probe_connections == limits_of(CUSTOM["probes"])
    assert op.webhook is not None and op.webhook.connections == limits_of(CUSTOM["webhook"])
    agent = agent_settings(container_env(rendered, "DaemonSet", "agent"), monkeypatch)
    assert agent.connections == limits_of(CUSTOM["agent"])


def test_the_charts_defaults_are_the_codes(chart: helm.Chart, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset, each server keeps the limits its settings give it; the chart's defaults say the same."""
    rendered = _render.render(chart, {"webhook": {"enabled": True}})
    op = operator_settings(container_env(rendered, "Deployment", "operator"), monkeypatch)
    code = OperatorSettings()
    assert op.log_server.connections == code.log_server.connections
    assert op.probe_connections == code.probe_connections
    somewhere = _render.CHART_DIR
    webhook_default = WebhookSettings(tls_cert_file=somewhere, tls_key_file=somewhere).connections
    assert op.webhook is not None and op.webhook.connections == webhook_default
    assert webhook_default != code.probe_connections  # the webhook's own, lower caps
    agent = agent_settings(container_env(rendered, "DaemonSet", "agent"), monkeypatch)
    assert agent.connections == AgentSettings().connections


def test_webhook_limits_only_with_the_webhook(default_rendered: _render.Rendered) -> None:
    env = container_env(default_rendered, "Deployment", "operator")
    assert "PODMORTEM_HTTP_MAX_CONNECTIONS" in env and "PODMORTEM_PROBE_MAX_CONNECTIONS" in env
    assert not any(name.startswith("PODMORTEM_WEBHOOK_") for name in env)


@pytest.mark.parametrize("server", sorted(CUSTOM))
def test_a_per_peer_cap_above_the_total_fails_the_install(chart: helm.Chart, server: str) -> None:
    values = {"serverLimits": {server: {**CUSTOM[server], "maxConnections": 10, "maxConnectionsPerPeer": 11}}}
    with pytest.raises(helm.HelmRenderError,
                       match=re.escape(f"serverLimits.{server}.maxConnectionsPerPeer (11) must not exceed")):
        chart.render(values, name=_render.RELEASE, namespace=_render.NAMESPACE)


@pytest.mark.parametrize(("key", "value"), [
    ("headerTimeoutSeconds", 0), ("idleTimeoutSeconds", -1), ("bodyTimeoutSeconds", 100_000),
    ("maxConnections", 0), ("maxConnectionsPerPeer", 1.5),
])
def test_the_schema_refuses_unusable_limits(chart: helm.Chart, key: str, value: float) -> None:
    with pytest.raises(helm.HelmValuesError) as caught:
        chart.validate_schema({"serverLimits": {"agent": {**CUSTOM["agent"], key: value}}})
    assert f"'/serverLimits/agent/{key}'" in str(caught.value)


# -- logReaders -------------------------------------------------------------------------------------

READER = "reader"
READER_NS = "team-a"
OPERATOR_POD = "pm-podmortem-operator-7d9f8-abcde"


def reader_rules(rendered: _render.Rendered) -> list[_rbac.Rule]:
    return _rbac.rules_for(rendered, account=READER, namespace=READER_NS)


def reads(namespace: str = READER_NS) -> list[calls.ApiCall]:
    """What a reader's ``podmortem logs`` and ``podmortem diagnose pod/NAME`` ask the API server."""
    ops = _render.NAMESPACE
    wanted = [
        # the operator: its Service by label, a Ready pod behind it, a port-forward to that pod
        ("GET", f"/api/v1/namespaces/{ops}/services",
         {"labelSelector": "app.kubernetes.io/part-of=podmortem"}),
        ("GET", f"/api/v1/namespaces/{ops}/pods", {"labelSelector": "app.kubernetes.io/component=operator"}),
        ("GET", f"/api/v1/namespaces/{ops}/pods/{OPERATOR_POD}/portforward", {"ports": "8080"}),
        ("POST", f"/api/v1/namespaces/{ops}/pods/{OPERATOR_POD}/portforward", {"ports": "8080"}),
        # the jobs' namespace: a live pod, its log, -l, its Events and its TrainingJob
        ("GET", f"/api/v1/namespaces/{namespace}/pods/trainer-0", {}),
        ("GET", f"/api/v1/namespaces/{namespace}/pods/trainer-0/log", {"follow": "true"}),
        ("GET", f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": "podmortem.io/trainingjob=pg"}),
        ("GET", f"/api/v1/namespaces/{namespace}/events", {"fieldSelector": "involvedObject.name=trainer-0"}),
        ("GET", f"/apis/podmortem.io/v1alpha1/namespaces/{namespace}/trainingjobs/pg", {}),
        ("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/pg", {}),
    ]
    return [calls.attributes(method, path, query) for method, path, query in wanted]


def with_readers(**readers: Any) -> dict[str, Any]:
    subjects = [{"kind": "ServiceAccount", "name": READER, "namespace": READER_NS}]
    return {"logReaders": {"create": True, "subjects": subjects, **readers}}


def test_no_reader_roles_unless_asked(default_rendered: _render.Rendered) -> None:
    names = [o["metadata"]["name"] for o in default_rendered.objects
             if o["kind"].endswith(("Role", "RoleBinding"))]
    assert not [n for n in names if "log-access" in n or "log-reader" in n]


def test_reader_roles_allow_what_the_cli_asks_and_nothing_that_writes(chart: helm.Chart) -> None:
    rendered = _render.render(chart, with_readers(namespaces=[READER_NS]))
    rules = reader_rules(rendered)
    assert _rbac.unallowed(reads(), rules) == []
    assert _rbac.unused(reads(), rules) == [], "a rule no reader's request needs"
    # bound in team-a only: another namespace's pods stay closed
    assert _rbac.unallowed(reads("team-b")[4:], rules) != []
    ns = READER_NS
    writes = [calls.attributes("PATCH", f"/api/v1/namespaces/{ns}/pods/trainer-0", {}),
              calls.attributes("DELETE", f"/apis/podmortem.io/v1alpha1/namespaces/{ns}/trainingjobs/pg", {}),
              calls.attributes("POST", f"/api/v1/namespaces/{ns}/pods/trainer-0/exec", {}),
              calls.attributes("GET", f"/api/v1/namespaces/{ns}/secrets/x", {})]
    assert len(_rbac.unallowed(writes, rules)) == len(writes)
    for obj in rendered.objects:
        if obj["kind"].endswith(("Role", "RoleBinding")) and "log-" in obj["metadata"]["name"]:
            kubernetes_validate.validate(obj, "1.33", strict=True)


@pytest.mark.parametrize(("values", "everywhere", "namespaces"), [
    ({}, True, []),
    ({"watchNamespaces": ["team-a", "team-c"]}, False, ["team-a", "team-c"]),
    ({"watchNamespaces": ["team-c"], "logReaders": {"namespaces": ["team-a"]}}, False, ["team-a"]),
])
def test_where_the_reader_role_is_bound(chart: helm.Chart, values: dict[str, Any], everywhere: bool,
                                       namespaces: list[str]) -> None:
    merged = with_readers(**values.pop("logReaders", {}))
    rendered = _render.render(chart, {**values, **merged})
    reader = [o for o in rendered.objects if o["metadata"]["name"].endswith("log-reader")
              and o["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    expected = [True] if everywhere else [False] * len(namespaces)
    assert [o["kind"] == "ClusterRoleBinding" for o in reader] == expected
    assert sorted(o["metadata"].get("namespace") for o in reader if o["kind"] == "RoleBinding") == namespaces
    rules = reader_rules(rendered)
    assert (_rbac.unallowed(reads("team-z"), rules) == []) == everywhere


def test_roles_without_subjects_bind_nobody(chart: helm.Chart) -> None:
    rendered = _render.render(chart, {"logReaders": {"create": True}})
    kinds = sorted(o["kind"] for o in rendered.objects if "log-" in o["metadata"]["name"])
    assert kinds == ["ClusterRole", "Role"]


# -- NOTES.txt --------------------------------------------------------------------------------------


@pytest.mark.parametrize("values", [{}, with_readers(), {"logReaders": {"create": True}}])
def test_notes_commands_are_ones_the_cli_takes(chart: helm.Chart, values: dict[str, Any]) -> None:
    """Every ``podmortem ...`` line NOTES.txt prints parses with the real CLI (flags and all)."""
    notes = _render.render(chart, values).notes
    lines = [line.strip() for line in notes.splitlines() if line.startswith("   podmortem ")]
    assert {shlex.split(line)[1] for line in lines} >= {"report", "logs", "diagnose"}
    for line in lines:
        build_parser().parse_args(shlex.split(line)[1:])  # exits 2 on an unknown flag
    assert "kubectl -n default describe tj pointgroup" in notes
    readers = values.get("logReaders", {}).get("create", False)
    assert ("pm-podmortem-log-access" in notes) == readers
    assert ("logReaders.create=true" in notes) == (not readers)
