"""The mutating admission webhook: the sidecar added to the pods of jobs the operator does not create.

The API server sends an AdmissionReview (admission.k8s.io/v1) for each pod created where the
chart's MutatingWebhookConfiguration selects it (the ``podmortem.io/watch`` label); the answer
allows the pod, with a base64 JSON Patch from :func:`podmortem.operator.sidecar_injection.plan`
when the sidecar is added. The configuration's ``failurePolicy: Ignore`` means a webhook that is
down, slow or answers nonsense leaves pods admitted unchanged, so this handler never refuses a
pod and never raises: the request body is capped (``WebhookSettings.max_request_bytes``, 413
beyond it), and a review that does not parse or is not a pod creation is answered "allowed",
without a patch. A pod of an excluded namespace (``WebhookSettings.excluded_namespaces``: the
operator's own and ``kube-system``) is admitted unchanged here, whatever the chart's selector says.
Served over TLS only (the API server calls nothing else), with the certificate reloaded when the
mounted Secret is renewed, and with the header, body and idle deadlines and the connection caps of
`podmortem.serving_limits` (the port is open to every pod). Plain aiohttp: kopf stays in the
handler modules.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from podmortem import serving_limits
from podmortem.background import Background
from podmortem.logs.tls import ServerCertificate
from podmortem.operator import sidecar_injection
from podmortem.operator.settings import SidecarInjectionSettings, WebhookSettings

logger = logging.getLogger(__name__)

#: The path the MutatingWebhookConfiguration calls.
PATH = "/mutate/pods"
API_VERSION = "admission.k8s.io/v1"
#: Longest request uid taken back into the answer (the API server's are 36-character UUIDs).
MAX_UID = 128
#: The API server shows warnings to the client; it truncates longer ones, so they are kept short.
MAX_WARNING = 120

SETTINGS_KEY = web.AppKey("sidecar", SidecarInjectionSettings)
MAX_BYTES_KEY = web.AppKey("max_request_bytes", int)
EXCLUDED_KEY = web.AppKey("excluded_namespaces", frozenset[str])


@dataclass(frozen=True)
class Answer:
    """The decision for one review: the uid it answers, and the patch (empty: admitted unchanged)."""

    uid: str
    patch: tuple[dict[str, Any], ...] = ()
    #: Said to whoever created the pod (kubectl prints it) when the sidecar was wanted but not added.
    warning: str | None = None
    #: For the log: what was decided and why.
    why: str = ""

    def review(self) -> dict[str, Any]:
        """The AdmissionReview v1 response document."""
        response: dict[str, Any] = {"uid": self.uid, "allowed": True}
        if self.patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(list(self.patch)).encode()).decode("ascii")
        if self.warning:
            response["warnings"] = [self.warning[:MAX_WARNING]]
        return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def _is_pod_kind(kind: Any) -> bool:
    return isinstance(kind, Mapping) and (kind.get("group"), kind.get("version"), kind.get("kind")) == (
        "", "v1", "Pod")


def decide(review: Any, settings: SidecarInjectionSettings) -> Answer:
    """The answer to one parsed AdmissionReview (untrusted: any JSON value). Never raises."""
    if not isinstance(review, Mapping) or review.get("apiVersion") != API_VERSION or (
        review.get("kind") != "AdmissionReview"
    ):
        return Answer(uid="", why="not an admission.k8s.io/v1 AdmissionReview")
    request = review.get("request")
    if not isinstance(request, Mapping):
        return Answer(uid="", why="the review has no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid or len(uid) > MAX_UID:
        return Answer(uid="", why="the review's request has no usable uid")
    if not _is_pod_kind(request.get("kind")) or request.get("subResource"):
        return Answer(uid=uid, why="not a pod")
    if request.get("operation") != "CREATE":
        return Answer(uid=uid, why=f"operation {str(request.get('operation'))[:20]!r}, not CREATE")
    pod = request.get("object")
    if not isinstance(pod, Mapping):
        return Answer(uid=uid, why="the review carries no pod object")
    injection = sidecar_injection.plan(pod, settings)
    if injection.changed:
        return Answer(uid=uid, patch=injection.patch, why="sidecar added")
    reason = injection.skipped or "unchanged"
    # Those that a person can act on are said back to them; "already there" or "opted out" are not news.
    quiet = reason.startswith(("the pod already has", f"the pod says {sidecar_injection.OPT_OUT_KEY}"))
    return Answer(uid=uid, why=reason, warning=None if quiet else f"podmortem: no sidecar: {reason}")


def _field(value: Any, key: str) -> Any:
    """``value[key]`` of a map, None for anything else."""
    return value.get(key) if isinstance(value, Mapping) else None


def _uid_of(review: Any) -> str:
    """The request's uid when it is one that may be answered, else empty."""
    uid = _field(_field(review, "request"), "uid")
    return uid if isinstance(uid, str) and len(uid) <= MAX_UID else ""


