"""A bad flag or ``PODMORTEM_*`` variable stops ``podmortem operator|agent|logs`` with one line, exit 2.

Each case runs the real command (``python -m podmortem.cli.main``) in an environment with no
kubeconfig, no in-cluster variables and no other ``PODMORTEM_*`` setting: the check must come
before any connection to Kubernetes. The line names the flag and its variable; nothing else is
printed, never a traceback. The other way round, every value the Helm chart renders (each CI
scenario, and the schema's extremes) is accepted.
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from podmortem.cli import agent as agent_cli
from podmortem.cli import logs as logs_cli
from podmortem.cli import operator as operator_cli
from podmortem.cli import options
from podmortem.cli.main import build_parser

#: Variables that would point a process at a cluster.
_CLUSTER_ENV = ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str


def podmortem(*argv: str, env: Mapping[str, str] | None = None, home: Path) -> Run:
    clean = {
        k: v for k, v in os.environ.items() if k not in _CLUSTER_ENV and not k.startswith("PODMORTEM_")
    }
    clean.update(HOME=str(home), **(env or {}))
    done = subprocess.run(
        [sys.executable, "-m", "podmortem.cli.main", *argv],
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr)


def assert_one_line_error(run: Run, command: str, *names: str) -> str:
    """Exit 2, nothing on stdout, one non-empty line on stderr naming each of ``names``."""
    assert "Traceback" not in run.stderr, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), f"expected one line on stderr, got {run.stderr!r}"
    line = lines[0]
    assert run.returncode == 2, (run.returncode, line)
    assert run.stdout == ""
    assert line.startswith(f"podmortem {command}: "), line
    for name in names:
        assert re.search(re.escape(name) + r"(?![\w-])", line), f"{name} not named in: {line}"
    return line


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port some other process listens on, on every IPv4 address."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


# -- podmortem operator --------------------------------------------------------------------------

#: (argv, environment, the flag and the variable the error must name)
OPERATOR_CASES: list[tuple[list[str], dict[str, str], tuple[str, ...]]] = [
    ([], {"PODMORTEM_AGENT_RECORD_WAIT_SECONDS": "abc"},
     ("--agent-record-wait", "PODMORTEM_AGENT_RECORD_WAIT_SECONDS")),
    (["--agent-record-wait", "-1"], {}, ("--agent-record-wait", "PODMORTEM_AGENT_RECORD_WAIT_SECONDS")),
    (["--memory-warning-ratio", "7"], {}, ("--memory-warning-ratio", "PODMORTEM_MEMORY_WARNING_RATIO")),
    ([], {"PODMORTEM_MEMORY_WARNING_RATIO": "0"},
     ("--memory-warning-ratio", "PODMORTEM_MEMORY_WARNING_RATIO")),
    (["--early-warning-epochs", "-3"], {}, ("--early-warning-epochs", "PODMORTEM_EARLY_WARNING_EPOCHS")),
    ([], {"PODMORTEM_EARLY_WARNING_EPOCHS": "2.5"},
     ("--early-warning-epochs", "PODMORTEM_EARLY_WARNING_EPOCHS")),
    ([], {"PODMORTEM_LEADER_ELECTION": "maybe"}, ("--leader-election", "PODMORTEM_LEADER_ELECTION")),
    ([], {"PODMORTEM_PATCH_PODS": "nope"}, ("--no-patch-pods", "PODMORTEM_PATCH_PODS")),
    ([], {"PODMORTEM_AGENT_ENABLED": "2"}, ("--no-agent", "PODMORTEM_AGENT_ENABLED")),
    (["--http-port", "70000"], {}, ("--http-port", "PODMORTEM_HTTP_PORT")),
    ([], {"PODMORTEM_METRICS_PORT": "-1"}, ("--metrics-port", "PODMORTEM_METRICS_PORT")),
    ([], {"PODMORTEM_HEALTH_PORT": "abc"}, ("--health-port", "PODMORTEM_HEALTH_PORT")),
    (["--agent-port", "0"], {}, ("--agent-port", "PODMORTEM_AGENT_PORT")),
    (["--status-max-bytes", "10"], {}, ("--status-max-bytes", "PODMORTEM_REPORT_STATUS_MAX_BYTES")),
    ([], {"PODMORTEM_REPORT_ANNOTATION_MAX_BYTES": "-5"},
     ("--annotation-max-bytes", "PODMORTEM_REPORT_ANNOTATION_MAX_BYTES")),
    ([], {"PODMORTEM_STATUS_REFRESH_SECONDS": "-1"},
     ("--status-refresh-seconds", "PODMORTEM_STATUS_REFRESH_SECONDS")),
    (["--leader-election-lease-duration", "0"], {},
     ("--leader-election-lease-duration", "PODMORTEM_LEADER_ELECTION_LEASE_DURATION_SECONDS")),
    ([], {"PODMORTEM_LEADER_ELECTION_RETRY_PERIOD_SECONDS": "soon"},
     ("--leader-election-retry-period", "PODMORTEM_LEADER_ELECTION_RETRY_PERIOD_SECONDS")),
    (["--leader-election", "--leader-election-retry-period", "12"], {},
     ("--leader-election-retry-period", "PODMORTEM_LEADER_ELECTION_RETRY_PERIOD_SECONDS",
      "--leader-election-renew-deadline", "PODMORTEM_LEADER_ELECTION_RENEW_DEADLINE_SECONDS")),
    ([], {"PODMORTEM_HTTP_AUTH": "open"}, ("--http-auth", "PODMORTEM_HTTP_AUTH")),
    ([], {"PODMORTEM_PROMETHEUS_URL": "prometheus:9090"}, ("--prometheus-url", "PODMORTEM_PROMETHEUS_URL")),
    (["--log-base-url", "ftp://x"], {}, ("--log-base-url", "PODMORTEM_LOG_BASE_URL")),
    (["--log-retention", "forever"], {}, ("--log-retention", "PODMORTEM_LOG_RETENTION")),
    (["-n", "Team_A"], {}, ("--namespace", "PODMORTEM_NAMESPACES")),
    ([], {"PODMORTEM_NAMESPACES": "ok,Not OK"}, ("--namespace", "PODMORTEM_NAMESPACES")),
    ([], {"PODMORTEM_AGENT_NAMESPACE": "-x"}, ("--agent-namespace", "PODMORTEM_AGENT_NAMESPACE")),
    (["--agent-selector", " "], {}, ("--agent-selector", "PODMORTEM_AGENT_SELECTOR")),
    (["--store-dir", ""], {}, ("--store-dir", "PODMORTEM_LOG_STORE_DIR")),
    (["--foreign-kinds", "[bad"], {}, ("--foreign-kinds", "PODMORTEM_FOREIGN_KINDS")),
    ([], {"PODMORTEM_FOREIGN_KINDS": '["jobs.batch"]'}, ("--foreign-kinds", "PODMORTEM_FOREIGN_KINDS")),
    (["--follow-selector", "app in (trainer"], {}, ("--follow-selector", "PODMORTEM_FOLLOW_SELECTOR")),
    ([], {"PODMORTEM_FOLLOW_SELECTOR": "app=trainer,"}, ("--follow-selector", "PODMORTEM_FOLLOW_SELECTOR")),
    ([], {"PODMORTEM_FOLLOW_SELECTOR": "Team/app=x"}, ("--follow-selector", "PODMORTEM_FOLLOW_SELECTOR")),
    ([], {"PODMORTEM_FOLLOW_NAMESPACES": "ok,Not_OK"}, ("--follow-namespace", "PODMORTEM_FOLLOW_NAMESPACES")),
    (["-n", "team-a", "--follow-namespace", "team-b"], {},
     ("--follow-namespace", "PODMORTEM_FOLLOW_NAMESPACES", "--namespace", "PODMORTEM_NAMESPACES")),
    (["--http-port", "9090"], {},
     ("--http-port", "PODMORTEM_HTTP_PORT", "--metrics-port", "PODMORTEM_METRICS_PORT")),
    ([], {"PODMORTEM_LOG_LEVEL": "loud"}, ("PODMORTEM_LOG_LEVEL",)),
    ([], {"PODMORTEM_SERVICE_NAME": "Not_A_Service"}, ("PODMORTEM_SERVICE_NAME",)),
]


@pytest.mark.parametrize(("argv", "env", "names"), OPERATOR_CASES, ids=lambda x: str(x)[:60])
def test_operator_refuses_a_bad_value(
    argv: list[str], env: dict[str, str], names: tuple[str, ...], home: Path, tmp_path: Path
) -> None:
    # A writable store, so that only the bad value can fail (before any kubeconfig is read).
    base = [] if "--store-dir" in argv else ["--store-dir", str(tmp_path / "store")]
    assert_one_line_error(podmortem("operator", *base, *argv, env=env, home=home), "operator", *names)


def test_foreign_kinds_error_says_what_is_accepted(home: Path) -> None:
    line = assert_one_line_error(
        podmortem("operator", "--foreign-kinds", "[bad", home=home), "operator", "--foreign-kinds"
    )
    assert "JSON" in line and '"resource":"jobs"' in line and "jobs.batch" in line
    assert "not valid JSON" in line


def test_operator_store_dir_that_cannot_be_created(home: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    run = podmortem("operator", "--http-port", "0", "--metrics-port", "0", "--health-port", "0",
                    env={"PODMORTEM_LOG_STORE_DIR": str(blocker / "store")}, home=home)
    line = assert_one_line_error(run, "operator", "--store-dir", "PODMORTEM_LOG_STORE_DIR")
    assert str(blocker / "store") in line


@pytest.mark.parametrize(
    ("flag", "env"),
    [("--http-port", "PODMORTEM_HTTP_PORT"), ("--metrics-port", "PODMORTEM_METRICS_PORT"),
     ("--health-port", "PODMORTEM_HEALTH_PORT")],
)
def test_operator_port_in_use(flag: str, env: str, busy_port: int, home: Path, tmp_path: Path) -> None:
    ports = {"--http-port": "0", "--metrics-port": "0", "--health-port": "0", flag: str(busy_port)}
    argv = [x for pair in ports.items() for x in pair]
    run = podmortem("operator", "--store-dir", str(tmp_path / "store"), *argv, home=home)
    line = assert_one_line_error(run, "operator", flag, env)
    assert str(busy_port) in line and "in use" in line.lower()


def test_operator_help_survives_a_bad_variable(home: Path) -> None:
    run = podmortem("operator", "--help", env={"PODMORTEM_AGENT_RECORD_WAIT_SECONDS": "abc"}, home=home)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert "--agent-record-wait" in run.stdout


def test_a_flag_wins_over_a_bad_variable(home: Path, tmp_path: Path) -> None:
    """A flag replaces its variable: the variable is then not read at all (the run goes on to the
    kubeconfig, which this environment lacks: that is a different, later error)."""
    run = podmortem("operator", "--store-dir", str(tmp_path / "store"), "--http-port", "0", "--metrics-port",
                    "0", "--health-port", "0", "--memory-warning-ratio", "0.8",
                    env={"PODMORTEM_MEMORY_WARNING_RATIO": "7"}, home=home)
    assert "PODMORTEM_MEMORY_WARNING_RATIO" not in run.stderr
    assert "Traceback" not in run.stderr


# -- podmortem agent -----------------------------------------------------------------------------

NODE = {"PODMORTEM_NODE_NAME": "gpu-node-1"}
AGENT_CASES: list[tuple[list[str], dict[str, str], tuple[str, ...]]] = [
    ([], {**NODE, "PODMORTEM_SAMPLE_INTERVAL_SECONDS": "ten"},
     ("--interval", "PODMORTEM_SAMPLE_INTERVAL_SECONDS")),
    (["--interval", "0"], NODE, ("--interval", "PODMORTEM_SAMPLE_INTERVAL_SECONDS")),
    (["--ring-size", "0"], NODE, ("--ring-size", "PODMORTEM_SAMPLE_RING_SIZE")),
    ([], {**NODE, "PODMORTEM_HTTP_PORT": "80000"}, ("--port", "PODMORTEM_HTTP_PORT")),
    (["--metrics-port", "-1"], NODE, ("--metrics-port", "PODMORTEM_METRICS_PORT")),
    ([], {**NODE, "PODMORTEM_KERNEL_LOG_SOURCE": "dmesg"},
     ("--kernel-log-source", "PODMORTEM_KERNEL_LOG_SOURCE")),
    (["--foreign-kinds", "[bad"], NODE, ("--foreign-kinds", "PODMORTEM_FOREIGN_KINDS")),
    (["--static-pod", "no-equals-sign"], {}, ("--static-pod", "PODMORTEM_STATIC_PODS")),
    ([], {"PODMORTEM_STATIC_PODS": "uid=relative/path"}, ("--static-pod", "PODMORTEM_STATIC_PODS")),
    ([], {**NODE, "PODMORTEM_SYSLOG_POLL_SECONDS": "0"}, ("--syslog-poll", "PODMORTEM_SYSLOG_POLL_SECONDS")),
    (["--pod-refresh", "-1"], NODE, ("--pod-refresh", "PODMORTEM_POD_REFRESH_SECONDS")),
    ([], {**NODE, "PODMORTEM_OWNER_CACHE_SECONDS": "inf"},
     ("--owner-cache", "PODMORTEM_OWNER_CACHE_SECONDS")),
    ([], {**NODE, "PODMORTEM_LOG_LEVEL": "loud"}, ("--log-level", "PODMORTEM_LOG_LEVEL")),
    ([], {**NODE, "PODMORTEM_NAMESPACES": "a,B"}, ("--namespaces", "PODMORTEM_NAMESPACES")),
    ([], {**NODE, "PODMORTEM_FOLLOW_SELECTOR": "app in (x"},
     ("--follow-selector", "PODMORTEM_FOLLOW_SELECTOR")),
    ([], {**NODE, "PODMORTEM_NAMESPACES": "a", "PODMORTEM_FOLLOW_NAMESPACES": "b"},
     ("--follow-namespaces", "PODMORTEM_FOLLOW_NAMESPACES", "--namespaces", "PODMORTEM_NAMESPACES")),
    (["--node-name", "Not A Node"], {}, ("--node-name", "PODMORTEM_NODE_NAME")),
    ([], {}, ("--node-name", "PODMORTEM_NODE_NAME")),
    (["--host", "no-such-host.invalid", "--port", "0", "--metrics-port", "0"], NODE,
     ("--host", "PODMORTEM_LISTEN_HOST")),
]


@pytest.mark.parametrize(("argv", "env", "names"), AGENT_CASES, ids=lambda x: str(x)[:60])
def test_agent_refuses_a_bad_value(
    argv: list[str], env: dict[str, str], names: tuple[str, ...], home: Path
) -> None:
    assert_one_line_error(podmortem("agent", *argv, env=env, home=home), "agent", *names)


def test_agent_port_in_use(busy_port: int, home: Path, tmp_path: Path) -> None:
    run = podmortem("agent", "--state-dir", str(tmp_path / "state"), "--metrics-port", "0",
                    env={**NODE, "PODMORTEM_HTTP_PORT": str(busy_port)}, home=home)
    line = assert_one_line_error(run, "agent", "--port", "PODMORTEM_HTTP_PORT")
    assert str(busy_port) in line


# -- podmortem logs ------------------------------------------------------------------------------

LOGS_CASES: list[tuple[list[str], tuple[str, ...]]] = [
    (["--read-timeout", "-5"], ("--read-timeout",)),
    (["--read-timeout", "abc"], ("--read-timeout",)),
    (["--backoff-min", "0"], ("--backoff-min",)),
    (["--backoff-max", "1e9"], ("--backoff-max",)),
    (["--backoff-min", "60"], ("--backoff-min", "--backoff-max")),
    (["--backoff-min", "5", "--backoff-max", "3"], ("--backoff-min", "--backoff-max")),
    (["-n", "Bad_NS"], ("--namespace",)),
    (["-c", "main", "-c", "no spaces"], ("--container",)),
]


@pytest.mark.parametrize(("argv", "names"), LOGS_CASES, ids=lambda x: str(x)[:60])
def test_logs_refuses_a_bad_value(argv: list[str], names: tuple[str, ...], home: Path) -> None:
    assert_one_line_error(podmortem("logs", "some-pod", *argv, home=home), "logs", *names)


def test_logs_store_that_cannot_be_created(home: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    run = podmortem("logs", "some-pod", "--store", str(blocker / "store"), home=home)
    assert_one_line_error(run, "logs", "--store")


def test_logs_bad_pod_name(home: Path) -> None:
    assert_one_line_error(podmortem("logs", "Some_Pod", home=home), "logs", "POD")


# -- --help names every variable -----------------------------------------------------------------


def _help(command: str, home: Path) -> str:
    run = podmortem(command, "--help", home=home)
    assert run.returncode == 0, run.stderr
    return " ".join(run.stdout.split())  # argparse wraps lines anywhere


@pytest.mark.parametrize(
    ("command", "module_options"),
    [("operator", operator_cli.OPTIONS), ("agent", agent_cli.OPTIONS)],
)
def test_help_shows_every_flags_variable_and_default(
    command: str, module_options: tuple[options.Option[Any], ...], home: Path
) -> None:
    text = _help(command, home)
    flagged = [opt for opt in module_options if opt.flags and opt.env]
    assert len(flagged) >= 20
    for opt in flagged:
        after = text.split(f"{opt.flags[-1]} ", 1)
        assert len(after) == 2, f"{opt.flags[-1]} missing from --help"
        assert f"[env {opt.env}]" in text, f"{opt.env} missing from --help"
    assert "(default: 8080) [env PODMORTEM_HTTP_PORT]" in text or command == "agent"
    assert "(default: 8090) [env PODMORTEM_HTTP_PORT]" in text or command == "operator"


def test_operator_help_names_every_variable_the_chart_sets(home: Path) -> None:
    chart = Path(__file__).resolve().parents[2] / "charts/podmortem/templates/operator-deployment.yaml"
    names = set(re.findall(r"name: (PODMORTEM_[A-Z_]+)", chart.read_text()))
    text = _help("operator", home)
    assert {n for n in names if n not in text} == set()


def test_logs_help_shows_defaults(home: Path) -> None:
    text = _help("logs", home)
    assert "(default: 120)" in text and "(default: 2)" in text and "(default: 30)" in text


# -- every value the chart renders is accepted ---------------------------------------------------

#: Values at the edges of values.schema.json, on top of each CI scenario.
EXTREMES: list[dict[str, Any]] = [
    {
        "logLevel": "error",
        "watchNamespaces": ["team-a", "b"],
        "foreignKinds": [{"group": "kubeflow.org", "resource": "pytorchjobs"},
                         {"group": "jobset.x-k8s.io", "version": "v1alpha2", "resource": "jobsets"}],
        "operator": {
            "http": {"port": 65535}, "metrics": {"port": 1}, "health": {"port": 2},
            "reports": {"statusMaxBytes": 262144, "annotationMaxBytes": 65536},
            "memoryWarningRatio": 1, "earlyWarningEpochs": 1000, "statusRefreshSeconds": 3600,
            "agentRecordWaitSeconds": 600, "prometheusUrl": "https://prometheus.monitoring:9090/prom",
            "logStore": {"retention": "1s"},
            "leaderElection": {"enabled": True, "leaseDurationSeconds": 3, "renewDeadlineSeconds": 2,
                               "retryPeriodSeconds": 1},
        },
        "agent": {"http": {"port": 1}, "metrics": {"port": 65535},
                  "sampling": {"intervalSeconds": 3600, "ringSize": 100000},
                  "kernelLog": {"source": "kmsg", "mountDevKmsg": True}},
    },
    {
        "foreignKinds": [],
        "operator": {
            "reports": {"statusMaxBytes": 1024, "annotationMaxBytes": 256},
            "memoryWarningRatio": 0.01, "earlyWarningEpochs": 1, "statusRefreshSeconds": 0,
            "agentRecordWaitSeconds": 0.5, "logStore": {"retention": "365d"},
            "rbac": {"patchPods": False},
        },
        "agent": {"enabled": False, "sampling": {"intervalSeconds": 1, "ringSize": 1}},
    },
    {"operator": {"agentRecordWaitSeconds": 0}, "agentToken": {"enabled": True}},
]


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), dict) \
            else copy.deepcopy(value)
    return out


def _chart_envs() -> list[tuple[str, str, dict[str, str]]]:
    helm = pytest.importorskip("helm_python")
    from tests.chart import _render

    found: list[tuple[str, str, dict[str, str]]] = []
    with helm.Chart.load(_render.CHART_DIR) as chart:
        for scenario in _render.SCENARIOS:
            base = _render.scenario_values(scenario)
            for i, extra in enumerate([{}, *EXTREMES]):
                rendered = _render.render(chart, _merge(base, extra))
                for _, spec in _render.pod_specs(rendered):
                    for container in spec["containers"]:
                        env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
                        # What the downward API fills in.
                        env.setdefault("PODMORTEM_NODE_NAME", "gpu-node-1")
                        env.setdefault("PODMORTEM_POD_NAME", "pm-podmortem-operator-7d4b9-x2x1q")
                        env.setdefault("PODMORTEM_POD_NAMESPACE", _render.NAMESPACE)
                        found.append((f"{scenario}+{i}", container["args"][0], env))
    return found


def test_every_value_the_chart_renders_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    envs = _chart_envs()
    assert {command for _, command, _ in envs} == {"operator", "agent"}
    for name, command, env in envs:
        for key in [k for k in os.environ if k.startswith("PODMORTEM_")]:
            monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        args = build_parser().parse_args([command])
        try:
            if command == "operator":
                options.Values(args).value(operator_cli.LOG_LEVEL)
                settings = operator_cli.settings_from(args)
                assert settings.log_http_port == int(env["PODMORTEM_HTTP_PORT"])
            else:
                options.Values(args).value(agent_cli.LOG_LEVEL)
                agent_cli.settings_from(args)
        except options.SettingError as exc:
            pytest.fail(f"{name} ({command}): the chart's environment is refused: {exc}")


def test_empty_variables_count_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for option in operator_cli.OPTIONS:
        if option.env:
            monkeypatch.setenv(option.env, "")
    settings = operator_cli.settings_from(build_parser().parse_args(["operator"]))
    assert settings.log_http_auth is True and settings.patch_pods is True
    assert settings.prometheus.url is None and settings.agent.token_path is None
    assert (settings.log_http_port, settings.metrics_port, settings.health_port) == (8080, 9090, 8081)


def test_booleans_accept_the_usual_words(monkeypatch: pytest.MonkeyPatch) -> None:
    for word, expected in [("TRUE", True), ("Yes", True), ("1", True), ("false", False), ("NO", False),
                           ("0", False)]:
        monkeypatch.setenv("PODMORTEM_PATCH_PODS", word)
        monkeypatch.setenv("PODMORTEM_LEADER_ELECTION", word)
        settings = operator_cli.settings_from(build_parser().parse_args(["operator"]))
        assert settings.patch_pods is expected
        assert (settings.leader_election is not None) is expected


def test_logs_settings_reach_the_follower() -> None:
    args = build_parser().parse_args(["logs", "p", "--read-timeout", "0.3", "--backoff-min", "0.005",
                                      "--backoff-max", "0.02"])
    settings = logs_cli.follow_settings(args)
    assert (settings.read_timeout_s, settings.backoff_min_s, settings.backoff_max_s) == (0.3, 0.005, 0.02)


def test_values_say_where_a_value_came_from() -> None:
    option = options.Option(("--x",), "PODMORTEM_X", options.port(), "1")
    args = argparse.Namespace(x=None)
    assert options.Values(args, {"PODMORTEM_X": "99999"}).where(option) == "--x / PODMORTEM_X='99999'"
    assert options.Values(argparse.Namespace(x="7"), {}).where(option) == "--x='7' / PODMORTEM_X"
    assert options.Values(args, {}).where(option) == "--x / PODMORTEM_X (default 1)"
    with pytest.raises(options.SettingError, match=r"^--x / PODMORTEM_X='99999': expected a port number"):
        options.Values(args, {"PODMORTEM_X": "99999"}).value(option)
