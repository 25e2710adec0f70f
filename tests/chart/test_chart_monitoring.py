"""The chart's PrometheusRule and Grafana dashboard, checked with Prometheus' own tools.

``promtool check rules`` and ``promtool test rules`` (one unit test with input series per
alert, tests/chart/alerts_test.yaml) run on the rules as Helm renders them; every dashboard
query is parsed by promtool as a recording rule; every metric the rules and panels read is one
the operator, the agent or cAdvisor exports (the names the processes' registries expose); and
``promtool check metrics`` lints those registries' exposition.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from podmortem.agent.metrics import AgentMetrics
from podmortem.logs import metrics as log_metrics
from podmortem.operator import metrics as operator_metrics

from . import _render

ROOT = Path(__file__).resolve().parents[2]
ALERTS_TEST = Path(__file__).with_name("alerts_test.yaml")
RUNBOOK = "https://example.org/podmortem/docs/alerts.md"
#: Grafana's variables, replaced by values promtool can parse.
GRAFANA_VARS = {"$__rate_interval": "5m", "$__range": "1h", "$__interval": "1m",
                "$namespace": ".*", "$pod": ".*"}
#: Not podmortem's: what cAdvisor (the kubelet) exports.
CADVISOR = {"container_memory_working_set_bytes"}

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not installed (Debian package prometheus; hack/ci-install.sh installs it)",
)


@pytest.fixture(scope="module")
def monitoring(chart: helm.Chart) -> _render.Rendered:
    values = {
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True, "additionalLabels": {"release": "kube-prometheus-stack"},
                           "runbookBaseUrl": RUNBOOK},
        "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "Podmortem"}},
    }
    return _render.render(chart, values)


def _groups(rendered: _render.Rendered) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = rendered.one("PrometheusRule")["spec"]["groups"]
    return groups


def _alerts(rendered: _render.Rendered) -> list[dict[str, Any]]:
    return [rule for group in _groups(rendered) for rule in group["rules"] if "alert" in rule]


def _dashboard(rendered: _render.Rendered) -> dict[str, Any]:
    configmaps = [c for c in rendered.of_kind("ConfigMap") if "podmortem.json" in c.get("data", {})]
    assert len(configmaps) == 1
    board: dict[str, Any] = json.loads(configmaps[0]["data"]["podmortem.json"])
    return board


def _panel_exprs(board: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in board["panels"] if p["type"] != "row" for t in p["targets"]]


def _exported_names() -> set[str]:
    """Sample names the operator's and the agent's registries expose (counters with ``_total``)."""
    suffixes = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum")}
    return {family.name + suffix for registry in _registries().values() for family in registry.collect()
            for suffix in suffixes.get(family.type, ("",))}


def _registries() -> dict[str, CollectorRegistry]:
    """The registries each process serves on /metrics (the operator: the global one, and its store's)."""
    agent_registry = CollectorRegistry()
    agent = AgentMetrics(agent_registry)
    for gauge in agent.pod_gauges():
        gauge.labels("ml", "train-0", "uid-1").set(1)
    agent.oom_records.labels("ml", "train-0", "uid-1").inc()
    agent.sample_gaps.labels("cgroup-gone").inc()
    agent.kernel_log_source.labels("kmsg").set(1)

    class Store:
        lines_total, bytes_total, gaps_total, corrupt_bytes_total, full_since = 10, 900, 1, 0, None

    log_metrics.for_registry(REGISTRY)  # what the operator registers there, with operator_metrics
    assert operator_metrics.OOM_KILLS in REGISTRY._collector_to_names
    store_registry = CollectorRegistry()
    store_registry.register(log_metrics.StoreCollector(Store()))
    return {"operator": REGISTRY, "store": store_registry, "agent": agent_registry}


def _exposition() -> dict[str, str]:
    """The text each process serves on /metrics."""
    registries = _registries()
    return {
        "operator": b"".join(generate_latest(registries[r]) for r in ("operator", "store")).decode(),
        "agent": generate_latest(registries["agent"]).decode(),
    }


def _metric_names(expr: str) -> set[str]:
    without_strings = re.sub(r'"[^"]*"', '""', expr)
    return set(re.findall(r"\b(podmortem_[a-z_]+|container_[a-z_]+)\b", without_strings))


def _promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60, cwd=cwd, check=False)


def test_off_by_default(chart: helm.Chart) -> None:
    rendered = _render.render(chart, {})
    assert rendered.of_kind("PrometheusRule") == []
    assert [c for c in rendered.of_kind("ConfigMap") if "podmortem.json" in c.get("data", {})] == []


