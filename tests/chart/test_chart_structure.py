"""Names, labels, selectors, the operator/agent wiring, and the values' schema and docs."""

from __future__ import annotations

import json
import re
from typing import Any

import helm_python as helm
import pytest
import yaml

from . import _render

LONG_RELEASE = "a-very-long-release-name-for-a-training-platform-prod"  # 53: Helm's maximum
SELECTOR_KINDS = ("Deployment", "DaemonSet", "PodDisruptionBudget", "ServiceMonitor")


def selectors(rendered: _render.Rendered) -> list[tuple[str, dict[str, str]]]:
    found = []
    for obj in rendered.objects:
        if obj["kind"] in SELECTOR_KINDS:
            found.append((obj["kind"], obj["spec"]["selector"]["matchLabels"]))
        elif obj["kind"] == "Service":
            found.append((obj["kind"], obj["spec"]["selector"]))
    return found


def test_chart_label_never_in_selectors(rendered: _render.Rendered) -> None:
    found = selectors(rendered)
    assert found
    for kind, labels in found:
        assert "helm.sh/chart" not in labels, kind
        assert "app.kubernetes.io/version" not in labels, kind
        assert {"app.kubernetes.io/name", "app.kubernetes.io/instance"} <= labels.keys(), kind


def test_workload_selectors_match_their_pods(rendered: _render.Rendered) -> None:
    for workload in rendered.workloads():
        pod_labels = workload["spec"]["template"]["metadata"]["labels"]
        assert workload["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    for service in rendered.of_kind("Service"):
        matched = [
            w
            for w in rendered.workloads()
            if service["spec"]["selector"].items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(matched) == 1, service["metadata"]["name"]
        ports = {p["name"] for p in matched[0]["spec"]["template"]["spec"]["containers"][0]["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"fullnameOverride": "f" * 63},
        {"nameOverride": "n" * 63, "persistence": {"enabled": True}, "serviceMonitor": {"enabled": True}},
    ],
    ids=["long-release", "long-fullname", "long-name"],
)
def test_names_fit_63_characters(chart: helm.Chart, values: dict[str, Any]) -> None:
    rendered = _render.render(chart, values, name=LONG_RELEASE)
    for obj in rendered.objects:
        name = obj["metadata"]["name"]
        assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name
        for value in obj["metadata"].get("labels", {}).values():
            assert len(value) <= 63, (name, value)
    names = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in rendered.objects]
    assert len(names) == len(set(names)), "two objects got the same name after truncation"


def test_operator_and_agent_agree_on_the_wiring(rendered: _render.Rendered, scenario: str) -> None:
    values = _render.scenario_values(scenario)
    specs = dict(_render.pod_specs(rendered))
    if "agent" not in specs or "operator" not in specs:
        pytest.skip("needs both operator and agent")
    op_container, agent_container = specs["operator"]["containers"][0], specs["agent"]["containers"][0]
    op_env, agent_env = _render.env_of(op_container), _render.env_of(agent_container)
    agent_ports = {p["name"]: p["containerPort"] for p in agent_container["ports"]}
    assert op_env["PODMORTEM_AGENT_PORT"] == str(agent_ports["http"]) == agent_env["PODMORTEM_HTTP_PORT"]
    agent_labels = rendered.one("DaemonSet", "agent")["spec"]["template"]["metadata"]["labels"]
    wanted = dict(pair.split("=", 1) for pair in op_env["PODMORTEM_AGENT_SELECTOR"].split(","))
    assert wanted.items() <= agent_labels.items()
    assert op_env["PODMORTEM_AGENT_NAMESPACE"] == _render.NAMESPACE
    assert json.loads(op_env["PODMORTEM_FOREIGN_KINDS"]) == json.loads(agent_env["PODMORTEM_FOREIGN_KINDS"])
    token_on = values.get("agentToken", {}).get("enabled", True)
    assert ("PODMORTEM_AGENT_TOKEN_FILE" in op_env) == token_on == ("PODMORTEM_AGENT_TOKEN_FILE" in agent_env)
    if not token_on:
        return
    assert op_env["PODMORTEM_AGENT_TOKEN_FILE"] == agent_env["PODMORTEM_AGENT_TOKEN_FILE"]
    secret_names = set()
    for pod, container in ((specs["operator"], op_container), (specs["agent"], agent_container)):
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        (volume,) = [v for v in pod["volumes"] if "secret" in v and v["name"] == "agent-token"]
        mount = mounts[volume["name"]]
        assert mount["readOnly"] is True
        path = f"{mount['mountPath']}/{volume['secret']['items'][0]['path']}"
        assert path == op_env["PODMORTEM_AGENT_TOKEN_FILE"]
        secret_names.add(volume["secret"]["secretName"])
    (secret_name,) = secret_names
    existing = values.get("agentToken", {}).get("existingSecret")
    generated = [s for s in rendered.of_kind("Secret") if s["metadata"]["name"] == secret_name]
    if existing:
        assert secret_name == existing and generated == []
    else:
        key = values.get("agentToken", {}).get("secretKey", "token")
        assert len(generated) == 1 and len(generated[0]["data"][key]) >= 48


def test_operator_ports_and_probes(rendered: _render.Rendered) -> None:
    specs = dict(_render.pod_specs(rendered))
    container = specs["operator"]["containers"][0]
    env = _render.env_of(container)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert str(ports["http"]) == env["PODMORTEM_HTTP_PORT"]
    assert str(ports["metrics"]) == env["PODMORTEM_METRICS_PORT"]
    assert str(ports["health"]) == env["PODMORTEM_HEALTH_PORT"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert container["args"] == ["operator"]
    assert specs.get("agent", {"containers": [{"args": ["agent"]}]})["containers"][0]["args"] == ["agent"]


def test_log_store_volume(rendered: _render.Rendered, scenario: str) -> None:
    persistence = _render.scenario_values(scenario).get("persistence", {})
    deployment = rendered.one("Deployment", "operator")
    (logs,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "logs"]
    claims = rendered.of_kind("PersistentVolumeClaim")
    if persistence.get("enabled"):
        assert logs["persistentVolumeClaim"]["claimName"] == claims[0]["metadata"]["name"]
        assert claims[0]["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        rwx = "ReadWriteMany" in persistence.get("accessModes", [])
        assert deployment["spec"]["strategy"]["type"] == ("RollingUpdate" if rwx else "Recreate")
    else:
        assert logs["emptyDir"] == {"sizeLimit": persistence.get("emptyDirSizeLimit", "10Gi")}
        assert claims == []


def test_an_empty_size_limit_leaves_the_log_emptydir_unbounded(chart: helm.Chart) -> None:
    rendered = _render.render(chart, {"persistence": {"emptyDirSizeLimit": ""}})
    volumes = rendered.one("Deployment", "operator")["spec"]["template"]["spec"]["volumes"]
    assert next(v for v in volumes if v["name"] == "logs")["emptyDir"] == {}


def test_second_replica_gets_a_disruption_budget(chart: helm.Chart) -> None:
    rendered = _render.render(chart, _render.scenario_values("second-replica"))
    assert rendered.one("Deployment", "operator")["spec"]["replicas"] == 2
    assert rendered.one("PodDisruptionBudget")["spec"]["minAvailable"] == 1
    assert rendered.of_kind("PodDisruptionBudget") and not _render.render(chart, {}).of_kind(
        "PodDisruptionBudget"
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"operator": {"replicaCount": 2}}, "needs persistence.enabled=true"),
        (
            {"operator": {"replicaCount": 2}, "persistence": {"enabled": True}},
            "accessModes to include ReadWriteMany",
        ),
        (
            {
                "operator": {"replicaCount": 2, "leaderElection": {"enabled": False}},
                "persistence": {"enabled": True, "accessModes": ["ReadWriteMany"]},
            },
            "needs operator.leaderElection.enabled=true",
        ),
        (
            {"agent": {"kernelLog": {"source": "kmsg", "mountDevKmsg": False}}},
            "source=kmsg needs agent.kernelLog.mountDevKmsg=true",
        ),
    ],
)
def test_unworkable_setups_fail_with_a_reason(
    chart: helm.Chart, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm.HelmRenderError, match=re.escape(message)):
        chart.render(values, name=_render.RELEASE, namespace=_render.NAMESPACE)


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"logLevel": "loud"}, "/logLevel"),
        ({"agent": {"capabilities": ["SYSLOG", "SYS_ADMIN"]}}, "/agent/capabilities/1"),
        ({"agent": {"kernelLog": {"source": "journald"}}}, "/agent/kernelLog/source"),
        ({"agent": {"state": {"type": "pvc"}}}, "/agent/state/type"),
        ({"operator": {"http": {"auth": "basic"}}}, "/operator/http/auth"),
        ({"operator": {"replicaCount": "two"}}, "/operator/replicaCount"),
        ({"operator": {"memoryWarningRatio": 1.5}}, "/operator/memoryWarningRatio"),
        ({"operator": {"logStore": {"retention": "a week"}}}, "/operator/logStore/retention"),
        ({"foreignKinds": [{"group": "batch"}]}, "/foreignKinds/0"),
        ({"persistence": {"accessModes": ["ReadMostly"]}}, "/persistence/accessModes/0"),
        ({"operator": {"replicas": 2}}, "/operator"),  # a typo: additional property
        ({"operator": {"securityContext": {"privileged": True}}}, "/operator/securityContext/privileged"),
        ({"operator": {"podSecurityContext": {"runAsUser": 0}}}, "/operator/podSecurityContext/runAsUser"),
    ],
)
def test_schema_rejects_bad_values(chart: helm.Chart, values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.HelmValuesError) as caught:
        chart.validate_schema(values)
    assert f"'{where}'" in str(caught.value)
    # `helm install` and `helm template` validate too, before rendering anything.
    with pytest.raises(helm.HelmValuesError):
        chart.render(values, name=_render.RELEASE, namespace=_render.NAMESPACE)


