"""The chart's RBAC is exactly what the code uses: every API call allowed, every granted permission used.

``_story`` runs the operator and the agent from each scenario's rendering through
everything they do (watching, creating a TrainingJob's pod, following logs, failure
reports on every followed kind, Events, the leader Lease, access reviews for
``GET /logs``, the agent's pod listing and owner reads), and the emulated API records
each request's attributes. Each service account's calls must all be allowed by the
rules bound to it (no less), and each (group, resource, verb) of each rule must have
been used by some call (no more).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from podmortem_demo.emulated import calls

from . import _rbac, _render, _story


@pytest.mark.parametrize("scenario", ["defaults", *_render.SCENARIOS])
def test_rbac_is_what_the_code_uses(story_of: Callable[[str], _story.Story], scenario: str) -> None:
    story = story_of(scenario)
    assert "logs-served" in story.reached, f"the story did not finish: {story.reached}"
    for component, account in story.accounts.items():
        made = story.calls[component]
        assert made, f"{component} made no API call"
        rules = _rbac.rules_for(story.rendered, account=account, namespace=story.namespace)
        missing = _rbac.unallowed(made, rules)
        assert not missing, f"{component}: calls the chart does not allow:\n" + "\n".join(missing)
        unused = _rbac.unused(made, rules)
        assert not unused, f"{component}: rules no call used:\n" + "\n".join(unused)


@pytest.mark.parametrize(("method", "path", "query", "expected"), [
    ("GET", "/api/v1/pods", {}, ("list", "", "pods", "", "", "")),
    ("GET", "/api/v1/namespaces/ns/pods", {"watch": "true"}, ("watch", "", "pods", "", "ns", "")),
    ("GET", "/api/v1/watch/namespaces/ns/pods", {}, ("watch", "", "pods", "", "ns", "")),
    ("GET", "/api/v1/namespaces/ns/pods/p/log", {"follow": "true"}, ("get", "", "pods", "log", "ns", "p")),
    ("POST", "/api/v1/namespaces/ns/events", {}, ("create", "", "events", "", "ns", "")),
    ("PATCH", "/apis/podmortem.io/v1alpha1/namespaces/ns/trainingjobs/t/status", {},
     ("patch", "podmortem.io", "trainingjobs", "status", "ns", "t")),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", {},
     ("update", "coordination.k8s.io", "leases", "", "ns", "l")),
    ("DELETE", "/apis/batch/v1/namespaces/ns/jobs", {}, ("deletecollection", "batch", "jobs", "", "ns", "")),
    ("GET", "/api/v1/namespaces", {}, ("list", "", "namespaces", "", "", "")),
    ("GET", "/api/v1/namespaces/ns", {}, ("get", "", "namespaces", "", "", "ns")),
    ("PUT", "/api/v1/namespaces/ns/finalize", {}, ("update", "", "namespaces", "finalize", "", "ns")),
    ("POST", "/apis/authentication.k8s.io/v1/tokenreviews", {},
     ("create", "authentication.k8s.io", "tokenreviews", "", "", "")),
    ("GET", "/apis/batch/v1", {}, ("get", "", "", "", "", "")),
    ("GET", "/api", {}, ("get", "", "", "", "", "")),
])
def test_request_attributes_as_the_apiserver_derives_them(
        method: str, path: str, query: dict[str, str], expected: tuple[str, ...]) -> None:
    call = calls.attributes(method, path, query)
    assert (call.verb, call.group, call.resource, call.subresource, call.namespace, call.name) == expected


def _rule(**kw: object) -> _rbac.Rule:
    base: dict[str, object] = dict(role="ClusterRole/x", index=0, groups=frozenset({""}),
                                   resources=frozenset({"pods"}), verbs=frozenset({"get"}),
                                   names=frozenset(), namespace=None)
    base.update(kw)
    return _rbac.Rule(**base)  # type: ignore[arg-type]


def test_rules_match_as_rbac_does() -> None:
    get_log = calls.attributes("GET", "/api/v1/namespaces/a/pods/p/log", {})
    assert not _rule().allows(get_log), "pods does not grant pods/log"
    assert _rule(resources=frozenset({"pods/log"})).allows(get_log)
    assert not _rule(resources=frozenset({"pods/log"}), namespace="b").allows(get_log)
    create = calls.attributes("POST", "/apis/coordination.k8s.io/v1/namespaces/a/leases", {})
    lease = _rule(groups=frozenset({"coordination.k8s.io"}), resources=frozenset({"leases"}),
                  verbs=frozenset({"create"}), names=frozenset({"l"}))
    assert not lease.allows(create), "resourceNames never match a create"
    assert _rbac.unused([create], [lease]) == ["ClusterRole/x rule 0: create coordination.k8s.io/leases"]
    assert _rbac.unallowed([get_log], [_rule()]) == ["get core/pods/log p in a"]