def test_rule_and_dashboard_follow_kube_prometheus_stack(monitoring: _render.Rendered) -> None:
    rule = monitoring.one("PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["metadata"]["labels"]["app.kubernetes.io/name"] == "podmortem"
    anchors = {m.lower() for m in re.findall(r"^## (\w+)", (ROOT / "docs" / "alerts.md").read_text(), re.M)}
    for alert in _alerts(monitoring):
        assert alert["labels"]["severity"] in ("warning", "critical")
        assert {"summary", "description", "runbook_url"} <= alert["annotations"].keys()
        anchor = alert["alert"].lower()
        assert alert["annotations"]["runbook_url"] == f"{RUNBOOK}#{anchor}"
        assert anchor in anchors, f"docs/alerts.md has no section for {alert['alert']}"
    configmap = next(c for c in monitoring.of_kind("ConfigMap") if "podmortem.json" in c.get("data", {}))
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "Podmortem"}
    # The operator's ServiceMonitor keeps the job's namespace label the alerts route by.
    monitor = monitoring.one("ServiceMonitor", "operator")
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True


def test_dashboard_is_a_grafana_dashboard_model(monitoring: _render.Rendered) -> None:
    board = _dashboard(monitoring)
    assert board["uid"] == "podmortem" and isinstance(board["schemaVersion"], int)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert (variables["datasource"]["type"], variables["datasource"]["query"]) == ("datasource", "prometheus")
    for name in ("namespace", "pod"):
        assert variables[name]["type"] == "query" and variables[name]["datasource"]["uid"] == "${datasource}"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24 and pos["h"] > 0
        covered = {(pos["x"] + dx, pos["y"] + dy) for dx in range(pos["w"]) for dy in range(pos["h"])}
        assert not covered & cells, f"panel {panel['title']!r} overlaps another"
        cells |= covered
        if panel["type"] == "row":
            continue
        assert panel["type"] in ("timeseries", "stat", "bargauge")
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in panel["targets"]]
        assert panel["targets"] and len(refs) == len(set(refs))
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}" and target["expr"].strip()
    exprs = " ".join(e for _, e in _panel_exprs(board))
    assert "container_memory_working_set_bytes" in exprs and "podmortem_oom_kills_total" in exprs


def test_rules_and_panels_read_only_exported_metrics(monitoring: _render.Rendered) -> None:
    exported = _exported_names() | CADVISOR
    used = {name for alert in _alerts(monitoring) for name in _metric_names(alert["expr"])}
    used |= {name for _, expr in _panel_exprs(_dashboard(monitoring)) for name in _metric_names(expr)}
    assert used - exported == set()


@needs_promtool
def test_promtool_checks_and_unit_tests_the_rules(monitoring: _render.Rendered, tmp_path: Path) -> None:
    rules = tmp_path / "podmortem-rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": _groups(monitoring)}))
    checked = _promtool("check", "rules", str(rules))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(_alerts(monitoring))} rules found" in checked.stdout
    spec = yaml.safe_load(ALERTS_TEST.read_text())
    tested = {case["alertname"] for test in spec["tests"] for case in test.get("alert_rule_test", [])}
    assert tested == {a["alert"] for a in _alerts(monitoring)}  # one unit test (at least) per alert
    spec["rule_files"] = [rules.name]
    # Annotations are checked above (and their templates by check rules); the unit tests compare labels.
    groups = copy.deepcopy(_groups(monitoring))
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    rules.write_text(yaml.safe_dump({"groups": groups}))
    (tmp_path / "alerts_test.yaml").write_text(yaml.safe_dump(spec))
    result = _promtool("test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_every_dashboard_query_parses(monitoring: _render.Rendered, tmp_path: Path) -> None:
    rules = []
    for i, (title, expr) in enumerate(_panel_exprs(_dashboard(monitoring))):
        for var, value in GRAFANA_VARS.items():
            expr = expr.replace(var, value)
        assert "$" not in expr, f"{title}: an unknown Grafana variable in {expr}"
        rules.append({"record": f"podmortem:dashboard_panel_{i}", "expr": expr})
    file = tmp_path / "dashboard-queries.yaml"
    file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = _promtool("check", "rules", str(file))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
@pytest.mark.parametrize("process", ["operator", "agent"])
def test_promtool_check_metrics(process: str) -> None:
    text = _exposition()[process]
    assert "podmortem_" in text
    assert PROMTOOL is not None
    result = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
