"""The chart's admission webhook: its MutatingWebhookConfiguration, Service and certificate, and the
operator started from the rendered Deployment answering a review over TLS.

There is no real API server here. What the API server does with the configuration is played by
``api_server_admits`` below, from the documented admission rules (selectors decide whether the
webhook is called; the call is an HTTPS POST verified against ``caBundle`` for the Service's DNS
name; a call that fails, times out or answers no usable review applies ``failurePolicy``, and
``Ignore`` admits the pod unchanged). The tests check the rendered fields that rule rests on, and
run it against the real operator process and against a port where nothing listens.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import socket
import ssl
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import helm_python as helm
import pytest
from tests.cli import entrypoints as ep

from podmortem_demo.emulated.tls import Pki, make_pki
from podmortem_demo.harness import harness

from . import _json_patch, _pod_security, _pods, _render

SCENARIO = "sidecar-restricted"
#: The labels of the namespace the training pods are created in.
TEAM_A = {"kubernetes.io/metadata.name": "team-a"}
TOKEN = "operator-sa-token"


def webhook_objects(rendered: _render.Rendered) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The configuration's one webhook, its Service, and the operator container."""
    (config,) = rendered.of_kind("MutatingWebhookConfiguration")
    (hook,) = config["webhooks"]
    (service,) = [s for s in rendered.of_kind("Service") if s["metadata"]["name"].endswith("-webhook")]
    container = rendered.one("Deployment", "operator")["spec"]["template"]["spec"]["containers"][0]
    return hook, service, container


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A LabelSelector against labels, as the API server evaluates it."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for rule in selector.get("matchExpressions") or []:
        key, op, values = rule["key"], rule["operator"], rule.get("values", [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


@dataclass
class Endpoint:
    """Where the test reaches what the configuration's ``clientConfig.service`` names."""

    port: int
    #: The DNS name the API server calls the Service by (the certificate must be for it).
    host: str


async def api_server_admits(pod: dict[str, Any], hook: dict[str, Any], endpoint: Endpoint,
                            namespace_labels: dict[str, str]) -> dict[str, Any] | None:
    """The pod as the API server would store it after this mutating webhook; None: refused."""
    if not (_matches(hook["namespaceSelector"], namespace_labels)
            and _matches(hook["objectSelector"], pod["metadata"].get("labels", {}))):
        return pod  # not selected: the webhook is never called
    request_uid = str(uuid.uuid4())
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": request_uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": pod["metadata"]["namespace"], "operation": "CREATE", "object": pod,
        "userInfo": {"username": "system:serviceaccount:kubeflow:training-operator"}}}
    tls = ssl.create_default_context(cadata=base64.b64decode(hook["clientConfig"]["caBundle"]).decode())
    path = hook["clientConfig"]["service"]["path"]
    try:
        async with aiohttp.ClientSession() as session, session.post(
            f"https://127.0.0.1:{endpoint.port}{path}", data=io.BytesIO(json.dumps(review).encode()),
            ssl=tls, server_hostname=endpoint.host,
            timeout=aiohttp.ClientTimeout(total=hook["timeoutSeconds"]),
        ) as resp:
            answer = await resp.json() if resp.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, ValueError):
        answer = None
    response = (answer or {}).get("response") or {}
    if response.get("uid") != request_uid:
        return pod if hook["failurePolicy"] == "Ignore" else None
    if not response.get("allowed"):
        return None
    if response.get("patchType") == "JSONPatch":
        patch = json.loads(base64.b64decode(response["patch"]))
        return dict(_json_patch.apply_checked(pod, patch))
    return pod


def training_pod(*, label: bool = True) -> dict[str, Any]:
    labels = {"training.kubeflow.org/job-name": "ddp", **({"podmortem.io/watch": "true"} if label else {})}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "ddp-worker-", "namespace": "team-a", "labels": labels},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "pytorch", "image": "pointgroup:1",
                            "securityContext": {"allowPrivilegeEscalation": False,
                                                "capabilities": {"drop": ["ALL"]}}}],
        },
    }


# -- what is rendered ---------------------------------------------------------------------------


