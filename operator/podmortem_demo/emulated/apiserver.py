"""A Kubernetes API on kmock 0.8 that behaves closer to the real one where our code cares.

kmock 0.8 stores objects without ``uid``/``resourceVersion`` and accepts patches
of any content type. :class:`KubernetesApi` stamps both on create and update and
answers 415 to a patch whose content type the real apiserver would refuse.
``/api/v1/namespaces`` breaks kmock's path parser, so namespaces are answered
here: list and watch (kopf opens them when it watches chosen namespaces), get,
create and label (``kubectl create namespace``, ``kubectl label namespace``),
from the namespaces the stored objects are in plus :attr:`KubernetesApi.namespaces`.
TokenReviews and SubjectAccessReviews are answered from :attr:`KubernetesApi.reviews`.
A client that asks for a ``meta.k8s.io/v1`` Table (``kubectl get``, also with ``-w``) gets
one: with the printer columns of :attr:`KubernetesApi.printer_columns` (a CRD's
``additionalPrinterColumns``) for a resource given some, else Name and Age, as the
apiserver prints a custom resource without columns (built-in kinds' own columns,
a pod's Ready or Status, are not emulated; kubectl showed only NAME and AGE for
them before too). Event lists honour
``fieldSelector`` (``involvedObject.name=...``: ``kubectl describe`` shows an object's own
Events by it); kmock ignores it everywhere else.
With :attr:`KubernetesApi.record_calls` on, every request's attributes (verb, group,
resource, namespace...: :mod:`podmortem_demo.emulated.calls`) are kept in
:attr:`KubernetesApi.calls`, for comparing what a client does with its RBAC rules.
Its other known gaps are left as they are and listed here so users are not
surprised: watches replay every object as ADDED and ignore ``resourceVersion``
and ``timeoutSeconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import itertools
import json
import uuid
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import kmock
import yaml

from podmortem_demo.emulated import calls as calls_mod
from podmortem_demo.emulated import reviews as reviews_mod

#: The columns after Name of a custom resource without printer columns, as the apiserver prints it.
DEFAULT_COLUMNS: list[dict[str, Any]] = [
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

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
    #: Labels of namespaces, as ``kubectl label namespace`` sets them.
    namespace_labels: dict[str, dict[str, str]] = attrs.field(factory=dict, init=False)
    #: Answers to TokenReviews and SubjectAccessReviews (the log API's access checks).
    reviews: reviews_mod.Reviews = attrs.field(factory=reviews_mod.Reviews, kw_only=True)
    #: Keep every request's attributes in :attr:`calls` (off: nothing is kept).
    record_calls: bool = attrs.field(default=False, kw_only=True)
    calls: list[calls_mod.ApiCall] = attrs.field(factory=list, init=False)
    #: The tasks serving open watches (see `close_watches`).
    _watches: set[asyncio.Task[Any]] = attrs.field(factory=set, init=False)
    #: Printer columns per resource ("group/version/plural"), in a CRD's ``additionalPrinterColumns``
    #: form (name, type, jsonPath, description, priority), for the Tables kubectl asks for; a
    #: resource without an entry gets `DEFAULT_COLUMNS`.
    printer_columns: dict[str, list[dict[str, Any]]] = attrs.field(factory=dict, kw_only=True)

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        if raw_request.query.get("watch") not in ("true", "1"):
            return await self._serve(raw_request)
        task = asyncio.current_task()
        if task is None:
            return await self._serve(raw_request)
        self._watches.add(task)
        try:
            return await self._serve(raw_request)
        finally:
            self._watches.discard(task)

    def close_watches(self) -> int:
        """End the open watches, as an apiserver that stops does; call on the API's loop.

        An open watch (``kubectl get -w``) otherwise holds the server's shutdown for a minute
        (aiohttp waits for a request in progress). Returns how many were ended."""
        watches = list(self._watches)
        for task in watches:
            task.cancel()
        return len(watches)

    async def _serve(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        path = raw_request.path.rstrip("/")
        if self.record_calls:
            self.calls.append(calls_mod.attributes(raw_request.method, raw_request.path, raw_request.query,
                                                   user=_user(raw_request.headers, raw_request.transport)))
        if raw_request.method == "POST" and path in (reviews_mod.TOKEN_REVIEWS, reviews_mod.ACCESS_REVIEWS):
            return await self._serve_review(raw_request, path)
        if path.startswith("/openapi/"):
            return self._serve_openapi(path)
        if path == "/api/v1/namespaces" or (path.startswith("/api/v1/namespaces/") and path.count("/") == 4):
            return await self._serve_namespaces(raw_request)
        return await super().__call__(raw_request)

    def _serve_openapi(self, path: str) -> aiohttp.web.StreamResponse:
        """An OpenAPI v3 index of the served group versions, each with an empty document.

        kubectl downloads it before ``apply`` to learn that the server validates fields itself
        (it then sends ``fieldValidation=Strict``, which kmock ignores); without it kubectl refuses.
        """
        if path == "/openapi/v3":
            versions = {"api/v1"} | {
                f"apis/{r.group}/{r.version}" for r in self._get_resources() if r.group and r.version
            }
            return aiohttp.web.json_response({"paths": {
                v: {"serverRelativeURL": f"/openapi/v3/{v}?hash=emulated"} for v in sorted(versions)}})
        if path.startswith("/openapi/v3/"):
            # Each resource's PATCH takes fieldValidation: kubectl then validates on the server's side.
            gv = path.removeprefix("/openapi/v3/").removeprefix("api/").removeprefix("apis/")
            paths = {}
            for r in self._get_resources():
                if f"{r.group}/{r.version}".lstrip("/") != gv or not r.plural:
                    continue
                info = self.resources.get(f"{r.group}/{r.version}/{r.plural}".lstrip("/"))
                kind = getattr(info, "kind", None)
                if not kind:
                    continue
                prefix = f"/apis/{r.group}/{r.version}" if r.group else f"/api/{r.version}"
                middle = "/namespaces/{namespace}" if getattr(info, "namespaced", True) else ""
                paths[f"{prefix}{middle}/{r.plural}/{{name}}"] = {"patch": {
                    "x-kubernetes-group-version-kind": {"group": r.group, "version": r.version, "kind": kind},
                    "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "OK"}},
                }}
            about = {"title": "emulated", "version": "v"}
            return aiohttp.web.json_response({"openapi": "3.0.0", "info": about, "paths": paths,
                                              "components": {"schemas": {}}})
        if path == "/openapi/v2":
            return aiohttp.web.json_response({"swagger": "2.0", "info": {"title": "emulated", "version": "v"},
                                              "paths": {}, "definitions": {}})
        return aiohttp.web.json_response({"kind": "Status", "code": 404, "reason": "NotFound"}, status=404)

    def _authenticated(self, headers: Any, transport: Any) -> bool:
        """One of :attr:`tokens` as a bearer token, or a client certificate the TLS layer verified
        against the server's CA (it asks for one optionally), as the apiserver authenticates."""
        if self.tokens is None:
            return True
        if transport is not None and transport.get_extra_info("peercert"):
            return True
        scheme, _, token = (headers.get("Authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and token.strip() in self.tokens

    async def _serve_review(self, raw_request: aiohttp.web.BaseRequest, path: str
                            ) -> aiohttp.web.StreamResponse:
        if not self._authenticated(raw_request.headers, raw_request.transport):
            self.refused.append((401, f"POST {path}"))
            return aiohttp.web.json_response({"kind": "Status", "code": 401, "reason": "Unauthorized"},
                                             status=401)
        body = await raw_request.json()
        if path == reviews_mod.TOKEN_REVIEWS:
            answer = self.reviews.token_review(body)
        else:
            answer = self.reviews.access_review(body)
        return aiohttp.web.json_response(answer, status=201)

    def _namespace(self, name: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": name, "uid": f"ns-{name}", "resourceVersion": "1",
                             "labels": {"kubernetes.io/metadata.name": name,
                                        **self.namespace_labels.get(name, {})}},
                "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}

    async def _serve_namespaces(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        """Namespaces: list and watch, get, create (``kubectl create namespace``) and patch (labels)."""
        if not self._authenticated(raw_request.headers, raw_request.transport):
            return aiohttp.web.json_response({"kind": "Status", "code": 401, "reason": "Unauthorized"},
                                             status=401)
        names = set(self.namespaces) | {ns for (_res, ns, _name) in self.objects if ns}
        parts = raw_request.path.rstrip("/").split("/")
        one = parts[4] if len(parts) == 5 else None
        if raw_request.method == "POST" and one is None:
            raw = await raw_request.read()
            body = _namespace_from_protobuf(raw) if raw.startswith(_PROTOBUF_MAGIC) else json.loads(raw)
            name = str((body.get("metadata") or {}).get("name") or "")
            if name in names:
                return aiohttp.web.json_response(
                    {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 409,
                     "reason": "AlreadyExists", "message": f'namespaces "{name}" already exists'}, status=409)
            self.namespaces.add(name)
            self.namespace_labels[name] = dict((body.get("metadata") or {}).get("labels") or {})
            return aiohttp.web.json_response(self._namespace(name), status=201)
        if one is not None:
            if one not in names:
                return aiohttp.web.json_response(
                    {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
                     "reason": "NotFound", "message": f'namespaces "{one}" not found'}, status=404)
            if raw_request.method == "PATCH":
                patch = await raw_request.json()
                labels = (patch.get("metadata") or {}).get("labels") or {}
                current = self.namespace_labels.setdefault(one, {})
                for key, value in labels.items():
                    if value is None:
                        current.pop(key, None)
                    else:
                        current[key] = str(value)
            elif raw_request.method != "GET":
                return aiohttp.web.json_response({"kind": "Status", "code": 405}, status=405)
            return aiohttp.web.json_response(self._namespace(one))
        if raw_request.method != "GET":
            return aiohttp.web.json_response({"kind": "Status", "code": 405}, status=405)
        items = [self._namespace(n) for n in sorted(names)]
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
        # kmock 0.8 gives the plural as the singular name; kubectl resolves `get trainingjob` by it.
        for resource in (payload.get("resources") or []) if isinstance(payload, dict) else []:
            name, kind = str(resource.get("name", "")), resource.get("kind")
            if "/" in name:
                resource.pop("shortNames", None)  # kmock copies them onto subresources
            elif kind and resource.get("singularName") in (None, "", name):
                resource["singularName"] = str(kind).lower()
        return payload

    async def _serve_list(self, request: kmock.Request) -> Any:
        # kmock 0.8 answers a list without apiVersion and kind; kubectl refuses such a list.
        payload = await super()._serve_list(request)
        if isinstance(payload, dict) and request.resource is not None:
            r = request.resource
            key = f"{r.group}/{r.version}/{r.plural}" if r.group else f"{r.version}/{r.plural}"
            info = self.resources.get(key)
            kind = getattr(info, "kind", None) or str(r.plural or "").capitalize()
            payload.setdefault("apiVersion", f"{r.group}/{r.version}" if r.group else r.version)
            payload.setdefault("kind", f"{kind}List")
            selector = request.params.get("fieldSelector")
            if r.plural == "events" and selector:
                payload["items"] = [o for o in payload.get("items") or [] if _fields_match(o, selector)]
            table = self._table_wanted(request)
            if table is not None:
                return _table(table, self._columns(r), payload.get("items") or [],
                              include=request.params.get("includeObject") or "Metadata")
        return payload

    async def _serve_fetch(self, request: kmock.Request) -> Any:
        payload = await super()._serve_fetch(request)
        table = self._table_wanted(request)
        if table is not None and isinstance(payload, dict) and request.resource is not None:
            return _table(table, self._columns(request.resource), [payload],
                          include=request.params.get("includeObject") or "Metadata")
        return payload

    def _table_wanted(self, request: kmock.Request) -> str | None:
        """``meta.k8s.io/v1`` (or v1beta1) when the client accepts a Table and asks for no
        subresource; None: answer the objects as they are."""
        r = request.resource
        if r is None or (request.name and not request.url.path.rstrip("/").endswith(f"/{request.name}")):
            return None  # none asked for, or a subresource (status)
        return _accepted_table(request.headers.get("Accept") or "")

    def _columns(self, resource: Any) -> list[dict[str, Any]]:
        return self.printer_columns.get(_key(resource), DEFAULT_COLUMNS)

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
        if request.action == kmock.action.WATCH:
            table = self._table_wanted(request)
            if table is not None:
                return await self._serve_table_watch(request, table)
        return await super()._handle(request)

    async def _serve_table_watch(self, request: kmock.Request, api_version: str
                                 ) -> aiohttp.web.StreamResponse:
        """``kubectl get -w``: each event's object as a one-row Table, as a JSON watch stream.

        kubectl starts the watch at the resourceVersion of the Table it listed; kmock replays every
        object first, so events of objects not changed since are left out, as the apiserver would."""
        assert request.resource is not None and request._raw_request is not None
        columns = self._columns(request.resource)
        since = _version(request.params.get("resourceVersion"))
        include = request.params.get("includeObject") or "Metadata"
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json;stream=watch"})
        await response.prepare(request._raw_request)
        with contextlib.suppress(ConnectionError):
            async for event in self._serve_watch(request):
                if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
                    continue  # kmock's first, empty chunk
                obj: dict[str, Any] = event["object"]
                if _version((obj.get("metadata") or {}).get("resourceVersion")) <= since:
                    continue  # not changed since the list
                row = _table(api_version, columns, [obj], include=include)
                change = {"type": event.get("type"), "object": row}
                await response.write(json.dumps(change).encode() + b"\n")
        return response


def _key(r: Any) -> str:
    """A kmock resource as ``group/version/plural`` (core: ``v1/pods``), as `resources` keys them."""
    return f"{r.group}/{r.version}/{r.plural}" if r.group else f"{r.version}/{r.plural}"


def _version(value: Any) -> int:
    """A resourceVersion as a number (this API's are counters); 0 for none or another form."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _accepted_table(accept: str) -> str | None:
    """The Table version an Accept header asks for first (``as=Table;v=v1;g=meta.k8s.io``), if any."""
    for media in accept.split(","):
        kind, *params = (part.strip() for part in media.split(";"))
        if kind != "application/json":
            continue
        fields = dict(p.partition("=")[::2] for p in params)
        if fields.get("as") == "Table" and fields.get("g") == "meta.k8s.io" \
                and fields.get("v") in ("v1", "v1beta1"):
            return f"meta.k8s.io/{fields['v']}"
    return None


def _table(api_version: str, columns: list[dict[str, Any]], objects: list[dict[str, Any]], *,
           include: str) -> dict[str, Any]:
    """The apiserver's Table of custom resources: a Name column, then the CRD's printer columns,
    their cells converted as the apiextensions apiserver converts them (dates to ages, ``None`` for a
    missing field), and each row's object as ``includeObject`` asks (metadata only by default)."""
    definitions = [{"name": "Name", "type": "string", "format": "name", "priority": 0,
                    "description": "Name must be unique within a namespace."}]
    for column in columns:
        definitions.append({
            "name": column["name"], "type": column.get("type", "string"), "format": column.get("format", ""),
            "priority": int(column.get("priority", 0)),
            "description": column.get("description")
            or f"Custom resource definition column (in JSONPath format): {column['jsonPath']}",
        })
    rows = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        cells: list[Any] = [meta.get("name")]
        cells += [_cell(str(c.get("type", "string")), _json_path(obj, str(c["jsonPath"]))) for c in columns]
        row: dict[str, Any] = {"cells": cells}
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": meta}
        rows.append(row)
    newest = max((_version((o.get("metadata") or {}).get("resourceVersion")) for o in objects), default=0)
    return {"kind": "Table", "apiVersion": api_version, "metadata": {"resourceVersion": str(newest)},
            "columnDefinitions": definitions, "rows": rows}


_MISSING = object()


def _fields_match(obj: dict[str, Any], selector: str) -> bool:
    """Whether ``obj`` passes a field selector (``involvedObject.name=x,type!=Normal``), as the
    apiserver compares: a field's string value, a missing field as the empty string."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        path, op, want = term.partition("!=")
        if not op:
            path, op, want = term.partition("==") if "==" in term else term.partition("=")
        value = _json_path(obj, path)
        have = "" if value is _MISSING or value is None else str(value)
        if (have == want) != (op != "!="):
            return False
    return True


def _json_path(obj: Any, path: str) -> Any:
    """A printer column's simple JSONPath (``.status.failureReport.verdict``, ``.items[0]``)."""
    value = obj
    for part in path.strip().strip("{}").lstrip(".").split("."):
        name, _, index = part.partition("[")
        if name:
            if not isinstance(value, dict) or name not in value:
                return _MISSING
            value = value[name]
        if index:
            try:
                value = value[int(index.rstrip("]"))]
            except (TypeError, ValueError, IndexError, KeyError):
                return _MISSING
    return value


def _cell(kind: str, value: Any) -> Any:
    """A cell as the apiextensions apiserver writes it (``tableconvertor.cellForJSONValue``)."""
    if value is _MISSING or value is None:
        return None
    if kind == "string":
        return value if isinstance(value, str) else json.dumps(value)
    if kind == "integer":
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    if kind == "number":
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    if kind == "date":
        if not isinstance(value, str):
            return None
        try:
            then = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return "<invalid>"
        return human_duration((datetime.datetime.now(datetime.UTC) - then).total_seconds())
    return value


def human_duration(seconds: float) -> str:
    """An age as kubectl prints one (``k8s.io/apimachinery/pkg/util/duration.HumanDuration``)."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


#: kubectl sends built-in kinds (a Namespace) as protobuf: "k8s\0", then a runtime.Unknown.
_PROTOBUF_MAGIC = b"k8s\x00"


def _protobuf_fields(buf: bytes) -> list[tuple[int, bytes | None]]:
    """The top-level fields of a protobuf message: (number, bytes) for length-delimited ones."""

    def varint(i: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = buf[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value, i

    out: list[tuple[int, bytes | None]] = []
    i = 0
    while i < len(buf):
        key, i = varint(i)
        number, wire = key >> 3, key & 7
        if wire == 2:
            size, i = varint(i)
            out.append((number, buf[i:i + size]))
            i += size
        elif wire == 0:
            _, i = varint(i)
            out.append((number, None))
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise ValueError(f"protobuf wire type {wire} not read here")
    return out


def _namespace_from_protobuf(raw: bytes) -> dict[str, Any]:
    """The name and labels of a protobuf Namespace (Unknown.raw -> Namespace.metadata -> name, labels)."""
    unknown = dict(_protobuf_fields(raw[len(_PROTOBUF_MAGIC):]))
    namespace = dict(_protobuf_fields(unknown.get(2) or b""))
    metadata = _protobuf_fields(namespace.get(1) or b"")
    name = next((v.decode() for n, v in metadata if n == 1 and v is not None), "")
    labels = {}
    for number, entry in metadata:
        if number == 11 and entry is not None:
            kv = dict(_protobuf_fields(entry))
            labels[(kv.get(1) or b"").decode()] = (kv.get(2) or b"").decode()
    return {"metadata": {"name": name, "labels": labels}}


def _user(headers: Any, transport: Any) -> str:
    """Who sent a request: its bearer token, "client-certificate", or "" for an anonymous one."""
    scheme, _, token = (headers.get("Authorization") or "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    if transport is not None and transport.get_extra_info("peercert"):
        return "client-certificate"
    return ""


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