def _schema_paths(schema: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    paths = {}
    for key, sub in schema.get("properties", {}).items():
        paths[prefix + key] = sub
        paths.update(_schema_paths(sub, f"{prefix}{key}."))
    return paths


def test_every_schema_property_is_described(chart: helm.Chart) -> None:
    assert chart.schema is not None
    missing = [path for path, sub in _schema_paths(chart.schema).items() if not sub.get("description")]
    assert missing == []


KEY_LINE = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z][A-Za-z0-9_]*):(?P<rest>.*)$")


def test_every_value_is_documented() -> None:
    """Each value has a `# --` comment on itself or on a map it belongs to (helm-docs' rule)."""
    lines = (_render.CHART_DIR / "values.yaml").read_text().splitlines()
    documented_at: list[tuple[int, bool]] = []  # (indent, documented) of the open maps
    undocumented = []
    inside_list_at: int | None = None  # indent of a list value's key: its items are one value
    for number, line in enumerate(lines):
        match = KEY_LINE.match(line)
        if not match:
            continue
        indent = len(match["indent"])
        if inside_list_at is not None and indent > inside_list_at:
            continue
        inside_list_at = None
        while documented_at and documented_at[-1][0] >= indent:
            documented_at.pop()
        above = number - 1
        while (
            above >= 0
            and lines[above].strip().startswith("#")
            and not lines[above].strip().startswith("# --")
        ):
            above -= 1
        own = above >= 0 and lines[above].strip().startswith("# --")
        inherited = any(doc for _, doc in documented_at)
        following = next(
            (ln for ln in lines[number + 1 :] if ln.strip() and not ln.strip().startswith("#")), ""
        )
        opens_map = (
            not match["rest"].strip()
            and KEY_LINE.match(following) is not None
            and (len(following) - len(following.lstrip()) > indent)
        )
        if following.lstrip().startswith("- ") and not match["rest"].strip():
            inside_list_at = indent
        if opens_map:
            documented_at.append((indent, own or inherited))
        elif not (own or inherited):
            undocumented.append(line.strip())
    assert undocumented == []


