"""``podmortem agent``: every variable the Helm chart passes is documented in --help and honoured."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from podmortem.cli import agent as cli_agent
from podmortem.cli.main import build_parser, main
from podmortem.kube.owners import ForeignKind

REPO = Path(__file__).parents[2]
DAEMONSET = next((REPO / "charts").glob("*/templates/agent-daemonset.yaml"), None)


def _chart_env_names() -> set[str]:
    if DAEMONSET is None:
        pytest.skip("no chart in this checkout")
    return set(re.findall(r"- name: (PODMORTEM_[A-Z_]+)", DAEMONSET.read_text()))


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["agent", *argv])


def _help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        main(["agent", "--help"])
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines anywhere


def test_help_documents_every_variable_the_chart_passes(capsys: pytest.CaptureFixture[str]) -> None:
    names = _chart_env_names()
    assert "PODMORTEM_KERNEL_LOG_SOURCE" in names and "PODMORTEM_FOREIGN_KINDS" in names
    text = _help(capsys)
    assert {n for n in names if f"[env {n}]" not in text} == set()
    for words in ("syslog(2)", "CAP_SYSLOG", "podmortem.io/watch", "PyTorchJob", "exit codes"):
        assert words in text


def test_every_chart_variable_reaches_the_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    proc, cgroup = tmp_path / "host/proc", tmp_path / "host/sys/fs/cgroup"
    proc.mkdir(parents=True)
    cgroup.mkdir(parents=True)
    env = {
        "PODMORTEM_NODE_NAME": "gpu-node-7",
        "PODMORTEM_POD_NAME": "podmortem-agent-x1",
        "PODMORTEM_POD_NAMESPACE": "podmortem",
        "PODMORTEM_LOG_LEVEL": "debug",
        "PODMORTEM_NAMESPACES": "team-a,team-b",
        "PODMORTEM_FOREIGN_KINDS": '[{"group":"batch","resource":"jobs","version":"v1"},'
        '{"group":"kubeflow.org","resource":"pytorchjobs","version":""}]',
        "PODMORTEM_HTTP_PORT": "8091",
        "PODMORTEM_METRICS_PORT": "9091",
        "PODMORTEM_PROC_ROOT": str(proc),
        "PODMORTEM_CGROUP_ROOT": str(cgroup),
        "PODMORTEM_KERNEL_LOG_SOURCE": "syslog",
        "PODMORTEM_KMSG_PATH": "/host/dev/kmsg",
        "PODMORTEM_STATE_DIR": str(tmp_path / "state"),
        "PODMORTEM_SAMPLE_INTERVAL_SECONDS": "5",
        "PODMORTEM_SAMPLE_RING_SIZE": "720",
        "PODMORTEM_AGENT_TOKEN_FILE": "/var/run/secrets/podmortem/agent-token/token",
        "PODMORTEM_OOM_EVENTS": "true",
        "PODMORTEM_OOM_EVENT_INTERVAL_SECONDS": "30",
        "PODMORTEM_OOM_EVENTS_PER_MINUTE": "12",
        "PODMORTEM_OOM_METRIC_POD_LABELS": "app,team",
        "PODMORTEM_HTTP_HEADER_TIMEOUT_SECONDS": "4",
        "PODMORTEM_HTTP_MAX_CONNECTIONS_PER_PEER": "16",
        "PODMORTEM_FOLLOW_SELECTOR": "app=trainer,!canary",
        "PODMORTEM_FOLLOW_NAMESPACES": "team-a",
    }
    assert set(env) >= _chart_env_names()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    s = cli_agent.settings_from(_args())
    assert (s.node_name, s.pod_name, s.pod_namespace) == ("gpu-node-7", "podmortem-agent-x1", "podmortem")
    assert s.namespaces == ("team-a", "team-b")
    assert s.foreign_kinds == (
        ForeignKind("batch", "jobs", "v1"),
        ForeignKind("kubeflow.org", "pytorchjobs", ""),
    )
    assert (s.listen_port, s.metrics_port) == (8091, 9091)
    assert (s.proc_root, s.cgroup_root) == (proc, cgroup)
    assert (s.kernel_log_source, s.kmsg_path) == ("syslog", Path("/host/dev/kmsg"))
    assert s.state_dir == tmp_path / "state"
    assert (s.poll_interval_s, s.ring_size) == (5.0, 720)
    assert s.token_path == Path("/var/run/secrets/podmortem/agent-token/token")
    assert (s.oom_events, s.oom_event_interval_s, s.oom_events_per_minute) == (True, 30.0, 12)
    assert s.oom_metric_pod_labels == ("app", "team")
    assert (s.connections.header_timeout_s, s.connections.max_connections_per_peer) == (4.0, 16)
    assert s.follow_selector is not None and s.follow_selector.namespaces == ("team-a",)
    assert s.follow_selector.selects("team-a", {"app": "trainer"})
    assert not s.follow_selector.selects("team-a", {"app": "trainer", "canary": "1"})
    # The command line wins over the environment.
    s = cli_agent.settings_from(
        _args("--kernel-log-source", "auto", "--port", "7000", "--foreign-kinds", "[]")
    )
    assert (s.kernel_log_source, s.listen_port, s.foreign_kinds) == ("auto", 7000, ())


def test_defaults_without_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _chart_env_names() | {"PODMORTEM_STATIC_PODS", "KUBECONFIG"}:
        monkeypatch.delenv(name, raising=False)
    s = cli_agent.settings_from(_args("--node-name", "n"))
    assert (s.kernel_log_source, s.listen_port, s.metrics_port) == ("auto", 8090, 9090)
    assert (s.poll_interval_s, s.ring_size, s.token_path, s.namespaces) == (10.0, 360, None, ())
    assert s.follow_selector is None
    assert [str(k) for k in s.foreign_kinds] == [
        "jobs.batch", "pytorchjobs.kubeflow.org", "jobsets.jobset.x-k8s.io"
    ]
    assert s.state_dir == Path("/var/lib/podmortem/agent")


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        (
            "PODMORTEM_SAMPLE_INTERVAL_SECONDS",
            "ten",
            "PODMORTEM_SAMPLE_INTERVAL_SECONDS='ten': expected a positive",
        ),
        ("PODMORTEM_SAMPLE_INTERVAL_SECONDS", "0", "must be positive"),
        (
            "PODMORTEM_HTTP_PORT",
            "80000",
            "PODMORTEM_HTTP_PORT='80000': expected a port number (must be 0..65535)",
        ),
        ("PODMORTEM_KERNEL_LOG_SOURCE", "dmesg", "must be one of auto, kmsg, syslog, off"),
        ("PODMORTEM_FOREIGN_KINDS", "[{", "PODMORTEM_FOREIGN_KINDS='[{': expected a JSON list"),
        ("PODMORTEM_LOG_LEVEL", "loud", "PODMORTEM_LOG_LEVEL='loud': must be one of"),
        ("PODMORTEM_STATIC_PODS", "no-equals-sign", "expected UID=CGROUP_PATH"),
    ],
)
def test_bad_environment_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str, value: str, words: str
) -> None:
    monkeypatch.setenv("PODMORTEM_NODE_NAME", "n")
    monkeypatch.setenv(name, value)
    assert main(["agent"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("podmortem agent: ") and words in err


def test_node_name_is_required_without_static_pods(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("PODMORTEM_NODE_NAME", raising=False)
    monkeypatch.delenv("PODMORTEM_STATIC_PODS", raising=False)
    assert main(["agent"]) == 2
    assert "PODMORTEM_NODE_NAME" in capsys.readouterr().err


def test_a_bad_agent_variable_does_not_break_other_commands(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PODMORTEM_SAMPLE_RING_SIZE", "lots")
    with pytest.raises(SystemExit) as exit_info:
        main(["diagnose", "--help"])
    assert exit_info.value.code == 0


def test_missing_host_mounts_fall_back(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PODMORTEM_PROC_ROOT", str(tmp_path / "not-mounted/proc"))
    monkeypatch.setenv("PODMORTEM_CGROUP_ROOT", str(tmp_path / "not-mounted/cgroup"))
    s = cli_agent.settings_from(_args("--node-name", "n"))
    assert (s.proc_root, s.cgroup_root) == (Path("/proc"), Path("/sys/fs/cgroup"))
