"""Removing any one rule from the chart's operator roles breaks the path, as the real RBAC authorizer
decides: each rule is needed, and this test names which step needs it.

For each rule of each Role or ClusterRole the chart binds to the operator's ServiceAccount, the chart
is rendered with the real helm, that one rule is dropped, the RBAC objects are applied, and the
operator runs from the rendered Deployment with a real token. The path then must break: its
readiness, the TrainingJob's pod, the log read back through ``GET /logs`` (TokenReview and
SubjectAccessReview), the report, its Event, or the lookup of the node agent. With every rule kept the
same path succeeds (the first case), so a case that breaks is broken by its missing rule.

The values are the chart's defaults with ``watchNamespaces`` set to the jobs' namespace: the
operator's ClusterRole is then bound by a RoleBinding there only, so the release namespace's own Role
(the Lease, finding the agent) is the only grant in that namespace, and every rule is on its own.
With the defaults (a ClusterRoleBinding), that Role's ``list pods`` is also granted by the ClusterRole.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from tests.chart import _render
from tests.controlplane import _release as rel
from tests.controlplane.cluster import ControlPlane

#: Stand-ins for the foreign kinds' CRDs that a cluster with Kubeflow and JobSet has (batch/jobs is
#: built in): the operator then lists and watches them, so their rules are on the readiness path.
STAND_IN_CRDS = (("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
                 ("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"))
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
#: Each step's bound: a broken path fails at its first step, after this long at most.
STEP_TIMEOUT = 60


@dataclass(frozen=True)
class RuleRef:
    """One rule of one role: the role's kind, its name's suffix after the release's full name, an index."""

    kind: str
    suffix: str
    index: int
    rule: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def id(self) -> str:
        rule = dict(self.rule)
        groups = ",".join(g or "core" for g in rule.get("apiGroups", ()))
        names = f"[{','.join(rule['resourceNames'])}]" if rule.get("resourceNames") else ""
        return (f"{self.kind}/{self.suffix}#{self.index}:{groups}/{','.join(rule.get('resources', ()))}"
                f"{names}:{','.join(rule.get('verbs', ()))}")


def _values(*, fullname: str, jobs: str) -> dict[str, Any]:
    return {"fullnameOverride": fullname, "watchNamespaces": [jobs],
            # The report's kernel-record wait: the agent's lookup is part of the path, not its wait.
            "operator": {"agentRecordWaitSeconds": 1}}


def _operator_rules() -> list[RuleRef]:
    """The operator's rules as the chart renders them (collected without a cluster)."""
    with helm.Chart.load(_render.CHART_DIR) as chart:
        rendered = _render.render(chart, _values(fullname="pm", jobs="jobs"), namespace="rel")
    out = []
    for role in rendered.objects:
        if role["kind"] not in ("ClusterRole", "Role"):
            continue
        if role["metadata"]["labels"].get("app.kubernetes.io/component") != "operator":
            continue
        suffix = role["metadata"]["name"].removeprefix("pm-")
        for index, rule in enumerate(role.get("rules") or []):
            out.append(RuleRef(role["kind"], suffix, index,
                               tuple(sorted((k, tuple(v)) for k, v in rule.items()))))
    return out


RULES = _operator_rules()


def _without(rendered: list[dict[str, Any]], fullname: str, dropped: RuleRef | None) -> list[dict[str, Any]]:
    objects = copy.deepcopy(rendered)
    if dropped is None:
        return objects
    for obj in objects:
        if obj["kind"] == dropped.kind and obj["metadata"]["name"] == f"{fullname}-{dropped.suffix}":
            rule = obj["rules"].pop(dropped.index)
            # Collected for the full name "pm": a resourceName carries the full name.
            seen = {k: [n.replace(f"{fullname}-", "pm-", 1) for n in v] if k == "resourceNames" else v
                    for k, v in rule.items()}
            assert tuple(sorted((k, tuple(v)) for k, v in seen.items())) == dropped.rule, rule
            return objects
    raise AssertionError(f"{dropped.id}: no such rule in this rendering")