def excluded(review: Any, namespaces: frozenset[str]) -> str | None:
    """The namespace of the review's request when it is one the webhook leaves alone, else None."""
    request = _field(review, "request")
    namespace = _field(request, "namespace") or _field(_field(_field(request, "object"), "metadata"),
                                                        "namespace")
    return namespace if isinstance(namespace, str) and namespace in namespaces else None


def _where(review: Any) -> str:
    """``namespace/name`` of the reviewed pod for the log (generateName when it has no name yet)."""
    request = _field(review, "request")
    meta = _field(_field(request, "object"), "metadata")
    name = _field(meta, "name") or _field(meta, "generateName") or _field(request, "name") or "?"
    return f"{str(_field(request, 'namespace') or '?')[:63]}/{str(name)[:253]}"


async def mutate(request: web.Request) -> web.Response:
    """POST /mutate/pods: one AdmissionReview in, one out; any failure is answered 'allowed'."""
    settings = request.app[SETTINGS_KEY]
    try:
        body = await request.read()  # capped by the application's client_max_size
    except web.HTTPRequestEntityTooLarge:
        logger.warning("admission review over %d bytes refused; the pod is admitted unchanged "
                       "(failurePolicy Ignore)", request.app[MAX_BYTES_KEY])
        return web.Response(status=413, text="admission review too large\n")
    except Exception as exc:  # a client that went away mid-body, a broken chunk
        logger.warning("admission review could not be read: %s", exc)
        return web.json_response(Answer(uid="").review())
    try:
        review: Any = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested deeper than the parser goes
        logger.warning("admission review is not JSON (%d bytes); answered allowed", len(body))
        return web.json_response(Answer(uid="").review())
    namespace = excluded(review, request.app[EXCLUDED_KEY])
    if namespace is not None:
        answer = Answer(uid=_uid_of(review), why=f"namespace {namespace} is excluded; admitted unchanged")
        logger.info("admission review %s: %s", _where(review), answer.why)
        return web.json_response(answer.review())
    try:
        answer = decide(review, settings)
    except Exception:  # a bug must not turn into a refused or stalled pod
        logger.exception("admission review %s: no decision; answered allowed", _where(review))
        return web.json_response(Answer(uid=_uid_of(review)).review())
    logger.info("admission review %s: %s", _where(review), answer.why)
    return web.json_response(answer.review())


def make_app(*, settings: SidecarInjectionSettings, webhook: WebhookSettings) -> web.Application:
    """The webhook's application: ``POST`` :data:`PATH`, bodies capped at ``max_request_bytes``,
    connections bounded by ``webhook.connections``."""
    app = web.Application(client_max_size=webhook.max_request_bytes)
    app[SETTINGS_KEY] = settings
    app[MAX_BYTES_KEY] = webhook.max_request_bytes
    app[EXCLUDED_KEY] = frozenset(webhook.excluded_namespaces)
    serving_limits.install(app, webhook.connections, name="admission webhook")
    app.router.add_post(PATH, mutate)
    return app


@dataclass
class Serving:
    """The webhook, listening: its base URL (``https://host:port``) and its runner, for stopping."""

    url: str
    runner: web.AppRunner

    async def stop(self) -> None:
        await self.runner.cleanup()


@contextlib.asynccontextmanager
async def serve(
    *, webhook: WebhookSettings, sidecar: SidecarInjectionSettings, host: str
) -> AsyncIterator[Serving]:
    """Serve the webhook over TLS on ``webhook.port`` until the block ends (or :meth:`Serving.stop`)."""
    certificate = ServerCertificate(webhook.tls_cert_file, webhook.tls_key_file)
    app = make_app(settings=sidecar, webhook=webhook)
    runner = serving_limits.runner(app, shutdown_timeout=2.0)
    watching = Background("admission-webhook")
    await runner.setup()
    try:
        watching.start(certificate.watch(), name="webhook-tls-certificate", eternal=True)
        await serving_limits.start(runner, host=host, port=webhook.port, ssl_context=certificate.context)
        port = webhook.port
        for address in runner.addresses:
            port = int(address[1])
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        url = f"https://{shown}:{port}"
        logger.info("admission webhook: adding the podmortem sidecar to pods on %s%s", url, PATH)
        yield Serving(url=url, runner=runner)
    finally:
        await watching.close()
        await runner.cleanup()
