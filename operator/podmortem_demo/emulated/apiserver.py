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
Lists and watches behave as kube-apiserver's watch cache makes them (:mod:`watch_cache`: resource
versions from one counter, pages with ``continue``, watches from a resourceVersion with
``timeoutSeconds`` and BOOKMARKs, 410 once the history is gone: :meth:`KubernetesApi.forget_history`);
a create of an object that exists is 409 ``AlreadyExists``, an update (PUT, served here) or a patch
whose body carries a stale ``metadata.resourceVersion`` 409 ``Conflict``, a missing object 404
``NotFound``, each worded as the apiserver words it; Events are validated on create
(:mod:`validation`). Known gaps: label and field selectors (but the Events' one above) are ignored.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import contextvars
import datetime
import json
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import kmock
import yaml

from podmortem_demo.emulated import calls as calls_mod
from podmortem_demo.emulated import merge_patch as patching
from podmortem_demo.emulated import reviews as reviews_mod
from podmortem_demo.emulated import validation
from podmortem_demo.emulated import watch_cache as cache

#: The request being handled, for errors raised where kmock does not pass it (`_render_error`).
_REQUEST: contextvars.ContextVar[kmock.Request | None] = contextvars.ContextVar("request", default=None)

#: The columns after Name of a custom resource without printer columns, as the apiserver prints it.
DEFAULT_COLUMNS: list[dict[str, Any]] = [
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

#: Resources whose update (PUT) must carry ``metadata.resourceVersion`` (their strategy's
#: ``AllowUnconditionalUpdate`` is false; measured for Leases): without one it is 422 Invalid.
CONDITIONAL_UPDATES_ONLY = frozenset({"coordination.k8s.io/v1/leases"})
#: Resources an update (PUT) of a missing object creates (``AllowCreateOnUpdate``; measured for
#: Leases: 201, whatever resourceVersion it carries); others answer 404.
CREATE_ON_UPDATE = frozenset({"coordination.k8s.io/v1/leases"})

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

    #: The last resourceVersion given out (etcd's revision): every change takes the next one.
    resource_version: int = attrs.field(default=0, init=False)
    _feeds: dict[Any, cache.Feed] = attrs.field(factory=dict, init=False)
    _snapshots: cache.Snapshots = attrs.field(factory=cache.Snapshots, init=False)
    #: Where the history starts for a resource first changed after `forget_history`.
    _floor: int = attrs.field(default=0, init=False)
    #: Seconds between BOOKMARKs on a watch that asked for them (the apiserver's: about a minute).
    bookmark_interval_s: float = attrs.field(default=cache.BOOKMARK_INTERVAL_S, kw_only=True)
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

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        # kmock announces every change on a bus per resource (and the scale cluster does too): each
        # announcement is recorded here instead, stamped with the next resourceVersion.
        self._buses = _Recorders(self)  # type: ignore[assignment]

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
        if raw_request.query.get("watch") in ("1", "True"):  # the apiserver's ParseBool; kmock knows "true"
            raw_request = raw_request.clone(rel_url=raw_request.rel_url.update_query(watch="true"))
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
        """A list in key order, in pages of ``limit`` with ``continue`` tokens; the later pages are cut
        from the first one's snapshot; an old token gets 410 with a fresh one (watch_cache)."""
        r = request.resource
        assert r is not None
        namespaced = request.namespace is not None
        token = request.params.get("continue")
        limit = int(request.params.get("limit") or 0)
        snapshot_key: tuple[Any, ...] | None = None
        after = ""
        if token:
            try:
                rv, after = cache.decode_continue(token)
            except cache.BadContinue as exc:
                raise _Answer(400, cache.status(400, "BadRequest", str(exc))) from exc
            snapshot_key = (_key(r), request.namespace, request.params.get("fieldSelector"), rv)
            found = self._snapshots.get(snapshot_key) if rv >= 0 else None
            if found is None and rv >= 0:
                raise _Answer(410, cache.status(410, "Expired", cache.INCONSISTENT_CONTINUE,
                                                continue_=cache.encode_continue(-1, after)))
        else:
            found = None
        if found is None:
            payload: Any = await super()._serve_list(request)
            items = list(payload.get("items") or [])
            selector = request.params.get("fieldSelector")
            if r.plural == "events" and selector:
                items = [o for o in items if _fields_match(o, selector)]
            keys = [_object_key(o, namespaced=namespaced) for o in items]
            order = sorted(range(len(items)), key=keys.__getitem__)
            keys, items = [keys[i] for i in order], [items[i] for i in order]
            rv = self.resource_version
            snapshot_key = (_key(r), request.namespace, request.params.get("fieldSelector"), rv)
        else:
            keys, items = found
        first = bisect.bisect_right(keys, after) if after else 0
        last = first + limit if limit > 0 else len(items)
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if last < len(items):
            assert snapshot_key is not None
            self._snapshots.put(snapshot_key, keys, items)
            meta["continue"] = cache.encode_continue(rv, keys[last - 1])
            meta["remainingItemCount"] = len(items) - last
        info = self.resources.get(_key(r))
        kind = getattr(info, "kind", None) or str(r.plural or "").capitalize()
        page = items[first:last]
        table = self._table_wanted(request)
        if table is not None:
            include = request.params.get("includeObject") or "Metadata"
            result = _table(table, self._columns(r), page, include=include)
            result["metadata"] = meta
            return result
        # kmock 0.8 answers a list without apiVersion and kind; kubectl refuses such a list.
        return {"apiVersion": f"{r.group}/{r.version}" if r.group else r.version, "kind": f"{kind}List",
                "metadata": meta, "items": page}

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[Any]:
        """The changes after ``resourceVersion`` (0 or none: an ADDED per object first), until
        ``timeoutSeconds``, with BOOKMARKs when asked; 410 as an ERROR event (watch_cache)."""
        yield b""  # the headers: a watch is a stream from the start
        r = request.resource
        assert r is not None
        feed = self._feed(r)
        since = cache.parse_resource_version(request.params.get("resourceVersion"))  # checked in _handle
        loop = asyncio.get_running_loop()
        timeout = request.params.get("timeoutSeconds")
        deadline = loop.time() + float(timeout) if timeout else None
        bookmarks = request.params.get("allowWatchBookmarks") in ("true", "1")
        info = self.resources.get(_key(r))
        bookmark_object = {"kind": getattr(info, "kind", None) or str(r.plural or "").capitalize(),
                           "apiVersion": f"{r.group}/{r.version}" if r.group else r.version}
        if not since:
            seq = feed.end
            current = [(_object_key(o, namespaced=False), o) for (res, ns, name), o in self._objects.items()
                       if _matches(request, res, ns, name) and not o.deleted]
            at = feed.latest
            for _, obj in sorted(current, key=lambda pair: pair[0]):
                yield {"type": "ADDED", "object": obj.raw}
            last_rv = at
            if bookmarks:  # the end of the initial events is bookmarked at once (measured: within 1 s)
                yield {"type": "BOOKMARK",
                       "object": {**bookmark_object, "metadata": {"resourceVersion": str(at)}}}
        elif since < feed.floor:
            yield cache.too_old(since, feed.floor)
            return
        else:
            seq = feed.after(since)
            # The watcher starts at the cache's version: only a change after that moves a BOOKMARK.
            last_rv = max(since, feed.latest)
        next_bookmark = self._next_bookmark(loop.time(), deadline) if bookmarks else None
        while True:
            if seq < feed.start:
                return  # this watcher fell behind what the cache keeps: the apiserver ends it too
            changes = feed.read(seq)
            seq += len(changes)
            for change in changes:
                if _matches(request, r, change.namespace, change.name):
                    last_rv = max(last_rv, change.rv)
                    yield change.event
            now = loop.time()
            if next_bookmark is not None and now >= next_bookmark:
                if feed.latest > last_rv:
                    last_rv = feed.latest
                    yield {"type": "BOOKMARK",
                           "object": {**bookmark_object, "metadata": {"resourceVersion": str(last_rv)}}}
                next_bookmark = self._next_bookmark(now, deadline)
            if deadline is not None and now >= deadline:
                return
            wake = min((t for t in (deadline, next_bookmark) if t is not None), default=None)
            await feed.wait(None if wake is None else wake - now)

    def _next_bookmark(self, now: float, deadline: float | None) -> float | None:
        """When the cacher sends a watcher its next BOOKMARK: a minute on, or 2 s before its timeout
        if that is sooner; never when that moment has passed."""
        at = now + self.bookmark_interval_s
        if deadline is not None:
            at = min(at, deadline - cache.BOOKMARK_BEFORE_TIMEOUT_S)
        return at if at >= now else None

    def _feed(self, resource: Any) -> cache.Feed:
        feed = self._feeds.get(resource)
        if feed is None:
            feed = self._feeds[resource] = cache.Feed(floor=self._floor, latest=self.resource_version)
        return feed

    def record(self, resource: Any, event: dict[str, Any]) -> None:
        """A change of ``resource``, as kmock announces it: stamp the next resourceVersion on the stored
        object (ADDED, MODIFIED) and on the event's copy (a deletion too), and keep it for watches."""
        obj = event.get("object")
        if not isinstance(obj, dict):
            return
        rv = int(self.next_resource_version())
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        if event.get("type") != "DELETED":
            meta["resourceVersion"] = str(rv)  # the stored version shares this dict
        copy = {**obj, "metadata": {**meta, "resourceVersion": str(rv)}}
        self._feed(resource).record(cache.Change(rv=rv, namespace=meta.get("namespace"),
                                                 name=str(meta.get("name") or ""),
                                                 event={"type": event.get("type"), "object": copy},
                                                 at=time.monotonic()))

    def forget_history(self) -> None:
        """What an API server restarted after etcd compacted gives its clients: every watch ends, a watch
        from an earlier resourceVersion gets 410, and so does an earlier list's ``continue``."""
        self._snapshots.forget_before(self.resource_version)  # etcd compacted at the newest revision
        self.next_resource_version()  # a starting apiserver writes (its identity Lease): a new revision
        self._floor = self.resource_version
        for feed in self._feeds.values():
            feed.forget(floor=self._floor)
        self.close_watches()

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
        self.resource_version += 1
        return str(self.resource_version)

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
            if content_type == "application/merge-patch+json" and isinstance(request.data, dict):
                # kmock merges by RFC 7386 alone; the API server also drops nulls inside arrays.
                request.data.update(patching.as_kmock_patch(request.data))
        _REQUEST.set(request)
        if request.resource is not None:
            if request.method == "PUT":
                return await self._serve_put(request)
            answer = self._answer_first(request)
            if answer is not None:
                return answer
        if request.resource is not None and isinstance(request.data, dict):
            meta = request.data.setdefault("metadata", {})
            if request.action == kmock.action.CREATE:
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", _now())
                meta.pop("resourceVersion", None)  # stamped when the change is recorded
            elif request.action == kmock.action.UPDATE:
                meta.pop("resourceVersion", None)  # a precondition, checked above; stamped when recorded
        if request.action == kmock.action.WATCH:
            table = self._table_wanted(request)
            if table is not None:
                return await self._serve_table_watch(request, table)
        response = await super()._handle(request)
        if request.action == kmock.action.CREATE and response.status == 200 and not response.prepared:
            response.set_status(201)  # the apiserver's "Created" (kmock answers 200)
        return response

    def _answer_first(self, request: kmock.Request) -> aiohttp.web.StreamResponse | None:
        """What the apiserver answers ``request`` with before writing anything, if it does: a Status for
        a resourceVersion it cannot parse, an object that exists (create) or does not (patch), a stale
        ``metadata.resourceVersion`` in a patch, an invalid Event; the object as it is for a patch that
        changes nothing (no new version, no event)."""
        r = request.resource
        assert r is not None
        if request.action in (kmock.action.LIST, kmock.action.WATCH):
            try:
                cache.parse_resource_version(request.params.get("resourceVersion"))
            except ValueError as exc:
                if request.action == kmock.action.WATCH:
                    return _status_response(cache.status(500, "", str(exc)))
                return _status_response(cache.status(400, "BadRequest", f"invalid resource version: {exc}"))
            return None
        data: dict[str, Any] = request.data if isinstance(request.data, dict) else {}
        meta: dict[str, Any] = data["metadata"] if isinstance(data.get("metadata"), dict) else {}
        if request.action == kmock.action.CREATE:
            name = str(meta.get("name") or "")
            namespace = request.namespace or meta.get("namespace")
            key = (r, namespace, name)
            if key in self._objects and not self._objects[key].deleted:
                message = f'{_qualified(r)} "{name}" already exists'
                details = _details(r, name)
                return _status_response(cache.status(409, "AlreadyExists", message, details=details))
            if r.plural == "events" and not r.group:
                errors = validation.event_errors(data, namespace=str(namespace or ""))
                if errors:
                    return _status_response(validation.invalid_status("Event", name, errors))
            return None
        if request.action != kmock.action.UPDATE or request.name is None:
            return None
        name = request.name
        key = (r, request.namespace, name)
        if key not in self._objects or self._objects[key].deleted:
            return _status_response(cache.status(
                404, "NotFound", f'{_qualified(r)} "{name}" not found', details=_details(r, name)))
        current = self._objects[key].raw
        current_meta = current.get("metadata") or {}
        wanted = meta.get("resourceVersion")
        if wanted not in (None, ""):
            if not str(wanted).isdigit():
                return _status_response(
                    cache.status(500, "", f'strconv.ParseUint: parsing "{wanted}": invalid syntax'))
            if str(wanted) != str(current_meta.get("resourceVersion")):
                message = (f'Operation cannot be fulfilled on {_qualified(r)} "{name}": the object has been '
                           "modified; please apply your changes to the latest version and try again")
                return _status_response(cache.status(409, "Conflict", message, details=_details(r, name)))
        content_type = (request.headers.get("Content-Type") or "").split(";")[0].strip()
        if content_type != "application/json-patch+json":
            unversioned = {k: v for k, v in current_meta.items() if k != "resourceVersion"}
            after = cache.merged(current, {**data, "metadata": {**meta, "resourceVersion": None}})
            if after == {**current, "metadata": unversioned}:
                return aiohttp.web.json_response(current)
        return None

    async def _serve_put(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        """An update (PUT) of a whole object, which kmock does not serve: 404 for a missing object (a
        Lease is created: `CREATE_ON_UPDATE`), 409
        Conflict for a stale ``metadata.resourceVersion`` (none: unconditional, as the apiserver allows
        for most resources, but 422 for those in `CONDITIONAL_UPDATES_ONLY`), nothing written when
        nothing changes; else the object is replaced (its uid and creationTimestamp kept) and the
        change recorded."""
        r = request.resource
        assert r is not None
        name = request.name
        if name is None or not request.url.path.rstrip("/").endswith(f"/{name}") \
                or not isinstance(request.data, dict):
            message = "the server does not allow this method on the requested resource"
            return _status_response(cache.status(405, "MethodNotAllowed", message))
        key = (r, request.namespace, name)
        async with self._lock:
            if key not in self._objects or self._objects[key].deleted:
                if _key(r) not in CREATE_ON_UPDATE:
                    return _status_response(cache.status(
                        404, "NotFound", f'{_qualified(r)} "{name}" not found', details=_details(r, name)))
                created: dict[str, Any] = dict(request.data.get("metadata") or {})
                created.pop("resourceVersion", None)
                created.update(name=name, uid=str(uuid.uuid4()), creationTimestamp=_now())
                if request.namespace is not None:
                    created["namespace"] = request.namespace
                self._objects[key] = {**request.data, "metadata": created}
                self.record(r, {"type": "ADDED", "object": self._objects[key].raw})
                return aiohttp.web.json_response(self._objects[key].raw, status=201)
            current = self._objects[key].raw
            current_meta = dict(current.get("metadata") or {})
            body: dict[str, Any] = dict(request.data)
            meta: dict[str, Any] = dict(body.get("metadata") or {})
            wanted = meta.pop("resourceVersion", None)
            if wanted in (None, "") and _key(r) in CONDITIONAL_UPDATES_ONLY:
                detail = "Invalid value: 0: must be specified for an update"
                cause = {"reason": "FieldValueInvalid", "message": detail,
                         "field": "metadata.resourceVersion"}
                message = f'{_qualified(r)} "{name}" is invalid: metadata.resourceVersion: {detail}'
                return _status_response(cache.status(422, "Invalid", message,
                                                     details={**_details(r, name), "causes": [cause]}))
            if wanted not in (None, "") and str(wanted) != str(current_meta.get("resourceVersion")):
                message = (f'Operation cannot be fulfilled on {_qualified(r)} "{name}": the object has been '
                           "modified; please apply your changes to the latest version and try again")
                return _status_response(cache.status(409, "Conflict", message, details=_details(r, name)))
            for kept in ("uid", "creationTimestamp", "name", "namespace"):
                if kept in current_meta:
                    meta[kept] = current_meta[kept]
            replacement = {**body, "metadata": meta}
            current_meta.pop("resourceVersion", None)
            if replacement == {**current, "metadata": current_meta}:
                return aiohttp.web.json_response(current)
            self._objects[key] = replacement
            stored = self._objects[key].raw
            self.record(r, {"type": "MODIFIED", "object": stored})
        return aiohttp.web.json_response(self._objects[key].raw)

    async def _render_error(self, exc: Exception) -> aiohttp.web.StreamResponse:
        """kmock's errors worded as the apiserver words them (404 NotFound, 409 AlreadyExists)."""
        if isinstance(exc, _Answer):
            return aiohttp.web.json_response(exc.body, status=exc.code)
        request = _REQUEST.get()
        r = request.resource if request is not None else None
        if request is not None and r is not None and r.plural:
            name = str(request.name or (request.data.get("metadata") or {}).get("name") or "") \
                if isinstance(request.data, dict) or request.name else ""
            if isinstance(exc, kmock.KubernetesObjectNotFoundError):
                body = cache.status(404, "NotFound", f'{_qualified(r)} "{name}" not found',
                                    details=_details(r, name))
                return aiohttp.web.json_response(body, status=404)
        return await super()._render_error(exc)

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
                if event.get("type") not in ("ADDED", "MODIFIED", "DELETED"):
                    await response.write(json.dumps(event).encode() + b"\n")  # BOOKMARK, ERROR
                    continue
                obj: dict[str, Any] = event["object"]
                if _version((obj.get("metadata") or {}).get("resourceVersion")) <= since:
                    continue  # not changed since the list
                row = _table(api_version, columns, [obj], include=include)
                change = {"type": event.get("type"), "object": row}
                await response.write(json.dumps(change).encode() + b"\n")
        return response


def _status_response(body: dict[str, Any]) -> aiohttp.web.StreamResponse:
    return aiohttp.web.json_response(body, status=int(body["code"]))


class _Answer(Exception):
    """A Status to answer with, raised where kmock's handlers run."""

    def __init__(self, code: int, body: dict[str, Any]) -> None:
        super().__init__(body.get("message"))
        self.code = code
        self.body = body


class _Recorder:
    """Stands where kmock's bus of one resource stood: what is put on it is recorded by the API."""

    def __init__(self, api: KubernetesApi, resource: Any) -> None:
        self.api = api
        self.resource = resource

    async def put(self, *items: Any) -> None:
        for item in items:
            if isinstance(item, dict):
                self.api.record(self.resource, item)


class _Recorders(dict[Any, _Recorder]):
    def __init__(self, api: KubernetesApi) -> None:
        super().__init__()
        self.api = api

    def __missing__(self, resource: Any) -> _Recorder:
        recorder = self[resource] = _Recorder(self.api, resource)
        return recorder


def _matches(request: kmock.Request, resource: Any, namespace: str | None, name: str) -> bool:
    """Whether an object is one a list or watch asks for (kmock's own test: resource, namespace, name)."""
    return bool(resource == request.resource
                and (request.namespace is None or namespace == request.namespace)
                and (request.name is None or name == request.name))


def _object_key(obj: Any, *, namespaced: bool) -> str:
    """An object's key as etcd orders a list: ``/namespace/name`` (``/name`` within one namespace)."""
    meta = obj.get("metadata") or {}
    if namespaced or not meta.get("namespace"):
        return f"/{meta.get('name') or ''}"
    return f"/{meta.get('namespace')}/{meta.get('name') or ''}"


def _qualified(r: Any) -> str:
    """A resource as the apiserver's messages name it: ``configmaps``, ``leases.coordination.k8s.io``."""
    return f"{r.plural}.{r.group}" if r.group else str(r.plural)


def _details(r: Any, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if r.group:
        details["group"] = r.group
    details["kind"] = r.plural
    return details


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
