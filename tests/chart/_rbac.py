"""The chart's RBAC as the apiserver's authorizer applies it: which rendered rules grant an account what.

A rule is bound through a ClusterRoleBinding (everywhere, cluster-scoped
requests included) or a RoleBinding (only in that binding's namespace), and
matches a request's attributes as RBAC matches them: group, ``resource`` or
``resource/subresource``, verb, and ``resourceNames`` (which never match a
``create`` or a ``list``, whose requests carry no name).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from podmortem_demo.emulated import ApiCall

from . import _render

#: Non-resource paths every authenticated user may GET (the ``system:discovery`` and
#: ``system:public-info-viewer`` ClusterRoles of every cluster): the chart needs no rule for them.
DISCOVERY_PREFIXES = ("/api", "/apis", "/version", "/openapi")


@dataclass(frozen=True)
class Rule:
    """One rule of one (Cluster)Role, where a binding puts it: ``namespace`` None means everywhere."""

    role: str
    index: int
    groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    names: frozenset[str]
    namespace: str | None

    def allows(self, call: ApiCall) -> bool:
        if not call.is_resource:
            return False
        if self.namespace is not None and call.namespace != self.namespace:
            return False
        if self.names and call.name not in self.names:
            return False
        return (("*" in self.groups or call.group in self.groups)
                and ("*" in self.resources or call.resource_name in self.resources)
                and ("*" in self.verbs or call.verb in self.verbs))

    def permissions(self) -> Iterable[tuple[str, str, str]]:
        """Each (group, resource, verb) the rule grants."""
        for group in sorted(self.groups):
            for resource in sorted(self.resources):
                for verb in sorted(self.verbs):
                    yield group, resource, verb

    def describe(self) -> str:
        names = f" names={sorted(self.names)}" if self.names else ""
        where = f" in {self.namespace}" if self.namespace is not None else " cluster-wide"
        return f"{self.role} rule {self.index}: {sorted(self.groups)} {sorted(self.resources)} " \
               f"{sorted(self.verbs)}{names}{where}"


def rules_for(rendered: _render.Rendered, *, account: str, namespace: str) -> list[Rule]:
    """Every rule bound to the ServiceAccount ``namespace/account``, once per binding."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
             for o in rendered.objects if o["kind"] in ("ClusterRole", "Role")}
    out: list[Rule] = []
    for binding in rendered.objects:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not any(s.get("kind") == "ServiceAccount" and s.get("name") == account
                   and s.get("namespace") == namespace for s in binding.get("subjects") or []):
            continue
        bound_in = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        ref = binding["roleRef"]
        role_ns = bound_in if ref["kind"] == "Role" else None
        role = roles.get((ref["kind"], role_ns, ref["name"]))
        assert role is not None, f"{binding['kind']} {binding['metadata']['name']} binds a role not rendered"
        for index, rule in enumerate(role.get("rules") or []):
            assert "nonResourceURLs" not in rule, "the chart grants no non-resource URLs"
            out.append(Rule(role=f"{ref['kind']}/{ref['name']}", index=index,
                            groups=frozenset(rule.get("apiGroups") or ()),
                            resources=frozenset(rule.get("resources") or ()),
                            verbs=frozenset(rule.get("verbs") or ()),
                            names=frozenset(rule.get("resourceNames") or ()),
                            namespace=bound_in))
    return out


def is_discovery(call: ApiCall) -> bool:
    return not call.is_resource and call.verb == "get" and any(
        call.path == p or call.path.startswith(p + "/") for p in DISCOVERY_PREFIXES)


def unallowed(calls: Iterable[ApiCall], rules: list[Rule]) -> list[str]:
    """Each distinct call no rule allows (discovery aside), described."""
    out = set()
    for call in calls:
        if is_discovery(call) or any(r.allows(call) for r in rules):
            continue
        what = call.resource_name or call.path
        where = f" in {call.namespace}" if call.namespace else " (cluster scope)"
        named = f" {call.name}" if call.name else ""
        out.add(f"{call.verb} {call.group or 'core'}/{what}{named}{where}")
    return sorted(out)


def unused(calls: Iterable[ApiCall], rules: list[Rule]) -> list[str]:
    """Each (group, resource, verb) of a rule that no call exercised through any of that rule's bindings."""
    calls = [c for c in calls if c.is_resource]
    used: set[tuple[str, int, str, str, str]] = set()
    for rule in rules:
        for call in calls:
            if rule.allows(call):
                used.add((rule.role, rule.index, call.group, call.resource_name, call.verb))
    out = set()
    for rule in rules:
        for group, resource, verb in rule.permissions():
            if not any(u[:2] == (rule.role, rule.index) and u[4] == verb and u[3] == resource
                       and (u[2] == group or group == "*") for u in used):
                out.add(f"{rule.role} rule {rule.index}: {verb} {group or 'core'}/{resource}")
    return sorted(out)