@pytest.fixture(scope="module")
def stand_in_crds(control_plane: ControlPlane) -> None:
    """The chart's CRD (as ``helm install`` would have put it) and the foreign kinds' stand-ins."""
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(_render.CRD_FILE))
    control_plane.kubectl("wait", "--for=condition=Established", "crd/trainingjobs.podmortem.io",
                          "--timeout=60s")
    for group, version, plural, kind in STAND_IN_CRDS:
        control_plane.apply({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                     "versions": [{"name": version, "served": True, "storage": True,
                                   "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": {
                                       "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}})
        control_plane.kubectl("wait", "--for=condition=Established", f"crd/{plural}.{group}", "--timeout=60s")


@pytest.fixture
def jobs_namespace(control_plane: ControlPlane) -> Iterator[str]:
    name = f"jobs-{uuid.uuid4().hex[:6]}"
    control_plane.kubectl("create", "namespace", name)
    yield name
    control_plane.run("kubectl", "delete", "namespace", name, "--wait=false", check=False)


def _run(cp: ControlPlane, *, namespace: str, jobs: str, tmp: Path, dropped: RuleRef | None) -> rel.PathRun:
    for attempt in range(3):
        try:
            return _run_once(cp, namespace=namespace, jobs=jobs, tmp=tmp / f"try{attempt}", dropped=dropped)
        except rel.PortTaken:
            continue
    raise AssertionError("the operator's ports were taken three times in a row")


def _run_once(cp: ControlPlane, *, namespace: str, jobs: str, tmp: Path, dropped: RuleRef | None
              ) -> rel.PathRun:
    fullname = f"pm-{uuid.uuid4().hex[:6]}"
    rendered = rel.template(cp, release="podmortem", namespace=namespace,
                            values={**rel.port_values(), "fullnameOverride": fullname,
                                    "watchNamespaces": [jobs], "operator.agentRecordWaitSeconds": 1})
    rbac = _without([o for o in rendered.objects if o["kind"] in RBAC_KINDS], fullname, dropped)
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
    reader = rel.log_reader(cp, jobs)
    run = rel.PathRun()
    operator = rel.start_operator(cp, rendered, tmp=tmp / "op", volumes=tmp / "op-pod")
    try:
        rel.ready(operator, timeout=STEP_TIMEOUT + 30)
        run.reached.append("ready")
        rel.run_path(cp, operator, namespace=jobs, name="rbac", reader=reader, timeout=STEP_TIMEOUT, run=run)
        errors = " ".join(run.report.get("evidence", {}).get("errors") or [])
        kernel = str(run.report.get("evidence", {}).get("kernelRecord") or {})
        if "could not look up the agent pod" in errors + kernel:
            raise rel.PathBroken(f"finding the node agent: {errors} {kernel}")
        run.reached.append("agent-lookup")
    finally:
        operator.stop()
        for obj in rbac:
            if obj["kind"].startswith("Cluster"):
                cp.run("kubectl", "delete", obj["kind"].lower(), obj["metadata"]["name"], "--wait=false",
                       check=False)
    return run


def test_with_every_rule_the_path_succeeds(control_plane: ControlPlane, stand_in_crds: None, namespace: str,
                                           jobs_namespace: str, tmp_path: Path) -> None:
    run = _run(control_plane, namespace=namespace, jobs=jobs_namespace, tmp=tmp_path, dropped=None)
    assert run.reached == ["ready", "pod", "log", "report", "event", "agent-lookup"]


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_without_this_rule_the_path_breaks(control_plane: ControlPlane, stand_in_crds: None, namespace: str,
                                           jobs_namespace: str, tmp_path: Path, rule: RuleRef) -> None:
    with pytest.raises(rel.PathBroken) as broken:
        _run(control_plane, namespace=namespace, jobs=jobs_namespace, tmp=tmp_path, dropped=rule)
    print(f"{rule.id}: broken at {str(broken.value).splitlines()[0][:300]}")
