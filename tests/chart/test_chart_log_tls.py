"""The log API's TLS and token audience as the chart wires them: a Secret or a cert-manager Certificate,
mounted read-only where the operator's TLS options point, and https wherever the chart names the API.

That the operator then serves HTTPS and refuses tokens of another audience is shown by the
``log-api-tls`` scenario's story (``_story``, run by test_chart_pods_start and test_rbac_calls).
"""

from __future__ import annotations

import re
from typing import Any

import helm_python as helm
import pytest

from . import _render

CERT_MANAGER = {"enabled": True, "issuerRef": {"name": "cluster-ca", "kind": "ClusterIssuer"}}


def _operator(rendered: _render.Rendered) -> tuple[dict[str, Any], dict[str, Any]]:
    pod = rendered.one("Deployment", "operator")["spec"]["template"]["spec"]
    return pod, pod["containers"][0]


def _http_port(rendered: _render.Rendered) -> dict[str, Any]:
    service = next(s for s in rendered.of_kind("Service") if s["metadata"]["name"].endswith("-operator"))
    port: dict[str, Any] = next(p for p in service["spec"]["ports"] if p["name"] == "http")
    return port


def test_plain_http_by_default(default_rendered: _render.Rendered) -> None:
    pod, container = _operator(default_rendered)
    env = _render.env_of(container)
    assert "PODMORTEM_HTTP_TLS_CERT_FILE" not in env and "PODMORTEM_HTTP_TLS_KEY_FILE" not in env
    assert env["PODMORTEM_HTTP_TOKEN_AUDIENCE"] == ""
    assert not [v for v in pod["volumes"] if v["name"] == "http-tls"]
    assert default_rendered.of_kind("Certificate") == []
    assert _http_port(default_rendered)["appProtocol"] == "http"
    assert "http://127.0.0.1:8080/logs/" in default_rendered.notes


@pytest.mark.parametrize("tls", [{"secretName": "my-log-tls"}, {"certManager": CERT_MANAGER},
                                 {"secretName": "my-log-tls", "certManager": CERT_MANAGER}],
                         ids=["secret", "cert-manager", "cert-manager-named"])
def test_a_certificate_is_mounted_read_only_where_the_operator_reads_it(chart: helm.Chart,
                                                                        tls: dict[str, Any]) -> None:
    rendered = _render.render(chart, {"operator": {"http": {"tls": tls}}})
    pod, container = _operator(rendered)
    (volume,) = [v for v in pod["volumes"] if v["name"] == "http-tls"]
    secret = volume["secret"]["secretName"]
    assert secret == tls.get("secretName", "pm-podmortem-operator-tls")
    assert {i["key"] for i in volume["secret"]["items"]} == {"tls.crt", "tls.key"}
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "http-tls"]
    assert mount["readOnly"] is True
    env = _render.env_of(container)
    assert env["PODMORTEM_HTTP_TLS_CERT_FILE"] == f"{mount['mountPath']}/tls.crt"
    assert env["PODMORTEM_HTTP_TLS_KEY_FILE"] == f"{mount['mountPath']}/tls.key"
    assert _http_port(rendered)["appProtocol"] == "https"
    host = "pm-podmortem-operator.podmortem-system.svc"
    assert f"https://{host}:8080/logs/NAMESPACE/POD" in rendered.notes
    assert f"--cacert ca.crt --connect-to {host}:8080:127.0.0.1:8080" in rendered.notes
    assert f"get secret {secret} " in rendered.notes
    certificates = rendered.of_kind("Certificate")
    if "certManager" not in tls:
        assert certificates == []
        return
    (certificate,) = certificates
    assert certificate["spec"]["secretName"] == secret
    assert certificate["metadata"]["namespace"] == _render.NAMESPACE
    assert {host, "pm-podmortem-operator"} <= set(certificate["spec"]["dnsNames"])
    assert certificate["spec"]["issuerRef"] == {"name": "cluster-ca", "kind": "ClusterIssuer",
                                                "group": "cert-manager.io"}
    assert "server auth" in certificate["spec"]["usages"]


def test_the_token_audience_reaches_the_operator_and_the_notes(chart: helm.Chart) -> None:
    rendered = _render.render(chart, {"operator": {"http": {"tokenAudience": "podmortem,logs"}}})
    _, container = _operator(rendered)
    assert _render.env_of(container)["PODMORTEM_HTTP_TOKEN_AUDIENCE"] == "podmortem,logs"
    assert "create token SERVICEACCOUNT --audience podmortem)" in rendered.notes


def test_cert_manager_needs_an_issuer(chart: helm.Chart) -> None:
    message = re.escape("needs operator.http.tls.certManager.issuerRef.name")
    with pytest.raises(helm.HelmRenderError, match=message):
        _render.render(chart, {"operator": {"http": {"tls": {"certManager": {"enabled": True}}}}})


@pytest.mark.parametrize(("tls", "where"), [
    ({"secretName": "Not_A_Name"}, "/operator/http/tls/secretName"),
    ({"certManager": {"enable": True}}, "/operator/http/tls/certManager"),
    ({"certManager": {"enabled": True, "issuerRef": {"name": ""}}},
     "/operator/http/tls/certManager/issuerRef/name"),
    ({"cert": "x"}, "/operator/http/tls"),
])
def test_schema_rejects_bad_tls_values(chart: helm.Chart, tls: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.HelmValuesError) as caught:
        chart.validate_schema({"operator": {"http": {"tls": tls}}})
    assert f"'{where}'" in str(caught.value)