def test_the_configuration_ignores_a_webhook_that_fails(chart: helm.Chart) -> None:
    rendered = _render.render(chart, _render.scenario_values(SCENARIO))
    hook, service, container = webhook_objects(rendered)
    assert hook["failurePolicy"] == "Ignore"
    assert hook["sideEffects"] == "None" and hook["admissionReviewVersions"] == ["v1"]
    assert 1 <= hook["timeoutSeconds"] <= 30
    assert hook["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                              "resources": ["pods"], "scope": "Namespaced"}]
    # The call reaches the operator's webhook port over HTTPS.
    ref = hook["clientConfig"]["service"]
    assert (ref["name"], ref["namespace"], ref["path"]) == (service["metadata"]["name"], _render.NAMESPACE,
                                                            "/mutate/pods")
    (port,) = service["spec"]["ports"]
    assert port["port"] == ref["port"] == 443 and port["targetPort"] == "webhook"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = _render.env_of(container)
    assert str(ports["webhook"]) == env["PODMORTEM_WEBHOOK_PORT"]
    assert env["PODMORTEM_INJECT_SIDECAR"] == "true"
    assert env["PODMORTEM_INJECT_SIDECAR_IMAGE"] == container["image"]  # defaults to the operator's image
    # The generated Secret's CA is the configuration's caBundle, and it signed the mounted pair.
    (secret,) = [s for s in rendered.of_kind("Secret") if s["metadata"]["name"].endswith("-webhook-tls")]
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["data"]["ca.crt"] == hook["clientConfig"]["caBundle"]


def test_only_labelled_pods_outside_the_release_namespace_are_sent(chart: helm.Chart) -> None:
    hook, _, _ = webhook_objects(_render.render(chart, _render.scenario_values(SCENARIO)))
    team = TEAM_A
    assert _matches(hook["namespaceSelector"], team)
    for namespace in (_render.NAMESPACE, "kube-system"):
        assert not _matches(hook["namespaceSelector"], {"kubernetes.io/metadata.name": namespace})
    assert _matches(hook["objectSelector"], {"podmortem.io/watch": "true"})
    assert not _matches(hook["objectSelector"], {})
    opted_out = {"podmortem.io/watch": "true", "podmortem.io/sidecar": "false"}
    assert not _matches(hook["objectSelector"], opted_out)

    by_namespace = _render.render(chart, {**_render.scenario_values(SCENARIO), "watchNamespaces": ["team-a"],
                                          "webhook": {"enabled": True, "selectBy": "namespace"}})
    hook, _, _ = webhook_objects(by_namespace)
    assert _matches(hook["namespaceSelector"], {**team, "podmortem.io/watch": "true"})
    assert not _matches(hook["namespaceSelector"], team)
    assert not _matches(hook["namespaceSelector"], {"kubernetes.io/metadata.name": "team-b",
                                                    "podmortem.io/watch": "true"})
    assert _matches(hook["objectSelector"], {}) and not _matches(hook["objectSelector"],
                                                                 {"podmortem.io/sidecar": "false"})


def test_cert_manager_issues_the_certificate_and_injects_the_ca(chart: helm.Chart) -> None:
    issuer = {"name": "ca", "kind": "ClusterIssuer"}
    values = {"webhook": {"enabled": True, "certManager": {"enabled": True, "issuerRef": issuer}}}
    rendered = _render.render(chart, values)
    (config,) = rendered.of_kind("MutatingWebhookConfiguration")
    (certificate,) = [c for c in rendered.of_kind("Certificate")
                      if c["metadata"]["name"].endswith("-webhook-tls")]
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{_render.NAMESPACE}/{certificate['metadata']['name']}")
    assert "caBundle" not in config["webhooks"][0]["clientConfig"]
    assert f"pm-podmortem-webhook.{_render.NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    assert not [s for s in rendered.of_kind("Secret") if s["metadata"]["name"].endswith("-webhook-tls")]
    with pytest.raises(helm.HelmRenderError, match=r"webhook\.certManager\.issuerRef\.name"):
        chart.render({"webhook": {"enabled": True, "certManager": {"enabled": True}}},
                     name=_render.RELEASE, namespace=_render.NAMESPACE)


def test_nothing_of_the_webhook_by_default(default_rendered: _render.Rendered) -> None:
    assert default_rendered.of_kind("MutatingWebhookConfiguration") == []
    operator = default_rendered.one("Deployment", "operator")["spec"]["template"]["spec"]
    env = _render.env_of(operator["containers"][0])
    assert env["PODMORTEM_INJECT_SIDECAR"] == "false" and "PODMORTEM_WEBHOOK_PORT" not in env


def test_the_scenario_passes_pod_security_restricted(chart: helm.Chart) -> None:
    """Every pod the scenario renders, and a TrainingJob pod the operator makes with the sidecar the
    rendered settings describe, pass "restricted"; the default scenario's agent fails "baseline"
    (so the checker does find what it looks for)."""
    from podmortem.cli import main as cli_main
    from podmortem.cli import operator as operator_cli
    from podmortem.operator import jobs

    rendered = _render.render(chart, _render.scenario_values(SCENARIO))
    specs = dict(_render.pod_specs(rendered))
    assert set(specs) == {"operator"}
    for component, spec in specs.items():
        assert _pod_security.restricted(spec) == [], component
    agent = dict(_render.pod_specs(_render.render(chart, {})))["agent"]
    assert {"host namespaces: hostPID"} <= set(_pod_security.baseline(agent))

    env = _render.env_of(specs["operator"]["containers"][0])
    args = cli_main.build_parser().parse_args(["operator"])
    values = operator_cli.o.Values(args, environ={k: v for k, v in env.items() if k.startswith("PODMORTEM_")})
    sidecar = operator_cli._sidecar(values)
    template = training_pod()
    pod = jobs.build_pod({"metadata": {"name": "tj", "namespace": "team-a", "uid": "u"},
                          "spec": {"template": {"spec": template["spec"]}}}, sidecar=sidecar)
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["podmortem-sidecar"]
    assert pod["spec"]["initContainers"][0]["command"][-2:] == ["--comm", "python.*|torchrun"]
    assert _pod_security.restricted(pod["spec"]) == []


# -- the operator, started as the chart starts it -----------------------------------------------


@dataclass
class Started:
    hook: dict[str, Any]
    endpoint: Endpoint
    process: ep.Process


@pytest.fixture(scope="module")
def pki() -> Pki:
    pytest.importorskip("cryptography")
    return make_pki()


@pytest.fixture(scope="module")
def operator_with_webhook(chart: helm.Chart, pki: Pki, tmp_path_factory: pytest.TempPathFactory
                          ) -> Iterator[Started]:
    """The scenario's operator Deployment (free ports), run as its container would be run (``_pods``)."""
    tmp = tmp_path_factory.mktemp("webhook")
    values = _render.scenario_values(SCENARIO)
    values["webhook"] = {**values["webhook"], "port": ep.free_port()}
    values["operator"] = {"http": {"port": ep.free_port()}, "metrics": {"port": ep.free_port()},
                          "health": {"port": ep.free_port()}, "leaderElection": {"enabled": False}}
    rendered = _render.render(chart, values)
    hook, service, _ = webhook_objects(rendered)
    workload = rendered.one("Deployment", "operator")
    with harness(tmp / "cluster", pki=pki, tokens={TOKEN, "admin"}, admin_token="admin") as h:
        account = ep.service_account_dir(tmp / "sa", token=TOKEN, pki=pki, namespace=_render.NAMESPACE)
        base = ep.clean_env(tmp, **ep.in_cluster_env(h.url, account))
        pod = _pods.materialize(rendered, workload, podmortem=ep.PODMORTEM, tmp=tmp / "operator",
                                base_env=base, pki=pki)
        process = ep.Process(pod.argv, pod.env, tmp / "operator.log").start()
        try:
            process.wait_http(pod.ready_url, timeout=90)
            host = f"{service['metadata']['name']}.{_render.NAMESPACE}.svc"
            yield Started(hook, Endpoint(int(pod.env["PODMORTEM_WEBHOOK_PORT"]), host), process)
        finally:
            assert process.stop() == 0, process.output()[-3000:]


async def test_the_running_operator_adds_the_sidecar_over_tls(operator_with_webhook: Started) -> None:
    """A review over TLS, the certificate checked against the rendered caBundle for the Service's name."""
    started = operator_with_webhook
    pod = training_pod()
    admitted = await api_server_admits(pod, started.hook, started.endpoint, TEAM_A)
    assert admitted is not None and admitted is not pod
    assert admitted["spec"]["shareProcessNamespace"] is True
    (sidecar,) = admitted["spec"]["initContainers"]
    assert sidecar["name"] == "podmortem-sidecar" and sidecar["restartPolicy"] == "Always"
    assert sidecar["securityContext"]["runAsUser"] == 1000
    assert _pod_security.restricted(admitted["spec"]) == []
    # A pod without the label is never sent; the process logged the one it patched.
    assert await api_server_admits(training_pod(label=False), started.hook, started.endpoint,
                                   TEAM_A) == training_pod(label=False)
    started.process.wait_log("sidecar added")


async def test_with_the_webhook_down_the_pod_is_admitted_unchanged(chart: helm.Chart) -> None:
    """The rendered configuration, a webhook Service with nothing behind it: failurePolicy Ignore."""
    hook, service, _ = webhook_objects(_render.render(chart, _render.scenario_values(SCENARIO)))
    down = Endpoint(ep.free_port(), f"{service['metadata']['name']}.{_render.NAMESPACE}.svc")
    pod = training_pod()
    assert await api_server_admits(pod, hook, down, TEAM_A) == pod
    # With Fail the same call refuses the pod: it is the policy that admits it.
    assert await api_server_admits(pod, {**hook, "failurePolicy": "Fail"}, down,
                                   TEAM_A) is None


@contextlib.contextmanager
def _silent_port() -> Iterator[int]:
    """A port whose connections the kernel completes and nobody ever reads (a hung webhook)."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        yield int(listening.getsockname()[1])


async def test_a_hung_webhook_also_admits_the_pod_unchanged(chart: helm.Chart) -> None:
    hook, service, _ = webhook_objects(_render.render(chart, _render.scenario_values(SCENARIO)))
    with _silent_port() as port:
        hung = Endpoint(port, f"{service['metadata']['name']}.{_render.NAMESPACE}.svc")
        pod = training_pod()
        assert await api_server_admits(pod, {**hook, "timeoutSeconds": 1}, hung,
                                       TEAM_A) == pod


def test_an_operator_outside_the_cluster_is_called_at_webhook_url(chart: helm.Chart) -> None:
    """``webhook.url``: the configuration calls that URL instead of the Service, with the same caBundle,
    and the generated certificate also names its host (an IP SAN for an address); nothing else changes.
    tests/controlplane/test_admission_real.py has the real API server call it."""
    from cryptography import x509

    values = _render.scenario_values(SCENARIO)
    shipped, _, _ = webhook_objects(_render.render(chart, values))
    values["webhook"] = {**values["webhook"], "url": "https://127.0.0.1:9443"}
    rendered = _render.render(chart, values)
    hook, _, _ = webhook_objects(rendered)
    assert hook["clientConfig"]["url"] == "https://127.0.0.1:9443/mutate/pods"
    assert "service" not in hook["clientConfig"]
    (secret,) = [s for s in rendered.of_kind("Secret") if s["metadata"]["name"].endswith("-webhook-tls")]
    assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    ignore = {"clientConfig"}
    assert {k: v for k, v in hook.items() if k not in ignore} == {
        k: v for k, v in shipped.items() if k not in ignore}
    names = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"])).extensions \
        .get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert f"pm-podmortem-webhook.{_render.NAMESPACE}.svc" in names.get_values_for_type(x509.DNSName)

    issuer = {"name": "ca", "kind": "ClusterIssuer"}
    values["webhook"] = {**values["webhook"], "url": "https://dev.example:8443",
                         "certManager": {"enabled": True, "issuerRef": issuer}}
    (certificate,) = _render.render(chart, values).of_kind("Certificate")
    assert "dev.example" in certificate["spec"]["dnsNames"] and "ipAddresses" not in certificate["spec"]
    for bad in ("http://127.0.0.1:9443", "https://127.0.0.1:9443/path"):
        values["webhook"] = {"enabled": True, "url": bad}
        with pytest.raises(helm.HelmValuesError, match=r"webhook/url"):
            chart.render(values, name=_render.RELEASE, namespace=_render.NAMESPACE)
