"""The chart's admission webhook registered with the real API server, which calls the operator's webhook.

``helm install`` (the real helm) of the ``sidecar-restricted`` scenario with ``webhook.url`` pointing
at the operator run here as a process (``_operator``): the MutatingWebhookConfiguration is the chart's,
with the caBundle of the certificate Helm generated, and the operator serves that certificate. The
real API server then decides everything the chart tests play by hand (``api_server_admits`` in
tests/chart/test_chart_webhook.py): which pods its selectors send, the TLS check of the operator's
certificate against the caBundle, the JSON Patch applied, the real PodSecurity admission of the
mutated pod, and ``failurePolicy: Ignore`` with the webhook down or hung.
"""

from __future__ import annotations

import copy
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.chart import _render
from tests.cli import entrypoints as ep
from tests.controlplane import _operator
from tests.controlplane.cluster import ControlPlane

SCENARIO = "sidecar-restricted"
SIDECAR = "podmortem-sidecar"
TJ = "/apis/podmortem.io/v1alpha1/namespaces/{ns}/trainingjobs"
#: What the measured admission may take beyond the webhook's timeoutSeconds (a pod create takes
#: tens of milliseconds here; this leaves room for a loaded machine).
MARGIN_S = 2.0


@dataclass
class Setup:
    plane: ControlPlane
    release: _operator.Release
    #: A namespace the webhook is called for, labelled pod-security.kubernetes.io/enforce=restricted.
    team: str
    webhook_port: int
    tmp: Path
    process: ep.Process | None = None

    def operator(self) -> ep.Process:
        """The operator, running and ready (started again when a test stopped it)."""
        if self.process is None or not self.process.alive():
            self.process, pod = _operator.start_operator(self.plane, self.release, self.tmp)
            self.process.wait_http(pod.ready_url, timeout=120)
        return self.process

    def stop_operator(self) -> None:
        if self.process is not None and self.process.alive():
            assert self.process.stop() == 0, self.process.output()[-3000:]


def training_pod(namespace: str, *, label: bool = True) -> dict[str, Any]:
    """A pod such as a PyTorchJob's worker: non-root, as Pod Security "restricted" wants it."""
    labels = {"training.kubeflow.org/job-name": "ddp", **({"podmortem.io/watch": "true"} if label else {})}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"ddp-worker-{uuid.uuid4().hex[:6]}", "namespace": namespace, "labels": labels},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "pytorch", "image": "pointgroup:1",
                            "securityContext": {"allowPrivilegeEscalation": False,
                                                "capabilities": {"drop": ["ALL"]}}}],
        },
    }


def create_pod(plane: ControlPlane, pod: dict[str, Any]) -> tuple[int, Any, float]:
    """POST the pod as the admin: (status, body, seconds the API server took to answer)."""
    started = time.monotonic()
    status, body = plane.request("POST", f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", pod,
                                 timeout=60)
    return status, body, time.monotonic() - started


@pytest.fixture(scope="module")
def setup(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("admission-real")
    suffix = uuid.uuid4().hex[:5]
    team, release_ns = f"team-{suffix}", f"podmortem-{suffix}"
    control_plane.create_namespace(team)
    control_plane.kubectl("label", "namespace", team, "pod-security.kubernetes.io/enforce=restricted")
    port = ep.free_port()
    values = _render.scenario_values(SCENARIO)
    values["webhook"] = {**values["webhook"], "port": port, "url": f"https://127.0.0.1:{port}"}
    values["operator"] = _operator.free_ports()
    values["watchNamespaces"] = [team]
    try:
        with _operator.installed(control_plane, tmp, name=_operator.release_name("adm"),
                                 namespace=release_ns, values=values) as release:
            setup = Setup(control_plane, release, team, port, tmp)
            try:
                yield setup
            finally:
                setup.stop_operator()
    finally:
        control_plane.run("kubectl", "delete", "namespace", team, "--wait=false", check=False)


def stored_pod(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    pod = plane.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    assert pod is not None, f"{namespace}/{name} not stored"
    return pod


def test_the_registered_configuration_is_the_charts(setup: Setup) -> None:
    """What the API server holds is what the chart rendered: the URL, the caBundle, the policy."""
    name = f"{setup.release.name}-podmortem-sidecar"
    stored = setup.plane.get(f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}")
    assert stored is not None
    (hook,) = stored["webhooks"]
    rendered = setup.release.webhook()
    assert hook["clientConfig"] == rendered["clientConfig"]
    assert hook["clientConfig"]["url"] == f"https://127.0.0.1:{setup.webhook_port}/mutate/pods"
    assert (hook["failurePolicy"], hook["timeoutSeconds"]) == ("Ignore", rendered["timeoutSeconds"])
    assert hook["namespaceSelector"] == rendered["namespaceSelector"]
    assert hook["objectSelector"] == rendered["objectSelector"]


def test_a_labelled_pod_gets_the_native_sidecar_and_passes_restricted(setup: Setup) -> None:
    """The API server calls the operator over TLS (the chart's caBundle), applies its patch, and the
    real PodSecurity admission ("restricted" enforced on the namespace) admits the mutated pod."""
    operator = setup.operator()
    pod = training_pod(setup.team)
    status, body, _ = create_pod(setup.plane, pod)
    assert status == 201, body
    stored = stored_pod(setup.plane, setup.team, pod["metadata"]["name"])
    assert stored["spec"]["shareProcessNamespace"] is True
    (sidecar,) = stored["spec"]["initContainers"]
    assert sidecar["name"] == SIDECAR and sidecar["restartPolicy"] == "Always"
    assert sidecar["command"][:2] == ["podmortem", "sidecar"]
    assert sidecar["securityContext"]["runAsUser"] == 1000
    assert [c["name"] for c in stored["spec"]["containers"]] == ["pytorch"]
    operator.wait_log(f"admission review {setup.team}/{pod['metadata']['name']}: sidecar added")

    # An unlabelled pod is never sent (the objectSelector): stored without the sidecar.
    plain = training_pod(setup.team, label=False)
    status, body, _ = create_pod(setup.plane, plain)
    assert status == 201, body
    assert "initContainers" not in stored_pod(setup.plane, setup.team, plain["metadata"]["name"])["spec"]


def test_pod_security_does_check_the_sidecar(setup: Setup) -> None:
    """The admitted pod's spec with one of the sidecar's settings taken out is refused by the same
    namespace's PodSecurity: "restricted" is enforced on the init container the webhook adds."""
    setup.operator()
    pod = training_pod(setup.team)
    status, body, _ = create_pod(setup.plane, pod)
    assert status == 201, body
    stored = stored_pod(setup.plane, setup.team, pod["metadata"]["name"])
    broken = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": f"{pod['metadata']['name']}-broken", "namespace": setup.team,
                           # Not sent to the webhook (objectSelector): the spec is created as it is.
                           "labels": {"podmortem.io/sidecar": "false"}},
              "spec": copy.deepcopy(stored["spec"])}
    (sidecar,) = broken["spec"]["initContainers"]
    del sidecar["securityContext"]["allowPrivilegeEscalation"]
    status, body, _ = create_pod(setup.plane, broken)
    assert status == 403, body
    message = body["message"]
    assert "violates PodSecurity \"restricted:" in message and SIDECAR in message, message
    assert "allowPrivilegeEscalation" in message, message


