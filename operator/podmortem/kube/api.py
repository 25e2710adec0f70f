"""The Kubernetes API calls the operator and the node agent make, as plain JSON over an `ApiSession`.

kopf watches and dispatches; these calls write reports, statuses and Events
directly so a report lands within the 2 s budget instead of waiting for a
handler round trip. Every patch is a JSON merge patch with that content type:
custom resources reject strategic merge patches. The requests go through
:class:`~podmortem.kube.session.ApiSession`, the one way to the API server
(credentials kept fresh, requests paced, answers within byte budgets).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from podmortem.errors import PodmortemError
from podmortem.kube.bodies import Body

if TYPE_CHECKING:
    from podmortem.kube.session import ApiSession

MERGE_PATCH = "application/merge-patch+json"
COMPONENT = "podmortem-operator"

EVENT_MESSAGE_MAX_BYTES = 1024
"""Bytes of UTF-8 in an Event's message. The API server validates a core/v1 Event's message
against no length (``ValidateEventCreate`` stops after the legacy checks for core/v1); the
events.k8s.io/v1 ``note`` is capped at ``NoteLengthLimit`` = 1024 (Go's ``len``: bytes), and
the kube-scheduler truncates its own core/v1 Event messages to that limit. So do we: an Event
is a line in ``kubectl describe``, the report itself is in the status or the annotation, and a
message carrying a pod's log line or an annotation whole was once 360,317 characters."""

_ELLIPSIS = "…"


def event_message(message: str, limit: int = EVENT_MESSAGE_MAX_BYTES) -> str:
    """``message``, or its start within ``limit`` UTF-8 bytes cut at a word and ended with ``…``.

    The cut is at the last whitespace of the part that fits when that keeps three quarters of
    it, else at a character boundary (a value with no spaces is then quoted in part). A closing
    ``(...)`` of at most half the limit, where podmortem's Events say where the report is, is
    kept after the ``…``.
    """
    if len(message) <= limit // 4 or len(message.encode("utf-8", "replace")) <= limit:
        return message
    pointer = _POINTER.search(message[-(limit // 2) :])
    tail = pointer[0] if pointer is not None and len(pointer[0].encode()) <= limit // 2 else ""
    body = message[: len(message) - len(tail)]
    room = limit - len((_ELLIPSIS + tail).encode("utf-8", "replace"))
    head = body.encode("utf-8", "replace")[:room].decode("utf-8", "ignore")  # ignore: a split character
    space = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
    if space >= len(head) * 3 // 4:
        head = head[:space]
    return head.rstrip() + _ELLIPSIS + tail


#: A message's closing parenthetical (``... (podmortem failure report in ..., page URL)``).
_POINTER = re.compile(r" \([^()]*\)\Z")


class KubeError(PodmortemError):
    """The API answered with an error status; ``status`` 0 means no answer at all."""

    def __init__(self, status: int, reason: str, body: str = "") -> None:
        super().__init__(f"HTTP {status} {reason}: {body[:300]}" if status else f"{reason}: {body[:300]}")
        self.status = status
        self.reason = reason
        self.body = body


class KubeApi(Protocol):
    """The read the agent needs (one JSON GET), so its tests can stand in for the API."""

    async def get_json(self, path: str, *, query: list[tuple[str, str]] | None = None) -> dict[str, Any]: ...

    async def close(self) -> None: ...


def resource_path(
    group: str,
    version: str,
    plural: str,
    namespace: str | None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    if namespace is not None:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    if name is not None:
        base += f"/{name}"
    if subresource is not None:
        base += f"/{subresource}"
    return base


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


#: Bytes of a list's answer (`Kube.list`): its items are asked for by selector, and a namespace's
#: events or a node's pods are a few MiB at most; the object budget (the session's) would refuse them.
LIST_MAX_BYTES = 64 * 1024 * 1024


class Kube:
    """JSON in, JSON out. ``timeout_s`` bounds every call."""

    def __init__(self, *, api: ApiSession, timeout_s: float = 10.0) -> None:
        self.api = api
        self.timeout_s = timeout_s

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
        content_type: str = "application/json",
        max_body_bytes: int | None = None,
    ) -> dict[str, Any]:
        return await self.api.request(method, path, query=query, body=body, content_type=content_type,
                                      timeout_s=self.timeout_s, max_body_bytes=max_body_bytes)

    async def get(self, path: str) -> dict[str, Any] | None:
        """The object, or ``None`` when it does not exist."""
        try:
            return await self.request("GET", path)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(
        self, path: str, *, label_selector: str = "", field_selector: str = ""
    ) -> list[dict[str, Any]]:
        query = {}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        answer = await self.request("GET", path, query=query, max_body_bytes=LIST_MAX_BYTES)
        items = answer.get("items") or []
        return [i for i in items if isinstance(i, dict)]

    async def get_json(self, path: str, *, query: Sequence[tuple[str, str]] | None = None) -> dict[str, Any]:
        """One GET whose every failure is a `KubeError`: no answer (status 0) included."""
        import aiohttp

        try:
            return await self.request("GET", path, query=query)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise KubeError(0, f"GET {path}", f"{type(exc).__name__}: {exc}") from exc
        except ValueError as exc:
            raise KubeError(200, f"GET {path}", "the answer is not JSON") from exc

    async def close(self) -> None:
        await self.api.close()

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.request("POST", path, body=dict(body))

    async def merge_patch(self, path: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        return await self.request("PATCH", path, body=dict(patch), content_type=MERGE_PATCH)

    async def post_event(
        self,
        *,
        involved: Mapping[str, Any],
        type_: str,
        reason: str,
        message: str,
    ) -> None:
        """A core/v1 Event about ``involved`` (an object with apiVersion, kind and metadata).

        Every Event podmortem posts comes here, so its message is capped here, once
        (`event_message`, `EVENT_MESSAGE_MAX_BYTES`).
        """
        meta = Body(involved).metadata
        namespace = Body(involved).namespace or "default"
        now = now_rfc3339()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta.get('name', 'object')[:200]}.{uuid.uuid4().hex[:12]}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": involved.get("apiVersion"),
                "kind": involved.get("kind"),
                "name": meta.get("name"),
                "namespace": namespace,
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            "message": event_message(message),
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        await self.create(resource_path("", "v1", "events", namespace), event)


#: Seconds for one of the agent's API calls: listing a node's pods is small, and a slow API server
#: must not hold up a sampling round for long (the previous pod set is reused when a listing fails).
AGENT_REQUEST_TIMEOUT_S = 10.0


async def connect(kubeconfig: Any = None) -> Kube:
    """A client for ``kubeconfig``, else ``$KUBECONFIG``, the pod's service account, ``~/.kube/config``
    (:func:`podmortem.kube.config.load`, as the operator and the CLI find it)."""
    from podmortem.kube import config
    from podmortem.kube.session import ApiSession

    return Kube(api=ApiSession(config.load(kubeconfig)), timeout_s=AGENT_REQUEST_TIMEOUT_S)
