"""The admission webhook, served over TLS in this process, answering real AdmissionReview v1 requests.

Each test posts a review as the API server does (JSON over HTTPS, the server's certificate
checked against the CA) and reads the AdmissionReview it gets back: the uid echoed, the pod
allowed, the base64 JSON Patch applied to the pod (``tests/chart/_json_patch``, and the
``jsonpatch`` package) giving a pod with the sidecar that passes Pod Security "restricted".
Untrusted input: a body over the cap is refused with 413 before it is parsed, and a body that
is not a review, or a review of something else, is answered "allowed" without a patch, the
server still serving the next one.
"""

from __future__ import annotations

import base64
import io
import json
import ssl
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.chart import _json_patch, _pod_security

from podmortem.operator.settings import SidecarInjectionSettings, WebhookSettings
from podmortem.operator.watching import admission
from podmortem_demo.emulated.tls import Pki, make_pki

from .test_sidecar_injection import IMAGE, restricted_pod

pytest.importorskip("cryptography")

SIDECAR = SidecarInjectionSettings(image=IMAGE)


@dataclass
class Webhook:
    url: str
    session: aiohttp.ClientSession
    tls: ssl.SSLContext

    async def post(self, body: bytes) -> tuple[int, Any]:
        async with self.session.post(self.url + admission.PATH, data=io.BytesIO(body), ssl=self.tls,
                                     headers={"Content-Type": "application/json"}) as resp:
            text = await resp.text()
            return resp.status, json.loads(text) if resp.content_type == "application/json" else text

    async def review(self, request: dict[str, Any]) -> dict[str, Any]:
        status, answer = await self.post(json.dumps(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode())
        assert status == 200, answer
        assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
        response: dict[str, Any] = answer["response"]
        assert response["allowed"] is True  # it never refuses a pod
        return response


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


@pytest.fixture
async def webhook(pki: Pki, tmp_path: Path) -> AsyncIterator[Webhook]:
    (tmp_path / "tls.crt").write_bytes(pki.server_pem)
    (tmp_path / "tls.key").write_bytes(pki.server_key)
    settings = WebhookSettings(tls_cert_file=tmp_path / "tls.crt", tls_key_file=tmp_path / "tls.key", port=0)
    async with (
        admission.serve(webhook=settings, sidecar=SIDECAR, host="127.0.0.1") as serving,
        aiohttp.ClientSession() as session,
    ):
        yield Webhook(serving.url, session, ssl.create_default_context(cadata=pki.ca_pem.decode()))


def pod_request(pod: dict[str, Any], *, operation: str = "CREATE", uid: str | None = None) -> dict[str, Any]:
    """An AdmissionReview request as the API server sends one for a pod a controller creates."""
    return {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": pod["metadata"].get("namespace", "default"),
        "operation": operation,
        "userInfo": {"username": "system:serviceaccount:kubeflow:training-operator"},
        "object": pod,
        "oldObject": None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }


def decoded(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response["patchType"] == "JSONPatch"
    patch: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"], validate=True))
    return patch


async def test_a_pod_gets_the_sidecar_by_a_patch_that_applies(webhook: Webhook) -> None:
    pod = restricted_pod()
    request = pod_request(pod)
    response = await webhook.review(request)
    assert response["uid"] == request["uid"]
    assert "warnings" not in response
    out = _json_patch.apply_checked(pod, decoded(response))
    assert out["spec"]["shareProcessNamespace"] is True
    (sidecar,) = out["spec"]["initContainers"]
    assert (sidecar["name"], sidecar["image"]) == ("podmortem-sidecar", IMAGE)
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["securityContext"]["runAsUser"] == 1000
    assert sidecar["terminationMessagePolicy"] == "File"
    assert _pod_security.restricted(out["spec"]) == []
    # The pod as the API server stores it, sent again (a retried create): never a second sidecar.
    again = await webhook.review(pod_request(out))
    assert "patch" not in again and "patchType" not in again


async def test_a_generated_name_and_existing_init_containers(webhook: Webhook) -> None:
    pod = restricted_pod(initContainers=[{"name": "fetch", "image": "busybox"}])
    pod["metadata"] = {"generateName": "ddp-worker-", "namespace": "team-a",
                       "labels": {"podmortem.io/watch": "true"}}
    out = _json_patch.apply_checked(pod, decoded(await webhook.review(pod_request(pod))))
    assert [c["name"] for c in out["spec"]["initContainers"]] == ["fetch", "podmortem-sidecar"]


async def test_an_opted_out_pod_is_admitted_unchanged_without_a_word(webhook: Webhook) -> None:
    pod = restricted_pod()
    pod["metadata"]["labels"]["podmortem.io/sidecar"] = "false"
    response = await webhook.review(pod_request(pod))
    assert set(response) == {"uid", "allowed"}


async def test_a_root_trainer_is_admitted_unchanged_with_a_warning(webhook: Webhook) -> None:
    pod = restricted_pod()
    pod["spec"]["securityContext"]["runAsUser"] = 0
    response = await webhook.review(pod_request(pod))
    assert "patch" not in response
    (warning,) = response["warnings"]
    assert warning.startswith("podmortem: no sidecar: the trainer runs as root")
    assert len(warning) <= admission.MAX_WARNING


@pytest.mark.parametrize(
    "request_change",
    [
        {"operation": "UPDATE"},
        {"kind": {"group": "batch", "version": "v1", "kind": "Job"}},
        {"subResource": "ephemeralcontainers"},
        {"object": None},
        {"object": "a pod"},
        {"object": {"spec": {"containers": "trainer"}}},
    ],
    ids=["update", "not-a-pod", "subresource", "no-object", "object-text", "bad-spec"],
)
async def test_anything_but_a_pod_creation_is_allowed_unpatched(webhook: Webhook,
                                                                request_change: dict[str, Any]) -> None:
    request = pod_request(restricted_pod()) | request_change
    response = await webhook.review(request)
    assert response["uid"] == request["uid"] and "patch" not in response


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{not json",
        b"\xff\xfe\x00",
        b"[]",
        b'"AdmissionReview"',
        b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "x"}}',
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}',
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7}}',
        json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "request": {"uid": "u" * 1000}}).encode(),
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "a", '
        + b'"object": ' + b"[" * 5000 + b"]" * 5000 + b"}}",
    ],
    ids=["empty", "not-json", "not-utf8", "list", "string", "v1beta1", "no-request", "uid-number",
         "uid-huge", "deep-nesting"],
)
async def test_a_malformed_review_is_answered_allowed_without_a_patch(webhook: Webhook, body: bytes) -> None:
    status, answer = await webhook.post(body)
    assert status == 200, answer
    assert answer["response"]["allowed"] is True and "patch" not in answer["response"]
    assert len(answer["response"]["uid"]) <= admission.MAX_UID
    # ... and the server goes on answering.
    assert "patch" in await webhook.review(pod_request(restricted_pod()))