def test_a_trainingjob_pod_with_the_sidecar_passes_restricted(setup: Setup) -> None:
    """The operator's own pod for a TrainingJob (``sidecar.enabled``) in the restricted namespace is
    admitted by the real PodSecurity: it exists, with the native sidecar."""
    operator = setup.operator()
    name = f"tj-{uuid.uuid4().hex[:5]}"
    template = training_pod(setup.team, label=False)
    setup.plane.apply({"apiVersion": "podmortem.io/v1alpha1", "kind": "TrainingJob",
                       "metadata": {"name": name, "namespace": setup.team},
                       "spec": {"template": {"spec": template["spec"]}}})
    pod = setup.plane.wait(lambda: setup.plane.get(f"/api/v1/namespaces/{setup.team}/pods/{name}-train"),
                           what=f"the TrainingJob's pod (operator log: {operator.log})", timeout=120)
    assert pod["spec"]["shareProcessNamespace"] is True
    (sidecar,) = pod["spec"]["initContainers"]
    assert sidecar["name"] == SIDECAR and sidecar["restartPolicy"] == "Always"


@pytest.fixture
def silent_webhook_port(setup: Setup) -> Iterator[int]:
    """The operator stopped and its webhook port held by a listener that never answers (a hung webhook):
    the kernel completes the API server's connections, and nobody reads them."""
    setup.stop_operator()
    with socket.socket() as listening:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind(("127.0.0.1", setup.webhook_port))
        listening.listen(64)
        yield setup.webhook_port


def _admitted_unchanged(setup: Setup, timeout_s: int) -> float:
    pod = training_pod(setup.team)
    status, body, took = create_pod(setup.plane, pod)
    assert status == 201, body
    assert "initContainers" not in stored_pod(setup.plane, setup.team, pod["metadata"]["name"])["spec"]
    assert took <= timeout_s + MARGIN_S, f"admitted after {took:.2f} s (timeoutSeconds {timeout_s})"
    return took


def test_with_the_webhook_hung_pods_are_admitted_within_its_timeout(
    setup: Setup, silent_webhook_port: int, record_property: Any
) -> None:
    """failurePolicy Ignore: a webhook that never answers costs a pod creation timeoutSeconds, then the
    pod is admitted unchanged."""
    timeout_s = int(setup.release.webhook()["timeoutSeconds"])
    # A pod the webhook is not called for: what a creation costs here without it.
    _, _, baseline = create_pod(setup.plane, training_pod(setup.team, label=False))
    hung = _admitted_unchanged(setup, timeout_s)
    # The API server did wait for the webhook (it was called and timed out), not skip it.
    assert hung >= timeout_s - 0.5, f"admitted after {hung:.2f} s: the webhook was not waited for"
    record_property("admission_s", {"unselected": round(baseline, 3), "hung": round(hung, 3)})
    print(f"pod creation: {baseline:.3f} s unselected, {hung:.3f} s with the webhook hung "
          f"(timeoutSeconds {timeout_s})")


def test_with_the_webhook_port_closed_pods_are_admitted_at_once(setup: Setup, record_property: Any) -> None:
    """Nothing listening on the webhook's port (the operator stopped): admitted unchanged, in well
    under timeoutSeconds (the connection is refused)."""
    setup.stop_operator()
    timeout_s = int(setup.release.webhook()["timeoutSeconds"])
    took = _admitted_unchanged(setup, timeout_s)
    record_property("admission_s", round(took, 3))
    print(f"pod creation with the webhook's port closed: {took:.3f} s (timeoutSeconds {timeout_s})")
