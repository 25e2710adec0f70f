"""``podmortem operator`` takes every setting the Helm chart passes as a PODMORTEM_* variable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from podmortem.cli import main as cli_main
from podmortem.cli import operator as operator_cli
from podmortem.operator.settings import OperatorSettings

CHART_DEPLOYMENT = Path(__file__).resolve().parents[2] / "charts/podmortem/templates/operator-deployment.yaml"


def _settings(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], *argv: str) -> OperatorSettings:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # Defaults are read from the environment when the parser is built.
    args = cli_main.build_parser().parse_args(["operator", *argv])
    return operator_cli.settings_from(args)


def test_every_variable_the_chart_sets_is_read() -> None:
    chart_vars = set(re.findall(r"name: (PODMORTEM_[A-Z_]+)", CHART_DEPLOYMENT.read_text()))
    source = Path(operator_cli.__file__).read_text()
    # Leader-election timings are read through one f-string per suffix.
    read = set(re.findall(r"PODMORTEM_[A-Z_]+", source)) | {
        f"PODMORTEM_LEADER_ELECTION_{suffix}" for suffix in re.findall(r'"([A-Z_]+_SECONDS)"', source)
    }
    assert chart_vars, "no PODMORTEM_* variables found in the chart"
    assert sorted(chart_vars - read) == []


def test_log_retention_and_pod_patching_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"PODMORTEM_LOG_RETENTION": "3d,500Mi", "PODMORTEM_PATCH_PODS": "false"}
    settings = _settings(monkeypatch, env)
    assert settings.log_retention_s == 3 * 86400
    assert settings.log_retention_bytes == 500 * 2**20
    assert settings.patch_pods is False


def test_age_only_retention_keeps_the_size_default(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(monkeypatch, {"PODMORTEM_LOG_RETENTION": "12h"})
    assert settings.log_retention_s == 12 * 3600
    assert settings.log_retention_bytes == 1 << 30
    assert settings.patch_pods is True


def test_a_flag_wins_over_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(monkeypatch, {"PODMORTEM_LOG_RETENTION": "12h"}, "--log-retention", "2d")
    assert settings.log_retention_s == 2 * 86400


def test_a_bad_retention_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="PODMORTEM_LOG_RETENTION='forever'"):
        _settings(monkeypatch, {"PODMORTEM_LOG_RETENTION": "forever"})
