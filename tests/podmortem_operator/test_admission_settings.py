"""`podmortem operator` reads the sidecar and webhook settings the chart passes; refuses what cannot work."""

from __future__ import annotations

from pathlib import Path

import pytest

from podmortem.cli import main as cli_main
from podmortem.cli import operator as operator_cli
from podmortem.cli.options import SettingError
from podmortem.operator.settings import OperatorSettings
from podmortem_demo.emulated.tls import make_pki


def settings(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], *argv: str) -> OperatorSettings:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return operator_cli.settings_from(cli_main.build_parser().parse_args(["operator", *argv]))


def test_the_charts_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    got = settings(monkeypatch, {
        "PODMORTEM_INJECT_SIDECAR": "true",
        "PODMORTEM_INJECT_SIDECAR_IMAGE": "registry.example.com/podmortem:0.1.0",
        "PODMORTEM_INJECT_SIDECAR_PULL_POLICY": "Always",
        "PODMORTEM_INJECT_SIDECAR_RESOURCES": '{"requests":{"memory":"40Mi"},"limits":{"memory":"64Mi"}}',
        "PODMORTEM_INJECT_SIDECAR_COMM": "python.*",
        "PODMORTEM_WEBHOOK_PORT": "9443",
        "PODMORTEM_WEBHOOK_TLS_CERT_FILE": str(tmp_path / "tls.crt"),
        "PODMORTEM_WEBHOOK_TLS_KEY_FILE": str(tmp_path / "tls.key"),
    })
    assert got.sidecar.trainingjobs is True and got.sidecar.image == "registry.example.com/podmortem:0.1.0"
    assert got.sidecar.pull_policy == "Always" and got.sidecar.comm == "python.*"
    assert dict(got.sidecar.resources) == {"requests": {"memory": "40Mi"}, "limits": {"memory": "64Mi"}}
    assert got.webhook is not None and got.webhook.port == 9443
    assert got.webhook.tls_cert_file == tmp_path / "tls.crt"


def test_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    got = settings(monkeypatch, {})
    assert got.webhook is None and got.sidecar.trainingjobs is False and got.sidecar.image == ""


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PODMORTEM_WEBHOOK_PORT": "9443"}, "needs a certificate and a key"),
        ({"PODMORTEM_WEBHOOK_TLS_CERT_FILE": "/x.crt"}, "without --webhook-port"),
        ({"PODMORTEM_WEBHOOK_PORT": "9443", "PODMORTEM_WEBHOOK_TLS_CERT_FILE": "/x.crt",
          "PODMORTEM_WEBHOOK_TLS_KEY_FILE": "/x.key"}, "needs the sidecar's image"),
        ({"PODMORTEM_INJECT_SIDECAR": "true"}, "the sidecar needs its image"),
        ({"PODMORTEM_INJECT_SIDECAR_RESOURCES": "[1]"}, "PODMORTEM_INJECT_SIDECAR_RESOURCES='[1]'"),
        ({"PODMORTEM_INJECT_SIDECAR_RESOURCES": '{"requests": {"memory": []}}'}, "map of quantities"),
        ({"PODMORTEM_INJECT_SIDECAR_COMM": "python(["}, "regular expression"),
        ({"PODMORTEM_INJECT_SIDECAR_PULL_POLICY": "Sometimes"}, "must be one of"),
    ],
    ids=["port-alone", "cert-alone", "no-image", "sidecar-no-image", "resources-list", "resources-bad",
         "comm", "pull-policy"],
)
def test_what_cannot_work_is_one_line_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingError) as caught:
        settings(monkeypatch, env)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_certificate_that_does_not_load_stops_the_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pki = make_pki()
    (tmp_path / "tls.crt").write_bytes(pki.server_pem)
    (tmp_path / "tls.key").write_bytes(pki.client_key)  # not the certificate's key
    env = {"PODMORTEM_WEBHOOK_PORT": "0", "PODMORTEM_INJECT_SIDECAR_IMAGE": "i:1",
           "PODMORTEM_WEBHOOK_TLS_CERT_FILE": str(tmp_path / "tls.crt"),
           "PODMORTEM_WEBHOOK_TLS_KEY_FILE": str(tmp_path / "tls.key"),
           "PODMORTEM_LOG_STORE_DIR": str(tmp_path / "store"),
           "PODMORTEM_HTTP_PORT": "0", "PODMORTEM_METRICS_PORT": "0", "PODMORTEM_HEALTH_PORT": "0"}
    args = cli_main.build_parser().parse_args(["operator"])
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    got = operator_cli.settings_from(args)
    with pytest.raises(SettingError, match="cannot load the webhook's TLS certificate and key"):
        operator_cli.check_startup(args, got)
