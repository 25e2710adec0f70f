"""Which API call a request is, as the apiserver's authorizer sees it: the record RBAC is checked against.

The apiserver turns every request into request attributes (``k8s.io/apiserver``'s
``RequestInfoFactory``): a Kubernetes verb derived from the HTTP method, the path and
the query (``get`` of one object, ``list`` or ``watch`` of many, ``create``,
``update``, ``patch``, ``delete``), the API group, resource, subresource, namespace and
name. RBAC rules match exactly these. :func:`attributes` derives them the same way,
so a test can record what the operator and the agent really do and compare it with
the chart's rules. Paths outside ``/api`` and ``/apis/<group>/<version>/...``
(discovery, ``/version``, ``/openapi``) are non-resource requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: Subresources of a namespace itself (``/api/v1/namespaces/{name}/status``), as the apiserver lists them.
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_VERB_OF_METHOD = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class ApiCall:
    """One request's attributes, and who sent it (the bearer token; "" for none)."""

    user: str
    verb: str
    #: "" for the core group.
    group: str
    #: "" for a non-resource request (then ``path`` says what was asked).
    resource: str
    subresource: str
    #: "" for a cluster-scoped request (a cluster-wide list included).
    namespace: str
    name: str
    path: str

    @property
    def is_resource(self) -> bool:
        return bool(self.resource)

    @property
    def resource_name(self) -> str:
        """``resource`` or ``resource/subresource``, as an RBAC rule names it."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def attributes(method: str, path: str, query: Mapping[str, str], *, user: str = "") -> ApiCall:
    """The request attributes of ``method path?query``, derived as the apiserver derives them."""
    method = method.upper()
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        rest = []
    if not rest:
        return ApiCall(user=user, verb=method.lower(), group="", resource="", subresource="", namespace="",
                       name="", path=path)
    watch_prefix = rest[0] == "watch"
    if watch_prefix:  # the old /api/v1/watch/... form
        rest = rest[1:]
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
        else:  # the namespace object itself: cluster-scoped, named by its own name
            namespace = ""
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if method in ("GET", "HEAD"):
        watching = watch_prefix or _truthy(query.get("watch"))
        verb = "watch" if watching else "get" if name else "list"
    elif method == "DELETE" and not name:
        verb = "deletecollection"
    else:
        verb = _VERB_OF_METHOD.get(method, method.lower())
    return ApiCall(user=user, verb=verb, group=group, resource=resource, subresource=subresource,
                   namespace=namespace, name=name, path=path)
