"""A Kubernetes API on kmock 0.8 that behaves closer to the real one where our code cares.

kmock 0.8 stores objects without ``uid``/``resourceVersion`` and accepts patches
of any content type. :class:`KubernetesApi` stamps both on create and update and
answers 415 to a patch whose content type the real apiserver would refuse.
``GET /api/v1/namespaces`` breaks kmock's path parser, so that one list (and its
watch, which kopf opens when it watches chosen namespaces) is answered here,
from the namespaces the stored objects are in plus :attr:`KubernetesApi.namespaces`.
Its other known gaps are left as they are and listed here so users are not
surprised: watches replay every object as ADDED and ignore ``resourceVersion``
and ``timeoutSeconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import itertools
import uuid
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import kmock
import yaml

#: Content types the apiserver accepts on PATCH.
PATCH_CONTENT_TYPES = frozenset({
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
})


@attrs.define(kw_only=True)
class KubernetesApi(kmock.KubernetesEmulator):
    """kmock's in-memory Kubernetes API, with uids, resource versions and patch checks."""

    _versions: Any = attrs.field(factory=lambda: itertools.count(1), init=False)
    #: Patches refused for their content type, for tests to assert on.
    refused_patches: list[kmock.Request] = attrs.field(factory=list, init=False)
    #: Bearer tokens the API accepts; None accepts any request, as kmock does (plain-HTTP tests).
    #: With tokens set, a request with neither one of them nor a client certificate signed by the
    #: server's CA gets 401, as from a real apiserver.
    tokens: set[str] | None = attrs.field(default=None, kw_only=True)
    #: Resources ("group/version/plural", core as "v1/pods") every request on which gets 403:
    #: a ClusterRole that misses them.
    forbidden: set[str] = attrs.field(factory=set, kw_only=True)
    #: Requests refused with 401 or 403, for tests to assert on.
    refused: list[tuple[int, str]] = attrs.field(factory=list, init=False)
    #: Namespaces that exist besides those the stored objects are in.
    namespaces: set[str] = attrs.field(factory=lambda: {"default"}, kw_only=True)

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        if raw_request.method == "GET" and raw_request.path.rstrip("/") == "/api/v1/namespaces":
            return await self._serve_namespaces(raw_request)
        return await super().__call__(raw_request)

    def _authenticated(self, headers: Any, transport: Any) -> bool:
        """One of :attr:`tokens` as a bearer token, or a client certificate the TLS layer verified
        against the server's CA (it asks for one optionally), as the apiserver authenticates."""
        if self.tokens is None:
            return True
        if transport is not None and transport.get_extra_info("peercert"):
            return True
        scheme, _, token = (headers.get("Authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and token.strip() in self.tokens

    async def _serve_namespaces(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        if not self._authenticated(raw_request.headers, raw_request.transport):
            return aiohttp.web.json_response({"kind": "Status", "code": 401, "reason": "Unauthorized"},
                                             status=401)
        names = set(self.namespaces) | {ns for (_res, ns, _name) in self.objects if ns}
        items = [{"apiVersion": "v1", "kind": "Namespace",
                  "metadata": {"name": n, "uid": f"ns-{n}", "resourceVersion": "1"},
                  "status": {"phase": "Active"}} for n in sorted(names)]
        if raw_request.query.get("watch") not in ("true", "1"):
            return aiohttp.web.json_response({"apiVersion": "v1", "kind": "NamespaceList",
                                              "metadata": {"resourceVersion": "1"}, "items": items})
        # A watch that stays quiet (namespaces come and go rarely), closed as the apiserver would.
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(raw_request)
        timeout = min(float(raw_request.query.get("timeoutSeconds") or 60), 60.0)
        with contextlib.suppress(ConnectionError):
            await asyncio.sleep(timeout)
        return response

    async def _serve_version(self, request: kmock.Request) -> Any:
        # kmock 0.8 names the core group version "/v1"; kubectl then finds no resources at all.
        payload = await super()._serve_version(request)
        if isinstance(payload, dict) and str(payload.get("groupVersion", "")).startswith("/"):
            payload["groupVersion"] = payload["groupVersion"][1:]
        return payload

    def next_resource_version(self) -> str:
        return str(next(self._versions))

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        raw = getattr(request, "_raw_request", None)
        if not self._authenticated(request.headers, getattr(raw, "transport", None)):
            self.refused.append((401, f"{request.method} {request.url.path}"))
            raise kmock.KubernetesError(status=401, reason="Unauthorized", message="Unauthorized")
        if request.resource is not None and self.forbidden:
            r = request.resource
            key = f"{r.group}/{r.version}/{r.plural}" if r.group else f"{r.version}/{r.plural}"
            if key in self.forbidden:
                self.refused.append((403, f"{request.method} {request.url.path}"))
                raise kmock.KubernetesError(
                    status=403, reason="Forbidden",
                    message=f'{r.plural} is forbidden: User "system:serviceaccount:podmortem:podmortem" '
                            f'cannot {request.method.lower()} resource "{r.plural}" in API group "{r.group}"')
        if request.method == "PATCH":
            content_type = (request.headers.get("Content-Type") or "").split(";")[0].strip()
            if content_type not in PATCH_CONTENT_TYPES:
                self.refused_patches.append(request)
                raise kmock.KubernetesError(
                    status=415, reason="UnsupportedMediaType",
                    message=f"the body of the request was in an unknown format: {content_type or 'none'}")
        if request.resource is not None and isinstance(request.data, dict):
            meta = request.data.setdefault("metadata", {})
            if request.action == kmock.action.CREATE:
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", _now())
                meta["resourceVersion"] = self.next_resource_version()
            elif request.action == kmock.action.UPDATE:
                meta["resourceVersion"] = self.next_resource_version()
        return await super()._handle(request)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_kubeconfig(path: Path, *, server: str, namespace: str = "default", token: str = "emulated") -> Path:
    """A kubeconfig file pointing at an emulated API (plain HTTP), for kubectl and our CLI."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emulated", "cluster": {"server": server}}],
        "users": [{"name": "emulated", "user": {"token": token}}],
        "contexts": [{"name": "emulated",
                      "context": {"cluster": "emulated", "user": "emulated", "namespace": namespace}}],
        "current-context": "emulated",
    }
    path.write_text(yaml.safe_dump(config))
    return path