def test_schema_covers_every_default(chart: helm.Chart) -> None:
    assert chart.schema is not None
    paths = _schema_paths(chart.schema)

    def walk(values: dict[str, Any], prefix: str = "") -> list[str]:
        missing = []
        for key, value in values.items():
            path = prefix + key
            if path not in paths:
                missing.append(path)
            elif isinstance(value, dict) and paths[path].get("additionalProperties") is False:
                missing += walk(value, path + ".")
        return missing

    assert walk(chart.values) == []


def test_notes_print_commands_for_the_chosen_values(rendered: _render.Rendered, scenario: str) -> None:
    values = _render.scenario_values(scenario)
    notes = rendered.notes
    assert f"kubectl -n {_render.NAMESPACE} get pods -l app.kubernetes.io/instance={_render.RELEASE}" in notes
    for kind in values.get("foreignKinds", [{"group": "batch", "resource": "jobs"}]):
        assert f"annotate {kind['resource']}.{kind['group']} NAME podmortem.io/watch=true" in notes
    operator = rendered.one("Service", "operator")["metadata"]["name"]
    port = values.get("operator", {}).get("http", {}).get("port", 8080)
    assert f"port-forward svc/{operator} {port}:{port}" in notes
    assert ("Authorization: Bearer" in notes) == (
        values.get("operator", {}).get("http", {}).get("auth", "kubernetes") == "kubernetes"
    )
    assert ("emptyDir" in notes) == (not values.get("persistence", {}).get("enabled", False))
    agent_on = values.get("agent", {}).get("enabled", True)
    assert ("pod-security.kubernetes.io/enforce=privileged" in notes) == agent_on
    assert "{{" not in notes and "<no value>" not in notes


def test_ci_scenarios_are_yaml_maps() -> None:
    for scenario in _render.SCENARIOS:
        assert isinstance(yaml.safe_load((_render.CI_DIR / f"{scenario}-values.yaml").read_text()), dict)
