"""The chart's security promises, checked on every scenario's rendered manifests."""

from __future__ import annotations

from typing import Any

from podmortem import quantity

from . import _render

AGENT_CAPABILITIES = {"SYSLOG", "SYS_PTRACE"}
#: The one writable host path: where the agent remembers the last kernel record it read.
AGENT_STATE_MOUNT = "/var/lib/podmortem/agent"
#: Verbs that would let a compromised operator do more than follow and report.
FORBIDDEN_VERBS = {"*", "delete", "deletecollection", "escalate", "bind", "impersonate"}


def rbac_rules(rendered: _render.Rendered) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [
        (role, rule)
        for role in rendered.objects
        if role["kind"] in ("Role", "ClusterRole")
        for rule in role.get("rules", [])
    ]


def granted(rendered: _render.Rendered, component: str) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) triples the component's roles grant."""
    triples = set()
    for role, rule in rbac_rules(rendered):
        if role["metadata"]["labels"]["app.kubernetes.io/component"] != component:
            continue
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    triples.add((group, resource, verb))
    return triples


def test_nothing_privileged(rendered: _render.Rendered) -> None:
    for component, pod in _render.pod_specs(rendered):
        assert not pod.get("hostNetwork") and not pod.get("hostIPC"), component
        for container in _render.containers(pod):
            ctx = container.get("securityContext", {})
            assert ctx.get("privileged") is False, (component, container["name"])
            assert ctx.get("allowPrivilegeEscalation") is False, (component, container["name"])
            assert ctx.get("readOnlyRootFilesystem") is True, (component, container["name"])
            assert ctx["capabilities"]["drop"] == ["ALL"], (component, container["name"])


def test_operator_runs_as_non_root(rendered: _render.Rendered) -> None:
    for component, pod in _render.pod_specs(rendered):
        if component != "operator":
            continue
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in _render.containers(pod):
            assert "add" not in container["securityContext"]["capabilities"]


def test_memory_requests_and_limits_by_default(default_rendered: _render.Rendered) -> None:
    """Both processes get a memory request and a limit above it (sized in values.yaml from measured RSS;
    test_chart_pods_start checks each process's peak stays under them)."""
    components = set()
    for component, pod in _render.pod_specs(default_rendered):
        components.add(component)
        for container in _render.containers(pod):
            resources = container["resources"]
            memory = {k: quantity.parse_bytes(resources[k]["memory"]) for k in ("requests", "limits")}
            assert memory["requests"] <= memory["limits"], component
    assert components == {"operator", "agent"}


def test_agent_adds_only_syslog_and_ptrace(rendered: _render.Rendered) -> None:
    for component, pod in _render.pod_specs(rendered):
        if component != "agent":
            continue
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in _render.containers(pod):
            added = set(container["securityContext"]["capabilities"].get("add", []))
            assert added <= AGENT_CAPABILITIES


def test_host_mounts_are_read_only(rendered: _render.Rendered) -> None:
    for component, pod in _render.pod_specs(rendered):
        host_volumes = {v["name"]: v["hostPath"] for v in pod.get("volumes", []) if "hostPath" in v}
        for container in _render.containers(pod):
            for mount in container.get("volumeMounts", []):
                if mount["name"] not in host_volumes:
                    continue
                if mount["mountPath"] == AGENT_STATE_MOUNT:
                    assert host_volumes[mount["name"]]["path"].startswith("/var/lib/podmortem")
                    continue
                assert mount.get("readOnly") is True, (component, mount)