async def test_a_pod_nested_deep_where_the_patch_does_not_go_gets_the_sidecar(webhook: Webhook) -> None:
    """JSON the parser takes, nested deep inside a container: nothing walks the pod's parts the patch
    leaves alone (the plan copies only what it changes), so the pod gets its sidecar like any other."""
    body = (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "a", '
            + b'"operation": "CREATE", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "object": '
            + b'{"spec": {"securityContext": {"runAsUser": 1000}, "containers": [{"name": "t", "env": '
            + b"[" * 700 + b"]" * 700 + b"}]}}}}")
    status, answer = await webhook.post(body)
    assert status == 200, answer
    assert answer["response"]["allowed"] is True and "patch" in answer["response"]
    assert "patch" in await webhook.review(pod_request(restricted_pod()))


async def test_a_review_over_the_cap_is_refused_before_it_is_read(webhook: Webhook) -> None:
    pod = restricted_pod()
    pod["metadata"]["annotations"] = {"big": "x" * (1 << 20)}
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": pod_request(pod)}
    status, answer = await webhook.post(json.dumps(review).encode())
    # No AdmissionReview comes back: the API server applies failurePolicy (Ignore: admitted unchanged).
    assert status == 413, answer
    assert "patch" in await webhook.review(pod_request(restricted_pod()))


async def test_plain_http_is_not_served(webhook: Webhook) -> None:
    plain = webhook.url.replace("https://", "http://") + admission.PATH
    with pytest.raises(aiohttp.ClientError):
        async with webhook.session.post(plain, data=b"{}") as resp:
            await resp.read()
            assert resp.status >= 400  # a TLS server answering plain HTTP closes or errors
            raise aiohttp.ClientError(f"answered {resp.status}")
