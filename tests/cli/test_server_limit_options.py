"""Each server's deadlines and caps from flags and variables: read through, checked, refused in one line."""

from __future__ import annotations

import pytest

from podmortem.cli import agent as agent_cli
from podmortem.cli import operator as operator_cli
from podmortem.cli.main import build_parser
from podmortem.cli.options import SettingError
from podmortem.connection_limits import ServerLimits


def _agent(*argv: str) -> ServerLimits:
    args = build_parser("agent").parse_args(["agent", "--node-name", "n1", *argv])
    return agent_cli.settings_from(args).connections


def test_flags_and_variables_set_the_agents_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PODMORTEM_HTTP_IDLE_TIMEOUT_SECONDS", "7.5")
    monkeypatch.setenv("PODMORTEM_HTTP_MAX_CONNECTIONS", "100")
    limits = _agent("--http-header-timeout", "3", "--http-max-connections-per-peer", "9")
    assert limits == ServerLimits(header_timeout_s=3, idle_timeout_s=7.5, max_connections=100,
                                  max_connections_per_peer=9)


def test_unset_is_each_servers_own_default() -> None:
    assert _agent() == ServerLimits()
    args = build_parser("operator").parse_args(["operator"])
    settings = operator_cli.settings_from(args)
    assert settings.log_server.connections == ServerLimits()
    assert settings.probe_connections == ServerLimits()


def test_operator_servers_are_set_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PODMORTEM_PROBE_HEADER_TIMEOUT_SECONDS", "2")
    args = build_parser("operator").parse_args(["operator", "--http-max-connections", "40",
                                                "--http-max-connections-per-peer", "40"])
    settings = operator_cli.settings_from(args)
    assert settings.log_server.connections == ServerLimits(max_connections=40, max_connections_per_peer=40)
    assert settings.probe_connections == ServerLimits(header_timeout_s=2)


@pytest.mark.parametrize(("argv", "env", "says"), [
    (["--http-max-connections-per-peer", "65"], {"PODMORTEM_HTTP_MAX_CONNECTIONS": "64"},
     "--http-max-connections-per-peer='65' / PODMORTEM_HTTP_MAX_CONNECTIONS_PER_PEER and "
     "--http-max-connections / PODMORTEM_HTTP_MAX_CONNECTIONS='64': the per-peer cap (65) must not exceed"),
    (["--http-header-timeout", "0"], {}, "--http-header-timeout='0' / PODMORTEM_HTTP_HEADER_TIMEOUT_SECONDS: "
     "expected a positive number of seconds"),
    ([], {"PODMORTEM_HTTP_BODY_TIMEOUT_SECONDS": "soon"}, "PODMORTEM_HTTP_BODY_TIMEOUT_SECONDS='soon'"),
    (["--http-max-connections", "0"], {}, "expected a whole number of connections"),
])
def test_unusable_values_are_one_line(monkeypatch: pytest.MonkeyPatch, argv: list[str], env: dict[str, str],
                                      says: str) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingError) as caught:
        _agent(*argv)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_oom_event_settings_from_flags_and_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PODMORTEM_OOM_METRIC_POD_LABELS", "app, team ,")
    args = build_parser("agent").parse_args(["agent", "--node-name", "n1", "--oom-events",
                                             "--oom-event-interval", "0", "--oom-events-per-minute", "5"])
    settings = agent_cli.settings_from(args)
    assert settings.oom_events and settings.oom_event_interval_s == 0 and settings.oom_events_per_minute == 5
    assert settings.oom_metric_pod_labels == ("app", "team")
    plain = build_parser("agent").parse_args(["agent", "--node-name", "n1"])
    assert agent_cli.settings_from(plain).oom_events is False
    monkeypatch.setenv("PODMORTEM_OOM_METRIC_POD_LABELS", ",".join(f"l{i}" for i in range(11)))
    with pytest.raises(SettingError, match="at most 10 label keys, got 11"):
        agent_cli.settings_from(args)