def test_agent_host_mounts_by_default(default_rendered: _render.Rendered) -> None:
    agent = default_rendered.one("DaemonSet", "agent")["spec"]["template"]["spec"]
    host = {v["hostPath"]["path"]: v["hostPath"]["type"] for v in agent["volumes"] if "hostPath" in v}
    assert host == {
        "/proc": "Directory",
        "/sys/fs/cgroup": "Directory",
        "/dev/kmsg": "CharDevice",
        AGENT_STATE_MOUNT: "DirectoryOrCreate",
    }
    assert agent["hostPID"] is True
    tolerations = agent["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations


def test_no_wildcards_or_dangerous_verbs_in_rbac(rendered: _render.Rendered) -> None:
    for role, rule in rbac_rules(rendered):
        name = role["metadata"]["name"]
        for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
            assert not any("*" in item for item in rule.get(field, [])), (name, rule)
        assert not set(rule["verbs"]) & FORBIDDEN_VERBS, (name, rule)
        assert "secrets" not in rule["resources"], (name, rule)


def test_operator_gets_what_it_needs(rendered: _render.Rendered, scenario: str) -> None:
    values = _render.scenario_values(scenario)
    rights = granted(rendered, "operator")
    needed = {
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "pods", "create"),
        ("", "pods/log", "get"),
        ("", "events", "create"),
        ("podmortem.io", "trainingjobs", "get"),
        ("podmortem.io", "trainingjobs", "list"),
        ("podmortem.io", "trainingjobs", "watch"),
        ("podmortem.io", "trainingjobs/status", "patch"),
    }
    kinds = values.get("foreignKinds", [{"group": "batch", "resource": "jobs"}])
    for kind in kinds:
        for verb in ("get", "list", "watch", "patch"):
            needed.add((kind["group"], kind["resource"], verb))
    assert needed <= rights
    auth = {
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    }
    if values.get("operator", {}).get("http", {}).get("auth", "kubernetes") == "kubernetes":
        assert auth <= rights
    else:
        assert not auth & rights
    patch_pods = values.get("operator", {}).get("rbac", {}).get("patchPods", True)
    assert (("", "pods", "patch") in rights) == patch_pods


def test_agent_rbac_is_read_only(rendered: _render.Rendered) -> None:
    verbs = {verb for _, _, verb in granted(rendered, "agent")}
    assert verbs <= {"get", "list", "watch"}


def test_lease_rights_are_named(rendered: _render.Rendered) -> None:
    for role, rule in rbac_rules(rendered):
        if "leases" in rule["resources"] and set(rule["verbs"]) - {"create"}:
            assert rule["resourceNames"] == [
                e["value"]
                for e in rendered.one("Deployment", "operator")["spec"]["template"]["spec"]["containers"][0][
                    "env"
                ]
                if e["name"] == "PODMORTEM_LEADER_ELECTION_LEASE"
            ], role["metadata"]["name"]


def _components(bindings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The operator's and the agent's bindings: users' (``logReaders``) go where their values say."""
    return [b for b in bindings
            if b["metadata"]["labels"].get("app.kubernetes.io/component") != "log-readers"]


def test_bindings_follow_watch_namespaces(rendered: _render.Rendered, scenario: str) -> None:
    namespaces = _render.scenario_values(scenario).get("watchNamespaces", [])
    watched = {
        (b["metadata"]["namespace"], b["roleRef"]["name"])
        for b in _components(rendered.of_kind("RoleBinding"))
        if b["roleRef"]["kind"] == "ClusterRole"
    }
    cluster_bound = {
        b["roleRef"]["name"]
        for b in _components(rendered.of_kind("ClusterRoleBinding"))
        if not b["roleRef"]["name"].endswith("-operator-auth")
    }
    if namespaces:
        assert cluster_bound == set()
        assert {ns for ns, _ in watched} == set(namespaces)
    else:
        assert watched == set() and cluster_bound


def test_service_accounts_do_not_automount_but_pods_opt_in(rendered: _render.Rendered) -> None:
    for account in rendered.of_kind("ServiceAccount"):
        assert account["automountServiceAccountToken"] is False
    names = {a["metadata"]["name"] for a in rendered.of_kind("ServiceAccount")}
    for component, pod in _render.pod_specs(rendered):
        assert pod["serviceAccountName"] in names, component
        assert pod["automountServiceAccountToken"] is True
